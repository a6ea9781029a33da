//! The builders' shared setters, written once as default methods of public
//! extension traits, in the shape of opentelemetry-otlp's
//! `HasExportConfig`/`WithExportConfig`: each builder hands out its
//! [`ClientSettings`] through one public accessor trait
//! ([`HasClientSettings`]), and every builder that implements it has the
//! setters of the groups it belongs to. Users import the traits (each
//! integration re-exports them in its `prelude`).
//!
//! Three groups, by meaning:
//!
//! - [`WithClientSettings`]: what every builder has (HTTP and gRPC, telemetry
//!   on or off) — the retry log, the guards per dependency and their fleet
//!   shares, fallbacks, the configuration file;
//! - [`WithTelemetry`]: what only telemetry reads, for a builder whose
//!   telemetry is on ([`HasTelemetry`]): `no_telemetry` returns the builder in
//!   its `Off` state, where none of them exists, so that none can be set and
//!   then ignored;
//! - [`WithHttpSettings`]: what only HTTP semantics use ([`HasHttpSettings`]),
//!   which the gRPC builder does not implement.

use crate::settings::ClientSettings;
use crate::{
    BodyLimit, BodyRule, FallbackContext, FallbackFuture, NoBudgetToShare, ResponseRule, UnknownFallback,
};
use http::HeaderName;
use opentelemetry::metrics::Meter;
use retryscope::budget::BudgetShare;
use retryscope::classify::HttpClassifier;
use retryscope::hedge::HedgePolicy;
use retryscope::overload::{AdaptiveThrottle, ConcurrencyLimiter};
use retryscope::pace::PaceShare;
use retryscope::{CircuitBreaker, Pacer};
use retryscope_config::ConfigHandle;
use retryscope_otel::MeterChoice;
use std::sync::Arc;

/// A builder that keeps [`ClientSettings`]: what it implements to get the
/// setters of [`WithClientSettings`] (a blanket implementation), and, with
/// [`HasTelemetry`] and [`HasHttpSettings`], those of [`WithTelemetry`] and
/// [`WithHttpSettings`].
///
/// Why public: so that a third party's builder (an integration with another
/// HTTP client) offers the same setters, names, defaults and meaning, as
/// opentelemetry-otlp's `HasExportConfig` does for its exporters. Two
/// accessors only: a setter added to the `With*` traits reaches every
/// implementor unchanged. [`ClientSettings`] has an example.
pub trait HasClientSettings: Sized {
    /// The settings, to read.
    fn client_settings(&self) -> &ClientSettings;
    /// The settings, to change.
    fn client_settings_mut(&mut self) -> &mut ClientSettings;
}

/// A builder whose telemetry is on (its [`telemetry_state::On`](crate::telemetry_state::On)):
/// what it implements to get the setters of [`WithTelemetry`].
///
/// Why public: as [`HasClientSettings`] is, for a third party's builder.
/// Why a trait of its own: [`WithTelemetry::no_telemetry`] returns the
/// builder in its `Off` state ([`TelemetryOff`](Self::TelemetryOff)), a type
/// where no telemetry setter exists, so that none can be set and then
/// ignored; only the builder knows that type.
pub trait HasTelemetry: HasClientSettings {
    /// The same builder with telemetry off (`telemetry_state::Off`).
    type TelemetryOff;
    /// The same builder and settings, in the `Off` state.
    fn telemetry_off(self) -> Self::TelemetryOff;
}

/// A builder of HTTP calls: what it implements to get the setters of
/// [`WithHttpSettings`], which a gRPC builder does not have.
///
/// Why public: as [`HasClientSettings`] is, for a third party's builder.
/// A marker: the settings are [`HasClientSettings`]'s; implementing it says
/// that the builder's calls have HTTP semantics (statuses, rules, the
/// attempt and request-id headers, hedging, idempotency keys).
pub trait HasHttpSettings: HasClientSettings {}

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

/// The setters only HTTP semantics use: statuses and rules, the retry
/// budget, the attempt and request-id headers, hedging, idempotency keys.
/// Implemented by `retryscope_reqwest::RetryMiddlewareBuilder` and
/// `retryscope_tower::RetryLayerBuilder`; not by the gRPC builder, whose
/// statuses come from `grpc-status` and whose retries send
/// `grpc-previous-rpc-attempts`.
pub trait WithHttpSettings: HasHttpSettings {
    /// Which HTTP statuses are retried.
    fn classifier(mut self, classifier: HttpClassifier) -> Self {
        self.client_settings_mut().classifier = classifier;
        self
    }

    /// Asks `rule` about every response before the built-in status rules:
    /// its verdict, when it gives one, replaces theirs; `None` leaves the
    /// decision to them. The rule sees the status and headers only (see
    /// [`ResponseRule`](crate::ResponseRule)); for the body, see
    /// [`retry_on_body`](Self::retry_on_body).
    /// Request safety still applies to what it says: a POST without an
    /// `Idempotency-Key` is not run again because a rule asked for it.
    /// Setting a rule again replaces the previous one.
    ///
    /// A closure works too: `.retry_rule(rule_fn(|status, headers| ..))`
    /// (with [`rule_fn`](crate::rule_fn)), or a closure
    /// with typed arguments `|status: StatusCode, headers: &HeaderMap| ..`.
    fn retry_rule(mut self, rule: impl ResponseRule) -> Self {
        self.client_settings_mut().rule = Some(crate::rule::SharedRule::new(rule));
        self
    }

    /// Reads the body of the responses `rule` selects by their head, up
    /// to `limit`, and asks `rule` about it before the head rule
    /// ([`retry_rule`](Self::retry_rule)) and the built-in statuses. Any
    /// response it does not select is untouched; a selected body over
    /// the limit is not judged; the caller always gets the whole body.
    /// The read is part of the attempt, bounded by the policy's attempt
    /// timeout and deadline. Request safety still applies to what the rule
    /// says. See [`BodyRule`](crate::BodyRule) for what it
    /// costs. Setting a body rule again replaces the previous one.
    fn retry_on_body(mut self, limit: BodyLimit, rule: impl BodyRule) -> Self {
        self.client_settings_mut().body_rule = Some(crate::body_rule::SharedBodyRule::new(limit, rule));
        self
    }

    /// Registers a body rule under `name` (replacing one of that name),
    /// that reads the bodies `rule` selects, up to `limit`, as
    /// [`retry_on_body`](Self::retry_on_body) does — for the calls of the
    /// dependencies whose configuration file says `body_rule = "name"`
    /// (see `config`), instead of the builder's own rule. Registering
    /// runs nothing. List the name in the handle's `KnownNames` too, so
    /// that the file is checked against it.
    fn body_rule(mut self, name: &str, limit: BodyLimit, rule: impl BodyRule) -> Self {
        self.client_settings_mut()
            .body_rules
            .register(name, crate::body_rule::SharedBodyRule::new(limit, rule));
        self
    }

    /// The names of the body rules registered so far
    /// ([`body_rule`](Self::body_rule)), in registration order.
    fn body_rule_names(&self) -> impl Iterator<Item = &str> {
        self.client_settings().body_rules.names()
    }

    /// Gives each dependency a budget made by `make` (default:
    /// [`RetryBudget::default`](retryscope::RetryBudget::default)): a
    /// [`RetryBudget`](retryscope::RetryBudget) of your own, a [`TokenBucket`](retryscope::TokenBucket),
    /// a [`RetryQuota`](retryscope::budget::RetryQuota), any
    /// [`Budget`](retryscope::budget::Budget).
    fn budget_per_dependency<B: retryscope::budget::Budget + 'static>(
        mut self,
        make: impl Fn() -> B + Send + Sync + 'static,
    ) -> Self {
        self.client_settings_mut().dependencies(|d| d.budget(make));
        self
    }

    /// Retries without a budget: only the policy bounds them. Drops a
    /// budget share given before (`budget_shared`): no floor is left to
    /// divide.
    fn no_budget(mut self) -> Self {
        self.client_settings_mut().dependencies(|d| d.no_budget());
        self
    }

    /// Names the header that tells an HTTP server which attempt a retry is
    /// (default [`retry-attempt`](retryscope_otel::ATTEMPT_HEADER), sent
    /// from the second attempt on), e.g. `x-envoy-attempt-count` where
    /// Envoy-style servers read it.
    fn attempt_header(mut self, name: HeaderName) -> Self {
        self.client_settings_mut().attempt_header = Some(name);
        self
    }

    /// Sends no attempt header.
    fn no_attempt_header(mut self) -> Self {
        self.client_settings_mut().attempt_header = None;
        self
    }

    /// Names the request header whose value the retry log records as
    /// `request_id` (default
    /// [`x-request-id`](retryscope_otel::REQUEST_ID_HEADER)), e.g.
    /// `x-correlation-id`. A value longer than 128 bytes, or not visible
    /// ASCII, is not recorded.
    fn request_id_header(mut self, name: HeaderName) -> Self {
        self.client_settings_mut().request_id_header = name;
        self
    }

    /// Hedges idempotent requests instead of retrying them: a request
    /// that may run twice at once (GET, HEAD, OPTIONS, PUT, DELETE,
    /// TRACE; a POST
    /// with an idempotency key is retried, not hedged, since a server
    /// honouring keys answers a concurrent copy with 409) and whose body can be sent
    /// again gets a second copy when the first has not answered after
    /// the policy's delay, up to its `max_copies`; the first acceptable
    /// answer wins and the other copies are cancelled (their connection
    /// or stream reset). A retryable failure (a 503, a reset) sends the
    /// next copy at once; a permanent one (a 404) ends the call. Every
    /// copy beyond the first is charged to the dependency's budget like a
    /// retry, and a refused one is not sent. `policy` is a template: each
    /// dependency (host) hedges with its own copy of it
    /// ([`HedgePolicy::fresh`](retryscope::hedge::HedgePolicy::fresh)),
    /// so a percentile delay is learned per host, not over every host the
    /// client calls.
    ///
    /// Hedging replaces retries for those requests (gRPC's A6: a call is
    /// hedged or retried, never both): the builder's retry policy still
    /// serves every other request — a POST without an idempotency key, a
    /// streamed body — and a request given its own policy through
    /// `RetryOptions`. Every copy asks the dependency's pacer as a retry
    /// does: a dependency that asked to be called less gets no extra copy
    /// while it holds calls back.
    fn hedge(mut self, policy: HedgePolicy) -> Self {
        self.client_settings_mut().dependencies(|d| d.hedge(policy));
        self
    }

    /// Gives every non-idempotent request (POST, PATCH, …) that carries no
    /// idempotency key a fresh one (a UUID v4, as an RFC 8941 String),
    /// once per call: every attempt sends the same key, and the request is
    /// thereby retried on transient failures as an idempotent one is. A
    /// key the request carries is kept unchanged; a streamed body gets
    /// none and is still sent once. Per request, an
    /// [`KeyChoice`](crate::KeyChoice)
    /// extension supplies a key or suppresses this. Requests marked
    /// `idempotent` get a key too. Retrying is then only as safe as the
    /// server's handling of keys: it must answer a repeated key with the
    /// stored response (see `retryscope-idempotency`).
    fn idempotency_keys(mut self) -> Self {
        self.client_settings_mut().idempotency = self.client_settings_mut().idempotency.clone().generate();
        self
    }

    /// Names the header that carries idempotency keys (default
    /// `Idempotency-Key`, the draft's): the one looked for on requests —
    /// a request carrying it may be retried — and the one supplied and
    /// generated keys are sent in.
    fn idempotency_key_header(mut self, name: HeaderName) -> Self {
        self.client_settings_mut().idempotency = self.client_settings_mut().idempotency.clone().header(name);
        self
    }
}

impl<B: HasHttpSettings> WithHttpSettings for B {}
