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

mod builder;
mod classify;
mod error;
mod middleware;
mod read_ahead;
mod redact;
mod release;
mod source;
mod target;
mod transport;

pub use builder::RetryMiddlewareBuilder;
pub use error::NotRetried;
pub use middleware::RetryMiddleware;
#[doc(hidden)]
pub use redact::is_sensitive as is_sensitive_query_param;
pub use redact::{REDACTED, redact_url};
/// Per-request overrides; shared with `retryscope-tower` (defined in `retryscope-http`).
pub use retryscope_http::RetryOptions;
/// Your own retry rule that reads the bodies it selects (defined in
/// `retryscope-http`, shared with `retryscope-tower`).
pub use retryscope_http::body_rule::{BodyLimit, BodyLimitError, BodyRule, body_rule_fn};
/// Idempotency keys per request: supply one or suppress generation (defined
/// in `retryscope-http`, shared with `retryscope-tower`).
pub use retryscope_http::idempotency::{IdempotencyKey, InvalidIdempotencyKey};
/// Your own retry rule for responses (defined in `retryscope-http`, shared
/// with `retryscope-tower`).
pub use retryscope_http::rule::{ResponseRule, rule_fn};
/// The builder's telemetry states, to name a builder after `no_telemetry()`
/// (re-exported from `retryscope-http`).
#[doc(inline)]
pub use retryscope_http::telemetry_state;
