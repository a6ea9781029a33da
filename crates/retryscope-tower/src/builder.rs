//! The HTTP layer's builder, and what it shares with the gRPC one
//! (`grpc::GrpcRetryLayerBuilder`, which adds gRPC's own parts).

use crate::http_call::Http;
use crate::layer::RetryLayer;
use crate::replay::DEFAULT_REPLAY_LIMIT;
use crate::settings::Settings;
use crate::telemetry_state::{Off, On};
use http::Uri;
use retryscope::Policy;
use retryscope_http::{ClientSettings, HasClientSettings, HasHttpSettings, HasTelemetry};
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// Builds an HTTP [`RetryLayer`]; gRPC has its own builder, `RetryLayer::grpc`
/// (feature `grpc`). Its [telemetry state](crate::telemetry_state)
/// is `On` until [`no_telemetry`](crate::prelude::WithTelemetry::no_telemetry), after which the settings
/// that only telemetry reads are not offered:
///
/// ```compile_fail
/// use retryscope::Policy;
/// use retryscope_tower::RetryLayer;
/// use retryscope_tower::prelude::*;
///
/// // No spans are recorded at all: an operation span could only be ignored.
/// let layer = RetryLayer::builder(Policy::interactive()).no_telemetry().operation_spans();
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct RetryLayerBuilder<T = On> {
    policy: Policy,
    pub(crate) tower: TowerSettings,
    telemetry: PhantomData<T>,
}

/// What both of tower's builders configure.
pub(crate) struct TowerSettings {
    pub(crate) shared: ClientSettings,
    pub(crate) replay_limit: usize,
    pub(crate) origin: Option<Uri>,
}

impl Default for TowerSettings {
    fn default() -> Self {
        Self { shared: ClientSettings::default(), replay_limit: DEFAULT_REPLAY_LIMIT, origin: None }
    }
}

impl<T> fmt::Debug for RetryLayerBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayerBuilder")
            .field("policy", &self.policy)
            .field("replay_limit", &self.tower.replay_limit)
            .finish_non_exhaustive()
    }
}

/// The setters tower's two builders share, written once.
macro_rules! tower_setters {
    () => {
        /// Keeps request bodies of up to `bytes` in memory for retries (default
        /// 256 KiB); a larger body is sent once and never retried.
        pub fn replay_limit(mut self, bytes: usize) -> Self {
            self.tower.replay_limit = bytes;
            self
        }

        /// Retries only where no other layer of the call chain retries (off by
        /// default): inside a request served behind [`IncomingLayer`](crate::IncomingLayer),
        /// a request that is itself a retry makes one attempt downstream, and a
        /// failed response carrying [`retry-exhausted`](retryscope_otel::EXHAUSTED_HEADER)
        /// (the layer below already retried) is not retried. Either is reported as
        /// throttled, reason `upstream_retry`. When this layer's own retries run
        /// out, the server it runs in says so to its caller.
        pub fn retry_at_one_layer(mut self) -> Self {
            self.tower.shared.set_one_layer();
            self
        }
    };
}
#[cfg(feature = "grpc")]
pub(crate) use tower_setters;

impl RetryLayerBuilder<On> {
    pub(crate) fn new(policy: Policy) -> Self {
        Self { policy, tower: TowerSettings::default(), telemetry: PhantomData }
    }
}

// The shared setters (`WithClientSettings`, `WithHttpSettings`, and
// `WithTelemetry` while telemetry is on), written once in retryscope-http.
impl<T> HasClientSettings for RetryLayerBuilder<T> {
    fn client_settings(&self) -> &ClientSettings {
        &self.tower.shared
    }

    fn client_settings_mut(&mut self) -> &mut ClientSettings {
        &mut self.tower.shared
    }
}

impl<T> HasHttpSettings for RetryLayerBuilder<T> {}

impl HasTelemetry for RetryLayerBuilder<On> {
    type TelemetryOff = RetryLayerBuilder<Off>;

    fn telemetry_off(self) -> RetryLayerBuilder<Off> {
        RetryLayerBuilder { policy: self.policy, tower: self.tower, telemetry: PhantomData }
    }
}

impl<T> RetryLayerBuilder<T> {
    tower_setters!();

    /// The server called, for requests whose URI carries no authority (a
    /// client that sends only the path). Names the dependency (and so picks
    /// its budget and breaker) and fills `server.address`/`server.port`.
    /// Without it such requests share the dependency `unknown`; a request
    /// with an authority of its own is always reported as that.
    pub fn origin(mut self, origin: Uri) -> Self {
        self.tower.origin = Some(origin);
        self
    }

    /// The layer.
    pub fn build(self) -> RetryLayer {
        let (settings, _meter) = self.tower.build(self.policy);
        RetryLayer { settings, protocol: Http }
    }
}

impl RetryLayer {
    /// Retries with `policy`, instrumented through the global OpenTelemetry
    /// providers, with a default [`RetryBudget`](retryscope::RetryBudget) and
    /// [`CircuitBreaker`](retryscope::CircuitBreaker) per dependency.
    pub fn new(policy: Policy) -> Self {
        Self::builder(policy).build()
    }

    /// Configures a layer for HTTP.
    pub fn builder(policy: Policy) -> RetryLayerBuilder {
        RetryLayerBuilder::new(policy)
    }
}

impl TowerSettings {
    /// What every request of the layer shares, and the meter the layer
    /// records with (`None` with telemetry off), for a protocol's own metrics.
    pub(crate) fn build(self, policy: Policy) -> (Arc<Settings>, Option<opentelemetry::metrics::Meter>) {
        let shared = self.shared;
        // One fallback registry for HTTP and gRPC: a gRPC call reads the
        // fallback's `http::Response` as gRPC (`grpc::fallback`).
        let (client, meter) = shared.build();
        let settings = Settings {
            policy,
            client,
            replay_limit: self.replay_limit,
            origin_server: self.origin.as_ref().map(crate::settings::OriginServer::of),
            origin: self.origin.map(Arc::new),
            origin_guards: std::sync::OnceLock::new(),
        };
        (Arc::new(settings), meter)
    }
}
