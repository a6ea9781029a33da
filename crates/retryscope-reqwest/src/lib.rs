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
//! [telemetry contract]: https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md
#![cfg_attr(docsrs, feature(doc_cfg))]

mod middleware;
mod options;
mod redact;
mod spans;
mod transport;

pub use middleware::{NotRetried, RetryMiddleware, RetryMiddlewareBuilder};
pub use options::RetryOptions;
pub use redact::{REDACTED, redact_url};
