//! Per-request overrides, carried in the request's extensions.

use retryscope::Policy;
use std::borrow::Cow;

/// Overrides the layer's settings for one request: insert it into the request's
/// extensions (`request.extensions_mut().insert(..)`; with tonic,
/// `tonic::Request::extensions_mut`).
///
/// ```
/// use retryscope::Policy;
/// use retryscope_tower::RetryOptions;
///
/// let mut request = http::Request::post("http://127.0.0.1:8080/invoices").body(()).unwrap();
/// request
///     .extensions_mut()
///     .insert(RetryOptions::new().operation("create_invoice").safe_to_retry().policy(Policy::background()));
/// ```
#[derive(Debug, Clone, Default)]
pub struct RetryOptions {
    pub(crate) policy: Option<Policy>,
    pub(crate) operation: Option<Cow<'static, str>>,
    pub(crate) safe_to_retry: bool,
}

impl RetryOptions {
    /// No overrides.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `policy` for this request. With `grpc` it replaces the method's
    /// policy and keeps the method's retryable codes; a method no config names
    /// is then retried on `UNAVAILABLE`.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Names the logical operation (`retryscope.operation`). Keep it
    /// low-cardinality: a name from your code, never an id.
    pub fn operation(mut self, operation: impl Into<Cow<'static, str>>) -> Self {
        self.operation = Some(operation.into());
        self
    }

    /// Declares that running this request twice is harmless although its method
    /// is not idempotent and it carries no `Idempotency-Key`.
    pub fn safe_to_retry(mut self) -> Self {
        self.safe_to_retry = true;
        self
    }
}
