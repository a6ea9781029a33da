//! Correct, instrumented retries for existing [reqwest] clients.
//!
//! One middleware, no other change to the calling code:
//!
//! ```no_run
//! use retryscope::Policy;
//! use retryscope_reqwest::RetryMiddleware;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(RetryMiddleware::new(Policy::interactive()))
//!     .build();
//! let body = client.get("http://127.0.0.1:8080/inventory").send().await?.text().await?;
//! # Ok(()) }
//! ```
//!
//! See [`RetryMiddleware`] for what is retried and when, [`RetryOptions`] for
//! per-request overrides, and the [telemetry contract] for what it reports.
//!
//! # Further reading
//!
//! - The telemetry contract — every metric, span, attribute and log field, and
//!   the Prometheus series they become: [docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md).
//! - The runbook — the alerts, the dashboards, and what to do when they fire:
//!   [docs/runbook.md](https://github.com/retryscope/retryscope/blob/main/docs/runbook.md).
//! - The public API and what semver covers: [docs/api.md](https://github.com/retryscope/retryscope/blob/main/docs/api.md).
//!
//! [telemetry contract]: https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md
#![cfg_attr(docsrs, feature(doc_cfg))]

mod attempt;
mod builder;
mod classify;
pub mod fault;
mod middleware;
mod read_ahead;
mod release;
mod source;
mod target;
mod transport;

pub use builder::RetryMiddlewareBuilder;
pub use middleware::RetryMiddleware;
/// The types both HTTP integrations share, defined once in `retryscope-http`:
/// per-request overrides, a request's idempotency-key choice, your own retry
/// rules, the error of a request that could not be sent again, fallbacks, and
/// the redaction applied to `url.full`.
pub use retryscope_http::{
    BodyLimit, BodyLimitError, BodyRule, ConnectLimit, ConnectTimedOut, Fallback, FallbackContext,
    FallbackFailed, FallbackFuture, FallbackReason, InvalidConnectShare, KeyChoice, KeyChoiceError,
    LastAnswer, MAX_FALLBACKS, NO_DEADLINE_LIMIT, NoBudgetToShare, NotRetried, REDACTED, ResponseRule,
    RetryOptions, UnknownFallback, body_rule_fn, redact_url, rule_fn,
};
/// The builder's setters, in traits both HTTP integrations share (defined in
/// `retryscope-http`): one `use retryscope_reqwest::prelude::*;` brings them
/// all.
///
/// ```
/// use retryscope::Policy;
/// use retryscope_reqwest::RetryMiddleware;
/// use retryscope_reqwest::prelude::*;
///
/// let middleware = RetryMiddleware::builder(Policy::interactive())
///     .no_breaker() // WithClientSettings: every builder
///     .no_attempt_header() // WithHttpSettings: HTTP only
///     .operation_spans() // WithTelemetry: while telemetry is on
///     .build();
/// # let _ = middleware;
/// ```
pub mod prelude {
    pub use retryscope_http::{WithClientSettings, WithHttpSettings, WithTelemetry};
}
/// The builder's telemetry states, to name a builder after `no_telemetry()`
/// (defined in `retryscope-otel`, one pair for every integration).
#[doc(inline)]
pub use retryscope_otel::telemetry_state;
