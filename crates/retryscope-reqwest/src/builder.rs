//! The middleware's builder: the shared settings, nothing reqwest adds.

use crate::middleware::RetryMiddleware;
use crate::telemetry_state::{Off, On};
use retryscope::Policy;
use retryscope_http::{ClientSettings, HasClientSettings, HasHttpSettings, HasTelemetry};
use std::marker::PhantomData;

/// Builds a [`RetryMiddleware`]. Its [telemetry state](crate::telemetry_state)
/// is `On` until [`no_telemetry`](crate::prelude::WithTelemetry::no_telemetry), after which the settings
/// that only telemetry reads are not offered:
///
/// ```compile_fail
/// use retryscope::Policy;
/// use retryscope_reqwest::RetryMiddleware;
/// use retryscope_reqwest::prelude::*;
///
/// // No spans are recorded at all: an operation span could only be ignored.
/// let middleware = RetryMiddleware::builder(Policy::interactive()).no_telemetry().operation_spans();
/// ```
#[must_use = "a builder does nothing until `build` is called"]
#[derive(Debug)]
pub struct RetryMiddlewareBuilder<T = On> {
    pub(crate) policy: Policy,
    pub(crate) settings: ClientSettings,
    pub(crate) telemetry: PhantomData<T>,
}

// The shared setters (`WithClientSettings`, `WithHttpSettings`, and
// `WithTelemetry` while telemetry is on), written once in retryscope-http.
impl<T> HasClientSettings for RetryMiddlewareBuilder<T> {
    fn client_settings(&self) -> &ClientSettings {
        &self.settings
    }

    fn client_settings_mut(&mut self) -> &mut ClientSettings {
        &mut self.settings
    }
}

impl<T> HasHttpSettings for RetryMiddlewareBuilder<T> {}

impl HasTelemetry for RetryMiddlewareBuilder<On> {
    type TelemetryOff = RetryMiddlewareBuilder<Off>;

    fn telemetry_off(self) -> RetryMiddlewareBuilder<Off> {
        RetryMiddlewareBuilder { policy: self.policy, settings: self.settings, telemetry: PhantomData }
    }
}

impl<T> RetryMiddlewareBuilder<T> {
    /// Retries only where no other layer of the call chain retries (off by
    /// default). Inside a request served under
    /// [`Upstream::scope`](retryscope_otel::Upstream::scope) (as
    /// `retryscope-tower`'s server layer does), a request that is itself a retry
    /// makes one attempt downstream; and a failed response that says the layer
    /// below already retried ([`retry-exhausted`](retryscope_otel::EXHAUSTED_HEADER))
    /// is not retried. Either is reported as throttled, reason `upstream_retry`.
    ///
    /// Use it in services in the middle of a chain: without it, four attempts
    /// at each of three layers make 64 calls at the bottom for one user request;
    /// with it, four.
    pub fn retry_at_one_layer(mut self) -> Self {
        self.settings.set_one_layer();
        self
    }

    /// The middleware.
    pub fn build(self) -> RetryMiddleware {
        let (client, _) = self.settings.build();
        RetryMiddleware { policy: self.policy, client }
    }
}
