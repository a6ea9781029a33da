//! Per-request overrides, carried in the request's extensions.

use retryscope::Policy;
use retryscope::overload::Priority;
use std::borrow::Cow;

/// Overrides the integration's settings for one request. With reqwest, attach
/// it with `RequestBuilder::with_extension`; with tower, insert it into the
/// request's extensions (`request.extensions_mut().insert(..)`; with tonic,
/// `tonic::Request::extensions_mut`).
///
/// ```
/// use retryscope::Policy;
/// use retryscope_http::RetryOptions;
///
/// let mut request = http::Request::post("http://127.0.0.1:8080/invoices").body(()).unwrap();
/// request
///     .extensions_mut()
///     .insert(RetryOptions::new().operation("create_invoice").idempotent().policy(Policy::background()));
/// # assert!(request.extensions().get::<RetryOptions>().is_some_and(RetryOptions::is_idempotent));
/// ```
#[derive(Debug, Clone, Default)]
pub struct RetryOptions {
    policy: Option<Policy>,
    operation: Option<Cow<'static, str>>,
    idempotent: bool,
    priority: Option<Priority>,
}

impl RetryOptions {
    /// No overrides.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `policy` for this request. With tower's gRPC mode it replaces the
    /// method's policy and keeps the method's retryable codes; a method no
    /// config names is then retried on `UNAVAILABLE`.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Names the logical operation (`retryscope.operation`). Keep it low-cardinality:
    /// a name from your code, never an id.
    pub fn operation(mut self, operation: impl Into<Cow<'static, str>>) -> Self {
        self.operation = Some(operation.into());
        self
    }

    /// Declares this request idempotent: running it twice is harmless even though
    /// its method is not idempotent and it carries no `Idempotency-Key` (the one
    /// word for "may run twice" in every integration, as sqlx's
    /// `StatementBuilder::idempotent`). It is then retried
    /// with no key at all — unless the integration's `.idempotency_keys()` is on,
    /// which gives it one like any other POST, so that a server honouring keys
    /// runs it once anyway.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// Marks this request's priority (critical unless set): under the
    /// dependency's adaptive throttle or a nearly full concurrency limit,
    /// [`Priority::Sheddable`] requests are refused first (see
    /// [`Priority`]).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// The priority set with [`priority`](Self::priority), critical unless set.
    pub fn priority_class(&self) -> Priority {
        self.priority.unwrap_or_default()
    }

    /// The priority the request set, if it set one (a configured client's
    /// file gives the others theirs).
    pub fn priority_override(&self) -> Option<Priority> {
        self.priority
    }

    /// The policy set with [`policy`](Self::policy), if any.
    pub fn policy_override(&self) -> Option<Policy> {
        self.policy
    }

    /// The name set with [`operation`](Self::operation), if any.
    pub fn operation_name(&self) -> Option<&str> {
        self.operation.as_deref()
    }

    /// Whether [`idempotent`](Self::idempotent) was called.
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }
}
