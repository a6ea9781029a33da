//! What one attempt's result means to the engine.
//!
//! A classifier turns each attempt's result into a [`Verdict`]: success, a
//! retryable failure (optionally carrying a server [`Hint`]) or a permanent
//! failure. Failures carry an [`ErrorType`], a low-cardinality label that the
//! instrumentation reports as `error.type`.

use std::fmt;
use std::time::Duration;

/// A bounded, low-cardinality name for a failure, reported as `error.type`.
///
/// HTTP statuses are reported as their code (`"503"`); other failures as a short
/// static name such as `"timeout"` or `"connect"`. Unknown kinds should use
/// [`ErrorType::OTHER`] so that metric cardinality stays bounded.
///
/// Besides the kinds with a constant here (`OTHER`, `TIMEOUT`, `CONNECT`,
/// `RESET`, `INCOMPLETE`, `CANCELLED`), the engine names these itself; all
/// are in [`ErrorType::BUILT_IN_KINDS`]:
///
/// | kind | reported for |
/// |---|---|
/// | `io` | a transient I/O condition (`Interrupted`, `WouldBlock`): try again |
/// | `invalid_input` | an invalid argument (`InvalidInput`) |
/// | `invalid_data` | data read that was not valid (`InvalidData`) |
/// | `permission_denied` | a missing permission (`PermissionDenied`) |
/// | `not_found` | what the operation needed was not there (`NotFound`) |
/// | `unsupported` | an operation not supported on this platform (`Unsupported`) |
/// | `request` | a request the HTTP client could not build, or a response it could not decode (`retryscope-reqwest`) |
/// | `redirect` | a redirect that could not be followed: a loop, too many hops (`retryscope-reqwest`) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorType {
    /// An HTTP response status (e.g. 503).
    Status(u16),
    /// A named failure kind, e.g. `"timeout"`.
    Kind(&'static str),
}

impl ErrorType {
    /// The catch-all kind for failures without a better name.
    pub const OTHER: ErrorType = ErrorType::Kind("_OTHER");
    /// The attempt timed out (the engine's per-attempt timeout, or the
    /// transport's).
    pub const TIMEOUT: ErrorType = ErrorType::Kind("timeout");
    /// No connection could be made: nothing reached the server.
    pub const CONNECT: ErrorType = ErrorType::Kind("connect");
    /// The connection was reset, aborted or broken.
    pub const RESET: ErrorType = ErrorType::Kind("reset");
    /// The connection closed before the response was complete.
    pub const INCOMPLETE: ErrorType = ErrorType::Kind("incomplete");
    /// The caller dropped the operation while an attempt was running.
    pub const CANCELLED: ErrorType = ErrorType::Kind("cancelled");
    /// A transient I/O condition (`Interrupted`, `WouldBlock`): try again.
    pub(crate) const IO: ErrorType = ErrorType::Kind("io");
    /// The operation was given an invalid argument (`InvalidInput`).
    pub(crate) const INVALID_INPUT: ErrorType = ErrorType::Kind("invalid_input");
    /// The data read was not valid (`InvalidData`).
    pub(crate) const INVALID_DATA: ErrorType = ErrorType::Kind("invalid_data");
    /// The operation lacked the permission it needed (`PermissionDenied`).
    pub(crate) const PERMISSION_DENIED: ErrorType = ErrorType::Kind("permission_denied");
    /// What the operation needed was not there (`NotFound`).
    pub(crate) const NOT_FOUND: ErrorType = ErrorType::Kind("not_found");
    /// The operation is not supported on this platform (`Unsupported`).
    pub(crate) const UNSUPPORTED: ErrorType = ErrorType::Kind("unsupported");
    /// The request could not be built or its response not decoded: the
    /// HTTP client's own refusal, reported by `retryscope-reqwest`.
    pub(crate) const REQUEST: ErrorType = ErrorType::Kind("request");
    /// A redirect could not be followed (a loop, too many hops), reported by
    /// `retryscope-reqwest`.
    pub(crate) const REDIRECT: ErrorType = ErrorType::Kind("redirect");

    /// The named kinds the engine and its integrations report themselves, for
    /// checks that a dashboard or alert only expects values that really occur.
    /// Statuses (`"100"`–`"599"`) come on top; a user's classifier may add kinds.
    pub const BUILT_IN_KINDS: [ErrorType; 14] = [
        ErrorType::OTHER,
        ErrorType::TIMEOUT,
        ErrorType::CONNECT,
        ErrorType::RESET,
        ErrorType::INCOMPLETE,
        ErrorType::CANCELLED,
        ErrorType::IO,
        ErrorType::INVALID_INPUT,
        ErrorType::INVALID_DATA,
        ErrorType::PERMISSION_DENIED,
        ErrorType::NOT_FOUND,
        ErrorType::UNSUPPORTED,
        ErrorType::REQUEST,
        ErrorType::REDIRECT,
    ];
}

impl ErrorType {
    /// Whether this failure is the dependency asking the client to slow down —
    /// HTTP 429 or gRPC `RESOURCE_EXHAUSTED` — rather than failing: a circuit
    /// breaker does not count it, and the adaptive pacer backs off on it.
    pub(crate) fn is_throttling(self) -> bool {
        matches!(self, ErrorType::Status(429) | ErrorType::Kind("RESOURCE_EXHAUSTED"))
    }

    /// Whether this failure is a conflict the server resolved while healthy:
    /// a database's transaction conflict — SQLSTATE `40001`
    /// serialization_failure or `40P01` deadlock_detected, reported by
    /// `retryscope-sqlx` — rolled back, or an HTTP 409 (retried only when
    /// configured, or on a keyed request whose first run is still in flight).
    /// A healthy server answering, so a circuit breaker does not count it (a
    /// retry budget still does).
    pub(crate) fn is_conflict(self) -> bool {
        matches!(self, ErrorType::Kind("40001" | "40P01") | ErrorType::Status(409))
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorType::Status(code) => write!(f, "{code}"),
            ErrorType::Kind(kind) => f.write_str(kind),
        }
    }
}

/// Where a wait's length came from (`retryscope.delay.source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DelaySource {
    /// The policy's backoff and jitter.
    Policy,
    /// A `Retry-After` header: a floor under the computed delay, with a spread
    /// on top (see [`Hint`]).
    RetryAfter,
    /// `RateLimit` headers: a floor under the computed delay, with a spread on
    /// top (see [`Hint`]).
    RateLimit,
    /// gRPC's `grpc-retry-pushback-ms` trailer (gRFC A6): replaces the computed
    /// delay.
    GrpcPushback,
}

impl DelaySource {
    /// Every source, in the order above: what dashboards and alerts may see.
    pub const ALL: [DelaySource; 4] =
        [DelaySource::Policy, DelaySource::RetryAfter, DelaySource::RateLimit, DelaySource::GrpcPushback];

    /// The attribute value used in telemetry: `policy`, `retry_after`,
    /// `rate_limit` or `grpc_pushback`.
    pub const fn as_str(self) -> &'static str {
        match self {
            DelaySource::Policy => "policy",
            DelaySource::RetryAfter => "retry_after",
            DelaySource::RateLimit => "rate_limit",
            DelaySource::GrpcPushback => "grpc_pushback",
        }
    }
}

impl fmt::Display for DelaySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A server's instruction on when to try again.
///
/// `Retry-After` and `RateLimit` hints are *floors*: the wait is at least the
/// hint and at least the policy's computed backoff. When the hint is the longer
/// of the two, a random spread of up to a fifth of the hint (at most 5 s, the
/// width the AWS SDKs allow above the backoff: `clamp(hint, backoff, backoff +
/// 5 s)`) is added on top, so that the
/// many clients one server told "come back in 1 s" at the same moment do not
/// come back in the same millisecond. The spread never takes the wait past the
/// deadline or the policy's `max_server_delay`. A hint shorter than the backoff
/// (such as `Retry-After: 0`) leaves the backoff as it is ([`Hint::wait`]).
///
/// gRPC pushback (`grpc-retry-pushback-ms`) is applied exactly: gRFC A6 says
/// the retry happens *after the given delay* and that the backoff then starts
/// again from the initial value, so retryscope neither floors nor spreads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hint {
    /// How long the server asks the client to wait.
    pub delay: Duration,
    /// Which header it came from; decides whether it is a floor under the
    /// computed delay or replaces it (gRPC pushback).
    pub source: DelaySource,
}

/// The widest random spread added on top of a server's `Retry-After` or
/// `RateLimit` hint: 5 s, the width the AWS SDKs allow above the backoff
/// (`clamp(hint, backoff, backoff + 5 s)`).
pub(crate) const HINT_SPREAD_MAX: Duration = Duration::from_secs(5);

impl Hint {
    /// A `Retry-After` hint: the next attempt waits at least `delay`.
    pub const fn retry_after(delay: Duration) -> Self {
        Self { delay, source: DelaySource::RetryAfter }
    }

    /// A `RateLimit` hint: the next attempt waits at least `delay`.
    pub const fn rate_limit(delay: Duration) -> Self {
        Self { delay, source: DelaySource::RateLimit }
    }

    /// A gRPC `grpc-retry-pushback-ms` hint: the next attempt waits exactly
    /// `delay`.
    pub const fn grpc_pushback(delay: Duration) -> Self {
        Self { delay, source: DelaySource::GrpcPushback }
    }
}

/// How the engine should treat the result of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Done: hand the result to the caller.
    Success,
    /// A transient failure: try again if the policy allows.
    Retryable {
        /// The failure's `error.type`.
        error: ErrorType,
        /// A server's instruction on when to try again, if it sent one.
        hint: Option<Hint>,
    },
    /// A failure that retrying cannot fix: stop now.
    Permanent {
        /// The failure's `error.type`.
        error: ErrorType,
    },
    /// A transient failure that must not be retried because running the
    /// operation again is unsafe — a 503 to a request that is not idempotent, say.
    /// It stops the engine like a permanent failure, and counts against the
    /// dependency's health (breaker, token bucket) like a retryable one.
    Unrepeatable {
        /// The failure's `error.type`.
        error: ErrorType,
    },
    /// A transient failure that another layer of the call chain retries, or
    /// has already retried: not retried here, so that retries happen at one
    /// layer only and do not multiply down the chain. It stops the engine with
    /// [`StopReason::UpstreamRetry`](crate::StopReason::UpstreamRetry) (reported
    /// as throttled) and counts against the dependency's health like a
    /// retryable failure.
    RetriedElsewhere {
        /// The failure's `error.type`.
        error: ErrorType,
    },
}

impl Verdict {
    /// A retryable failure without a server hint.
    pub const fn retryable(error: ErrorType) -> Self {
        Verdict::Retryable { error, hint: None }
    }

    /// A permanent failure.
    pub const fn permanent(error: ErrorType) -> Self {
        Verdict::Permanent { error }
    }

    /// A transient failure that must not be retried.
    pub const fn unrepeatable(error: ErrorType) -> Self {
        Verdict::Unrepeatable { error }
    }

    /// A transient failure that another layer retries.
    pub const fn retried_elsewhere(error: ErrorType) -> Self {
        Verdict::RetriedElsewhere { error }
    }

    /// The failure's `error.type`, or `None` on success.
    pub const fn error_type(&self) -> Option<ErrorType> {
        match self {
            Verdict::Success => None,
            Verdict::Retryable { error, .. }
            | Verdict::Permanent { error }
            | Verdict::Unrepeatable { error }
            | Verdict::RetriedElsewhere { error } => Some(*error),
        }
    }
}
