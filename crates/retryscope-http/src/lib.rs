//! What retryscope's HTTP integrations share, written once.
//!
//! `retryscope-reqwest` (reqwest-middleware) and `retryscope-tower` (tower,
//! HTTP and gRPC) make the same decisions about every request: which settings a
//! caller may override per request ([`RetryOptions`]), which idempotency key a
//! request carries on every attempt ([`KeyChoice`]), how a user's own rules for
//! responses join the built-in ones ([`ResponseRule`], [`BodyRule`]), what a
//! request whose body cannot be sent again ends with ([`NotRetried`]), what a
//! call that gives up may be answered with instead ([`Fallback`]), what
//! of a URL may reach telemetry ([`redact_url`]), and the setters every
//! builder shares ([`WithClientSettings`], [`WithTelemetry`],
//! [`WithHttpSettings`]) with the settings they set ([`ClientSettings`])
//! and the accessors a builder implements to get them
//! ([`HasClientSettings`], [`HasTelemetry`], [`HasHttpSettings`]: public so
//! that a third party's builder can offer the same setters). This crate holds each of
//! those once, and both integrations re-export them: users normally name them
//! through `retryscope_reqwest` or `retryscope_tower`.
//!
//! Why a crate of its own rather than a module of `retryscope-otel`: most of
//! this is HTTP semantics, not telemetry, and `retryscope-otel` is also used
//! by code that retries no HTTP at all.
//!
//! # Not public: the integrations' shared machinery
//!
//! What the builders' settings become (the built client), request safety, transport
//! classification, attempt spans, result shaping and connection release live
//! under `__private`, hidden from the docs: they are for `retryscope-reqwest`
//! and `retryscope-tower` only, change with them, and are not covered by
//! semver (see [docs/api.md](https://github.com/retryscope/retryscope/blob/main/docs/api.md)).
//!
//! # Further reading
//!
//! - The telemetry contract — every metric, span, attribute and log field, and
//!   the Prometheus series they become: [docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md).
//! - The runbook — the alerts, the dashboards, and what to do when they fire:
//!   [docs/runbook.md](https://github.com/retryscope/retryscope/blob/main/docs/runbook.md).
//! - The public API and what semver covers: [docs/api.md](https://github.com/retryscope/retryscope/blob/main/docs/api.md).

mod body_rule;
mod call;
mod client;
#[cfg(test)]
mod client_keys;
mod configured;
mod connect;
mod error;
mod fallback;
pub mod fault;
mod file_guards;
mod idempotency;
pub mod job_call_key;
mod judge;
mod options;
mod redact;
mod release;
mod rule;
mod safety;
mod setters;
mod settings;
mod shape;
mod spans;
mod transport;

pub use body_rule::{BodyLimit, BodyLimitError, BodyRule, body_rule_fn};
pub use connect::{
    AttemptLimit, AttemptLimits, ConnectLimit, ConnectLimited, ConnectTimedOut, Connecting,
    InvalidConnectShare,
};
pub use error::{NoBudgetToShare, NotRetried};
pub use fallback::{
    Fallback, FallbackContext, FallbackFailed, FallbackFuture, FallbackReason, LastAnswer, MAX_FALLBACKS,
    NO_DEADLINE_LIMIT, UnknownFallback,
};
pub use idempotency::{KeyChoice, KeyChoiceError};
pub use options::RetryOptions;
pub use redact::{REDACTED, redact_url};
pub use retryscope_otel::telemetry_state;
pub use rule::{ResponseRule, rule_fn};
pub use setters::{
    HasClientSettings, HasHttpSettings, HasTelemetry, WithClientSettings, WithHttpSettings, WithTelemetry,
};
pub use settings::ClientSettings;

/// What `retryscope-reqwest` and `retryscope-tower` share beyond the public
/// items: their builders' settings and setters, and the decisions both make
/// about each request. Not part of the public API: no semver promise, changed
/// whenever the integrations need.
#[doc(hidden)]
pub mod __private {
    /// The call recipe every integration runs.
    pub mod call {
        pub use crate::call::*;
    }
    pub use crate::client::Client;
    pub use crate::configured::{CallConfig, NamedBodyRules};
    pub use crate::error::NotReplayable;
    pub use crate::judge::Judge;
    pub use crate::transport::Stage;
    pub use retryscope_config::Target;

    /// The per-response rules as the builders keep them.
    pub mod rule {
        pub use crate::rule::*;
    }
    /// The body rule as the builders keep it, and the read-ahead it drives.
    pub mod body_rule {
        pub use crate::body_rule::*;
    }
    /// Idempotency keys on the client: which header, generated or not.
    pub mod idempotency {
        pub use crate::idempotency::*;
    }
    /// A configured client's guards from its file.
    pub mod file_guards {
        pub use crate::file_guards::*;
    }
    /// Fallbacks as the builders keep them, and their run.
    pub mod fallback {
        pub use crate::fallback::*;
    }
    /// Failed responses give their connection back before the wait.
    pub mod release {
        pub use crate::release::*;
    }
    /// Whether one request may run again.
    pub mod safety {
        pub use crate::safety::*;
    }
    /// What the caller gets when the engine stops.
    pub mod shape {
        pub use crate::shape::*;
    }
    /// HTTP client attempt spans.
    pub mod spans {
        pub use crate::spans::*;
    }
    /// The redaction's parts, for the fuzz targets.
    pub mod redact {
        pub use crate::redact::{is_sensitive, redact_every_query_value};
    }
}
