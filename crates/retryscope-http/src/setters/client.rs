//! The setters every builder has ([`WithClientSettings`]) and those only
//! telemetry reads ([`WithTelemetry`]).

use super::{HasClientSettings, HasTelemetry};
use crate::{FallbackContext, FallbackFuture, NoBudgetToShare, UnknownFallback};
use opentelemetry::metrics::Meter;
use retryscope::budget::BudgetShare;
use retryscope::overload::{AdaptiveThrottle, ConcurrencyLimiter};
use retryscope::pace::PaceShare;
use retryscope::{CircuitBreaker, Pacer};
use retryscope_config::ConfigHandle;
use retryscope_otel::MeterChoice;
use std::sync::Arc;

/// The setters every builder has, HTTP and gRPC, whatever its telemetry
/// state: the retry log, the guards each dependency gets and their fleet
/// shares, fallbacks, and a configuration file. Implemented by
/// `retryscope_reqwest::RetryMiddlewareBuilder`,
/// `retryscope_tower::RetryLayerBuilder` and
/// `retryscope_tower::grpc::GrpcRetryLayerBuilder`; import it (or the
/// integration's `prelude`) to call them.
pub trait WithClientSettings: HasClientSettings {
    /// Writes no retry log: no `retryscope.backoff` event per retry and no
    /// `retryscope.gave_up` event per give-up, whether or not telemetry is on.
    fn no_retry_log(mut self) -> Self {
        self.client_settings_mut().retry_log = false;
        self
    }

    /// Gives each dependency a circuit breaker made by `make` (default:
    /// [`CircuitBreaker::default`](retryscope::CircuitBreaker::default): open at
    /// 50 % failures over at least 20 calls in 10 s, 5 s cool-down).
    fn breaker_per_dependency(mut self, make: impl Fn() -> CircuitBreaker + Send + Sync + 'static) -> Self {
        self.client_settings_mut().dependencies(|d| d.breaker(make));
        self
    }

    /// Calls every dependency, however often it fails: no circuit breaker.
    fn no_breaker(mut self) -> Self {
        self.client_settings_mut().dependencies(|d| d.no_breaker());
        self
    }

    /// Gives each dependency a pacer made by `make` (default:
    /// [`Pacer::new`](retryscope::Pacer::new)): what one response says
    /// about pace — a `Retry-After` on a 429 or 503, a quota in
    /// `RateLimit` or `X-RateLimit-*` headers on any response — holds
    /// back every call to that dependency, not only the one that got it
    /// (see [`retryscope::pace`](retryscope::pace)).
    fn pacer_per_dependency(mut self, make: impl Fn() -> Pacer + Send + Sync + 'static) -> Self {
        self.client_settings_mut().dependencies(|d| d.pacer(make));
        self
    }

    /// Keeps no pace per dependency: each call honours only the hints of
    /// its own responses.
    fn no_pacer(mut self) -> Self {
        self.client_settings_mut().dependencies(|d| d.no_pacer());
        self
    }

    // --- fleet pacing (issue 38) ---
    /// Shares each dependency's pacer with the other replicas of a fleet
    /// through `share` (e.g. `retryscope-redis`'s `RedisPaceShare`): a gate
    /// one replica learns holds them all, and a quota is divided among
    /// the replicas that spend it (see
    /// [`retryscope::pace::PaceShare`](retryscope::pace::PaceShare)).
    /// Needs a pacer (the default); a dependency that never reported a
    /// limit costs the share nothing.
    fn pace_shared(mut self, share: Arc<dyn PaceShare>) -> Self {
        self.client_settings_mut().dependencies(|d| d.pace_share(Some(share)));
        self
    }

    /// Divides each dependency's retry budget floor (`min_per_second`)
    /// among the live replicas of a fleet through `share` (e.g.
    /// `retryscope-redis`'s `RedisPaceShare`, the same object as
    /// `pace_shared`'s: one heartbeat), so that N replicas calling a
    /// dependency that is down retry at most `min_per_second` a second
    /// together, not N times that (see
    /// [`retryscope::budget::BudgetShare`](retryscope::budget::BudgetShare)).
    /// The ratio part of the budget needs no sharing: each replica's is
    /// already a share of its own requests. While the share cannot reach
    /// its store, `RedisPaceShare` keeps dividing by the fleet size it
    /// last read. With a configuration file (`config`), the budgets the
    /// file's guards make are shared too.
    ///
    /// # Errors
    ///
    /// [`NoBudgetToShare`](NoBudgetToShare) when the builder keeps
    /// no budget (`no_budget()` was set): the share would be ignored. A
    /// later `no_budget()` drops the share with the budget.
    fn budget_shared(mut self, share: Arc<dyn BudgetShare>) -> Result<Self, NoBudgetToShare> {
        if !self.client_settings().dependencies.has_budget() {
            return Err(NoBudgetToShare);
        }
        self.client_settings_mut().dependencies(|d| d.budget_share(Some(share)));
        Ok(self)
    }

    /// Gives each dependency a client-side adaptive throttle made by
    /// `make` (the SRE book's, [`AdaptiveThrottle::default`](retryscope::overload::AdaptiveThrottle::default):
    /// `K` = 2 over two minutes): an attempt is rejected locally, never
    /// sent, with a probability that grows as the dependency accepts
    /// fewer of the client's requests (see
    /// [`retryscope::overload`](retryscope::overload)). Off by default.
    fn adaptive_throttle_per_dependency(
        mut self,
        make: impl Fn() -> AdaptiveThrottle + Send + Sync + 'static,
    ) -> Self {
        self.client_settings_mut().adaptive_throttle = Some(Arc::new(make));
        self
    }

    /// Rejects nothing locally: no adaptive throttle (the default).
    fn no_adaptive_throttle(mut self) -> Self {
        self.client_settings_mut().adaptive_throttle = None;
        self
    }

    /// Gives each dependency an adaptive concurrency limit made by
    /// `make` (e.g. [`ConcurrencyLimiter::new`](retryscope::overload::ConcurrencyLimiter::new)
    /// of an [`Aimd`](retryscope::overload::Aimd) or a
    /// [`Gradient2`](retryscope::overload::Gradient2)): every attempt
    /// takes a slot and gives it back with its round trip; one that finds
    /// the limit full waits up to the limiter's `max_wait`, then is not
    /// sent (see [`retryscope::overload`](retryscope::overload)). Off by
    /// default. Mark a request sheddable with the
    /// [`Priority`](retryscope::overload::Priority) request extension.
    fn concurrency_limit_per_dependency(
        mut self,
        make: impl Fn() -> ConcurrencyLimiter + Send + Sync + 'static,
    ) -> Self {
        self.client_settings_mut().dependencies(|d| d.concurrency_limit(make));
        self
    }

    /// Limits nothing: no concurrency limit (the default).
    fn no_concurrency_limit(mut self) -> Self {
        self.client_settings_mut().dependencies(|d| d.no_concurrency_limit());
        self
    }

    /// Gives each dependency a [`Guard`](retryscope::guard::Guard) made
    /// by `make` — e.g. [`InFlightBudget::envoy`](retryscope::budget::InFlightBudget::envoy),
    /// Envoy's retry budget — put on each of its calls, retries and
    /// hedge copies alike, with its gauges published with the others.
    /// Called again, the guards compose: each dependency gets both.
    /// None by default.
    fn guard_per_dependency<G: retryscope::guard::Guard<Permit = ()> + 'static>(
        mut self,
        make: impl Fn() -> G + Send + Sync + 'static,
    ) -> Self {
        self.client_settings_mut().dependencies(|d| d.guard(make));
        self
    }

    /// Registers `fallback` under `name` (replacing one of that name):
    /// an answer for the calls that give up — attempts exhausted, the
    /// deadline, the breaker open, the budget, a rate limit, the
    /// overload guards — never for a success or an answer the server
    /// meant (a 404; see [`crate::Fallback`] for exactly when).
    /// Registering runs nothing: a dependency uses it once named in
    /// [`fallback_for`](Self::fallback_for) or
    /// [`default_fallback`](Self::default_fallback).
    ///
    /// The fallback is told about the call ([`FallbackContext`](crate::FallbackContext)),
    /// returns a boxed future of an `http::Response<Bytes>` or an error,
    /// and is cut at the call's remaining deadline. Its answer reaches
    /// the caller with a [`Fallback`](crate::Fallback) extension.
    fn fallback(
        mut self,
        name: &str,
        fallback: impl Fn(&FallbackContext<'_>) -> FallbackFuture + Send + Sync + 'static,
    ) -> Self {
        self.client_settings_mut().fallbacks.register(name, crate::fallback::shared(fallback));
        self
    }

    /// Calls to `dependency` (a host, or `host:port` off the scheme's
    /// default port, as the telemetry names it) that give up are
    /// answered by the fallback registered as `name`. A name not
    /// registered (yet) is refused, as is a 257th dependency
    /// ([`MAX_FALLBACKS`](crate::MAX_FALLBACKS)).
    fn fallback_for(mut self, dependency: &str, name: &str) -> Result<Self, UnknownFallback> {
        self.client_settings_mut().fallbacks.use_for(dependency, name)?;
        Ok(self)
    }

    /// Calls to every dependency without a fallback of its own that
    /// give up are answered by the fallback registered as `name`; a
    /// name not registered (yet) is refused.
    fn default_fallback(mut self, name: &str) -> Result<Self, UnknownFallback> {
        self.client_settings_mut().fallbacks.use_by_default(name)?;
        Ok(self)
    }

    /// The names of the fallbacks registered so far, in registration
    /// order: what a configuration file's `fallback = "name"` is
    /// checked against.
    fn fallback_names(&self) -> impl Iterator<Item = &str> {
        self.client_settings().fallback_names()
    }

    /// Takes each call's policy, retried statuses, hedging and priority
    /// from the configuration `handle` holds, resolved once per call from
    /// the snapshot in force when the call starts (the dependency its
    /// host, path or gRPC method matches, else the file's defaults): a
    /// reload reaches the next call. A request's own
    /// [`RetryOptions`](crate::RetryOptions) policy or priority
    /// still wins, except over the kill switch (`enabled = false`: one
    /// attempt, no hedge). See `retryscope-config`.
    ///
    /// A dependency's `fallback = "name"` selects the fallback registered
    /// in code under that name (see `fallback`); under the kill switch
    /// it runs with reason `kill_switch`. Its `body_rule = "name"`
    /// selects the body rule registered under that name (`body_rule`,
    /// HTTP only), and `idempotency_keys = true|false` turns key
    /// generation on or off for it (the header stays the builder's).
    ///
    /// Each dependency the file names has one set of guards, shared by
    /// every call of it and reported under its name in the file; calls
    /// no dependency matches keep guards per server. Its `budget`,
    /// `breaker` and `pacer` replace the builder's for its calls, key by
    /// key: a key the file writes (in the dependency or in `defaults`)
    /// is built from the file; a key it does not write is made by the
    /// builder (`budget_per_dependency`, …). A reload keeps a
    /// dependency's guards, and their state, while its guard settings
    /// are unchanged, and rebuilds them when they change.
    fn config(mut self, handle: ConfigHandle) -> Self {
        self.client_settings_mut().config = Some(handle);
        self
    }
}

impl<B: HasClientSettings> WithClientSettings for B {}

/// The setters that only mean something while telemetry is on, on a builder
/// in its `telemetry_state::On` state: [`no_telemetry`](Self::no_telemetry)
/// returns the builder in state `Off`, where they do not exist, so that none
/// of them can be set and then ignored.
pub trait WithTelemetry: HasTelemetry {
    /// Records metrics, and each dependency's budget and breaker gauges,
    /// with `meter` instead of the global meter provider's.
    fn meter(mut self, meter: &Meter) -> Self {
        self.client_settings_mut().telemetry = MeterChoice::Meter(meter.clone());
        self
    }

    /// Records no metrics and no spans. The retry log stays on (see
    /// [`no_retry_log`](WithClientSettings::no_retry_log)).
    ///
    /// The settings that only telemetry reads (`meter`, `operation_spans`
    /// and, on a gRPC layer, `grpc_metrics`) are not offered after it:
    /// they could only be ignored, so setting one does not compile. Set
    /// before it, they are overridden by it, as any setting is by a later one.
    fn no_telemetry(mut self) -> Self::TelemetryOff {
        self.client_settings_mut().telemetry = MeterChoice::Off;
        self.client_settings_mut().operation_spans = false;
        self.telemetry_off()
    }

    /// Opens an INTERNAL operation span per call, with the call's attempts
    /// under it, instead of hanging the attempts under the caller's span
    /// (the default: a call that needs no retry costs one span). See
    /// `OtelObserver::with_operation_spans`.
    fn operation_spans(mut self) -> Self {
        self.client_settings_mut().operation_spans = true;
        self
    }
}

impl<B: HasTelemetry> WithTelemetry for B {}
