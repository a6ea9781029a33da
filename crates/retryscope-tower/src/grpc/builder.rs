//! The gRPC layer's builder: only the settings gRPC mode reads.

use crate::builder::{TowerSettings, tower_setters};
use crate::grpc::GrpcRetry;
use crate::grpc::layer::Grpc;
use crate::layer::RetryLayer;
use crate::telemetry_state::{Off, On};
use http::Uri;
use retryscope::Policy;
use retryscope_http::{ClientSettings, HasClientSettings, HasTelemetry};
use std::fmt;
use std::marker::PhantomData;

/// Whether a [`GrpcRetryLayerBuilder`] has its channel's origin yet: `build`
/// is offered only once it has.
pub mod origin_state {
    /// No origin yet: set one with
    /// [`origin`](super::GrpcRetryLayerBuilder::origin).
    #[derive(Debug)]
    pub enum NoOrigin {}

    /// The origin is set: the builder can [`build`](super::GrpcRetryLayerBuilder::build).
    #[derive(Debug)]
    pub enum HasOrigin {}
}

use origin_state::{HasOrigin, NoOrigin};

/// Builds a [`RetryLayer`] with gRPC semantics (A6): made by
/// [`RetryLayer::grpc`].
///
/// Its guards are A6's, and only A6's, unless asked for more:
///
/// - **Retry throttling** when the config has `retryThrottling` (or
///   [`GrpcRetry::throttling`]): a token bucket per server, which never stops
///   a first attempt, only retries.
/// - **No retry budget otherwise**: A6 has no throttling without
///   `retryThrottling`, so neither does this layer, unless you give one with
///   [`budget_per_dependency`](Self::budget_per_dependency). Where the
///   config throttles too, both are asked: a retry goes only when the token
///   bucket and the budget allow it.
/// - **No circuit breaker** by default: A6 always sends the first attempt, and
///   a breaker refuses calls before sending them. Add one with
///   [`breaker_per_dependency`](crate::prelude::WithClientSettings::breaker_per_dependency); a call it
///   refuses fails with `UNAVAILABLE`, the message saying so, and
///   [`NOT_RETRIED_CIRCUIT_OPEN`](crate::grpc::NOT_RETRIED_CIRCUIT_OPEN) in its metadata.
/// - **No pacer** by default: A6's pushback concerns the next attempt of the
///   call that got it. Ask for one with
///   [`pacer_per_dependency`](crate::prelude::WithClientSettings::pacer_per_dependency)`(Pacer::new)` and a
///   Trailers-Only `RESOURCE_EXHAUSTED` or `UNAVAILABLE` with
///   `grpc-retry-pushback-ms` holds *every* call to that server for the
///   pushback (held calls come back spread over a fifth of it), first
///   attempts included — beyond A6, which always sends a first attempt;
///   `Pacer::adaptive` adds the AWS SDKs' send-rate limiter, which backs off
///   on `RESOURCE_EXHAUSTED`. A call whose wait cannot fit its deadline fails
///   with `UNAVAILABLE`, its message saying so. See [`retryscope::pace`].
///
/// It offers only what gRPC mode reads. Statuses come from `grpc-status`
/// rather than an `HttpClassifier`, and every retry sends
/// `grpc-previous-rpc-attempts` rather than an HTTP attempt header: so there
/// is no `classifier` or `attempt_header` here. Nor is there a `retry_rule`: a rule judges an
/// HTTP status and headers, and a gRPC answer's HTTP status is 200 whatever
/// happened, its outcome a gRPC status that often arrives only in the trailers;
/// which codes are retried is the service config's `retryableStatusCodes`.
///
/// **The origin is required.** A tonic client sends only the path
/// (`/package.Service/Method`): the channel adds its endpoint's scheme and
/// authority inside itself, below any layer around it. The layer is told the
/// server by [`origin`](Self::origin) — the endpoint's own URI — and the
/// builder offers `build` only once it has it ([origin state](origin_state)
/// `HasOrigin`), so that no call is reported or guarded as an `unknown`
/// server. (A request that carries an authority of its own is reported as
/// that.)
///
/// ```
/// use retryscope::Policy;
/// use retryscope_tower::{RetryLayer, grpc::GrpcRetry};
/// use retryscope_tower::prelude::*;
///
/// let endpoint = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051");
/// let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive()))
///     .origin(endpoint.uri().clone())
///     .no_telemetry()
///     .build();
/// # let _ = layer;
/// ```
///
/// ```compile_fail
/// use retryscope::Policy;
/// use retryscope_tower::{RetryLayer, grpc::GrpcRetry};
/// use retryscope_tower::prelude::*;
///
/// // No origin: every call would be an `unknown` server's.
/// let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive())).no_telemetry().build();
/// ```
///
/// ```compile_fail
/// use retryscope::Policy;
/// use retryscope::classify::HttpClassifier;
/// use retryscope_tower::{RetryLayer, grpc::GrpcRetry};
/// use retryscope_tower::prelude::*;
///
/// // gRPC statuses are not HTTP's: the setting does not exist in gRPC mode.
/// let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive())).classifier(HttpClassifier::new());
/// ```
///
/// ```compile_fail
/// use retryscope::Policy;
/// use retryscope_tower::{RetryLayer, grpc::GrpcRetry};
/// use retryscope_tower::prelude::*;
///
/// let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive())).no_attempt_header();
/// ```
///
/// After [`no_telemetry`](crate::prelude::WithTelemetry::no_telemetry) (its [telemetry state](crate::telemetry_state)
/// is then `Off`), the settings that only telemetry reads are not offered:
/// gRPC's own metrics could only be ignored.
///
/// ```compile_fail
/// use retryscope::Policy;
/// use retryscope_tower::{RetryLayer, grpc::GrpcRetry};
/// use retryscope_tower::prelude::*;
///
/// let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive())).no_telemetry().grpc_metrics();
/// ```
///
/// ```compile_fail
/// use retryscope::Policy;
/// use retryscope_tower::{RetryLayer, grpc::GrpcRetry, rule_fn};
/// use retryscope_tower::prelude::*;
///
/// let rule = rule_fn(|_, _| None);
/// let layer = RetryLayer::grpc(GrpcRetry::new(Policy::interactive())).retry_rule(rule);
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct GrpcRetryLayerBuilder<T = On, O = NoOrigin> {
    retry: GrpcRetry,
    tower: TowerSettings,
    /// Whether the layer records gRPC's own metrics (A66, A96) too.
    metrics: bool,
    telemetry: PhantomData<T>,
    origin: PhantomData<O>,
}

impl<T, O> fmt::Debug for GrpcRetryLayerBuilder<T, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcRetryLayerBuilder")
            .field("retry", &self.retry)
            .field("replay_limit", &self.tower.replay_limit)
            .finish_non_exhaustive()
    }
}

impl GrpcRetryLayerBuilder<On, NoOrigin> {
    pub(crate) fn new(retry: GrpcRetry) -> Self {
        let mut tower = TowerSettings::default();
        // A6's guards only: the token bucket, when the config throttles.
        tower.shared.dependencies(|guards| guards.no_budget().no_breaker().no_pacer());
        Self { retry, tower, metrics: false, telemetry: PhantomData, origin: PhantomData }
    }
}

impl<T> GrpcRetryLayerBuilder<T, NoOrigin> {
    /// The server the channel calls, as the URI of its endpoint
    /// (`endpoint.uri().clone()`): its scheme and authority. Names the
    /// dependency (and so picks its guards), fills `server.address` and
    /// `server.port`, and is gRPC's `grpc.target`. Required: `build` is
    /// offered only after it.
    pub fn origin(mut self, origin: Uri) -> GrpcRetryLayerBuilder<T, HasOrigin> {
        self.tower.origin = Some(origin);
        GrpcRetryLayerBuilder {
            retry: self.retry,
            tower: self.tower,
            metrics: self.metrics,
            telemetry: PhantomData,
            origin: PhantomData,
        }
    }
}

// The shared setters (`WithClientSettings`, and `WithTelemetry` while
// telemetry is on; not the HTTP ones), written once in retryscope-http.
impl<T, O> HasClientSettings for GrpcRetryLayerBuilder<T, O> {
    fn client_settings(&self) -> &ClientSettings {
        &self.tower.shared
    }

    fn client_settings_mut(&mut self) -> &mut ClientSettings {
        &mut self.tower.shared
    }
}

impl<O> HasTelemetry for GrpcRetryLayerBuilder<On, O> {
    type TelemetryOff = GrpcRetryLayerBuilder<Off, O>;

    fn telemetry_off(self) -> GrpcRetryLayerBuilder<Off, O> {
        GrpcRetryLayerBuilder {
            retry: self.retry,
            tower: self.tower,
            metrics: self.metrics,
            telemetry: PhantomData,
            origin: PhantomData,
        }
    }
}

impl<O> GrpcRetryLayerBuilder<On, O> {
    /// Records gRPC's own client metrics too — the per-attempt and per-call
    /// instruments of gRFC A66 and the retry instruments of A96
    /// (`grpc.client.attempt.started`, `grpc.client.call.duration`, …; the
    /// list is in docs/telemetry.md), on the layer's meter, so that gRPC
    /// dashboards work. Off by default, as in gRPC's own libraries, which record
    /// them only once their OpenTelemetry plugin is registered: they repeat
    /// what the `retryscope.*` metrics say, and record five more instruments
    /// per attempt. Not offered after [`no_telemetry`](crate::prelude::WithTelemetry::no_telemetry).
    pub fn grpc_metrics(mut self) -> Self {
        self.metrics = true;
        self
    }
}

impl<T, O> GrpcRetryLayerBuilder<T, O> {
    tower_setters!();

    /// Gives each server a retry budget made by `make` (none by default: A6
    /// throttles only with `retryThrottling`). Where the config throttles,
    /// its token bucket is asked as well: a retry goes only when both allow
    /// it, and a refusal's message names both, since either may have
    /// refused. (A configuration file's budget for a dependency replaces
    /// the budget given here, as any file setting replaces code's.)
    pub fn budget_per_dependency<B: retryscope::budget::Budget + 'static>(
        mut self,
        make: impl Fn() -> B + Send + Sync + 'static,
    ) -> Self {
        self.tower.shared.dependencies(|guards| guards.budget(make));
        self
    }
}

impl<T> GrpcRetryLayerBuilder<T, HasOrigin> {
    /// The layer.
    pub fn build(mut self) -> RetryLayer<Grpc> {
        // A6's retry throttling: a token bucket per server where the config
        // throttles, the dependency's budget; beside a budget given in code,
        // a further guard, so that neither setting is dropped for the other.
        let mut beside_budget = false;
        if self.retry.is_throttled() {
            let retry = self.retry.clone();
            let bucket = move || retry.token_bucket().unwrap_or_default();
            self.tower.shared.dependencies(|guards| match guards.has_budget() {
                true => {
                    beside_budget = true;
                    guards.guard(bucket)
                }
                false => guards.budget(bucket),
            });
        }
        let origin = self.tower.origin.clone();
        // Every call takes the policy of its method (or its `RetryOptions`),
        // never this one: it only fills the field.
        let (settings, meter) = self.tower.build(Policy::interactive());
        let metrics = meter.filter(|_| self.metrics);
        RetryLayer {
            settings,
            protocol: Grpc::new(self.retry, metrics.as_ref(), origin.as_ref(), beside_budget),
        }
    }
}

impl RetryLayer {
    /// Configures a layer that retries gRPC calls as `retry` says (A6), with
    /// A6's retry throttling as its only guard unless asked for more. The
    /// builder needs the channel's [`origin`](GrpcRetryLayerBuilder::origin)
    /// before it builds: tonic sends only the path, and the origin is the
    /// server every call is reported and guarded as.
    #[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
    pub fn grpc(retry: GrpcRetry) -> GrpcRetryLayerBuilder {
        GrpcRetryLayerBuilder::new(retry)
    }
}
