//! What retryscope's HTTP integrations share, written once.
//!
//! `retryscope-reqwest` (reqwest-middleware) and `retryscope-tower` (tower,
//! HTTP and gRPC) make the same decisions about every request: which settings a
//! caller may override per request ([`RetryOptions`]), where the metrics go
//! ([`Telemetry`]), whether running a request again is safe ([`safety`]), what a
//! transport failure means ([`transport`]), what an HTTP attempt span says
//! ([`spans`]), which idempotency key a request carries on every attempt
//! ([`idempotency`]), what the caller gets when the engine stops ([`shape`]), and
//! how a user's own rules for responses join the built-in ones ([`rule`],
//! [`body_rule`]). This
//! crate holds each of those once; the integrations add only what their
//! libraries force on them (reqwest's error type and body, tower's service
//! dance, replay bodies and gRPC).
//!
//! Why a crate of its own rather than a module of `retryscope-otel`: most of
//! this is HTTP semantics, not telemetry, and `retryscope-otel` is also used
//! by code that retries no HTTP at all. Users normally reach these items through
//! the integration crates, which re-export what they need
//! ([`retryscope_reqwest::RetryOptions`], [`retryscope_tower::RetryOptions`]).
//!
//! [`retryscope_reqwest::RetryOptions`]: https://docs.rs/retryscope-reqwest
//! [`retryscope_tower::RetryOptions`]: https://docs.rs/retryscope-tower
//!
//! # Further reading
//!
//! - The telemetry contract — every metric, span, attribute and log field, and
//!   the Prometheus series they become: [docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md).
//! - The runbook — the alerts, the dashboards, and what to do when they fire:
//!   [docs/runbook.md](https://github.com/retryscope/retryscope/blob/main/docs/runbook.md).
//! - The public API and what semver covers: [docs/api.md](https://github.com/retryscope/retryscope/blob/main/docs/api.md).

pub mod body_rule;
mod error;
pub mod idempotency;
mod options;
pub mod release;
pub mod rule;
pub mod safety;
mod settings;
pub mod shape;
pub mod spans;
pub mod transport;

pub use error::NotReplayable;
pub use options::RetryOptions;
pub use settings::{ClientSettings, Telemetry, telemetry_state};

/// Paths the [`shared_setters!`] macro expands to, so that an integration needs
/// no extra dependency to use it.
#[doc(hidden)]
pub mod __private {
    pub use http::HeaderName;
    pub use opentelemetry::metrics::Meter;
    pub use retryscope::classify::HttpClassifier;
    pub use retryscope::hedge::HedgePolicy;
    pub use retryscope::{CircuitBreaker, Pacer, RetryBudget};
}
