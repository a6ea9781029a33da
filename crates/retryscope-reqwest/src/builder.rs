//! The middleware's builder: the shared settings, nothing reqwest adds.

use crate::middleware::RetryMiddleware;
use crate::telemetry_state::{Off, On};
use retryscope::Policy;
use retryscope_http::__private::file_guards::{CodeFactories, FileGuards};
use retryscope_http::__private::{ClientSettings, HasClientSettings, HasHttpSettings, HasTelemetry};
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
        self.settings.one_layer = true;
        self
    }

    /// The middleware.
    pub fn build(self) -> RetryMiddleware {
        let settings = self.settings;
        let code = CodeFactories::of(&settings, settings.budget.clone(), std::convert::identity);
        let (meter, telemetry, retry_log) =
            ClientSettings::observers(settings.telemetry, settings.retry_log, settings.operation_spans);
        // A configured client's guards from its file: made by the builder's
        // factories for the keys the file leaves to code.
        let file_guards =
            settings.config.clone().map(|handle| FileGuards::new(handle, code.clone(), meter.as_ref()));
        let guards = code.build(meter.as_ref());
        let fallbacks = settings.fallbacks.build(meter.as_ref());
        RetryMiddleware {
            policy: self.policy,
            classifier: settings.classifier,
            rule: settings.rule,
            body_rule: settings.body_rule,
            body_rules: settings.body_rules,
            file_guards,
            telemetry,
            retry_log,
            dependencies: guards,
            attempt_header: settings.attempt_header,
            request_id_header: settings.request_id_header,
            one_layer: settings.one_layer,
            idempotency: settings.idempotency,
            fallbacks,
        }
    }
}
