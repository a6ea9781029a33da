//! Errors that say whether retrying can help (`Transient`), explained in the
//! `classify` module's docs (its section *Transient errors*).

use crate::classify::Classify;
#[cfg(any(feature = "http", feature = "hyper", feature = "tonic"))]
use crate::verdict::ErrorType;
use crate::verdict::Verdict;
use std::sync::Arc;

/// An error that knows whether retrying can help: the classification that
/// `op.retry(policy)` uses when the caller gives none.
///
/// Return [`Verdict::retryable`] for failures that may pass (a refused or reset
/// connection, a timeout, a 503), [`Verdict::permanent`] for the rest, each with
/// the `error.type` the telemetry should report. A `Success` verdict for an
/// error is treated as permanent: an `Err` is never a success.
///
/// ```
/// use retryscope::{ErrorType, Verdict};
/// use retryscope::Transient;
///
/// enum DbError { Deadlock, UniqueViolation }
///
/// impl Transient for DbError {
///     fn verdict(&self) -> Verdict {
///         match self {
///             DbError::Deadlock => Verdict::retryable(ErrorType::Kind("deadlock")),
///             DbError::UniqueViolation => Verdict::permanent(ErrorType::Kind("unique_violation")),
///         }
///     }
/// }
/// ```
pub trait Transient {
    /// Whether this error is worth another attempt, and its `error.type`.
    fn verdict(&self) -> Verdict;
}

impl<E: Transient + ?Sized> Transient for &E {
    fn verdict(&self) -> Verdict {
        (**self).verdict()
    }
}

impl<E: Transient + ?Sized> Transient for Box<E> {
    fn verdict(&self) -> Verdict {
        (**self).verdict()
    }
}

impl<E: Transient + ?Sized> Transient for Arc<E> {
    fn verdict(&self) -> Verdict {
        (**self).verdict()
    }
}

/// Connection refused, reset, timed out or cut short are transient; invalid
/// input, permissions and the rest are not ([`crate::classify::io_error`]).
impl Transient for std::io::Error {
    fn verdict(&self) -> Verdict {
        crate::classify::io_error(self.kind())
    }
}

/// The default status rules ([`HttpClassifier::new`](crate::classify::HttpClassifier::new)'s): 408, 429, 500, 502,
/// 503 and 504 are transient, every other status permanent.
#[cfg(feature = "http")]
impl Transient for http::StatusCode {
    fn verdict(&self) -> Verdict {
        match crate::classify::status(*self) {
            // A status the caller made an error is not a success, whatever it is.
            Verdict::Success => Verdict::permanent(ErrorType::Status(self.as_u16())),
            verdict => verdict,
        }
    }
}

/// The verdict on the first cause in `error`'s source chain that says what
/// happened on the wire ([`cause_verdict`]); `None` when no cause says.
///
/// How the client libraries' errors are judged (the `hyper` feature and the
/// ones that need it), whatever wraps the cause.
#[cfg(any(test, feature = "hyper"))]
pub(crate) fn transport_verdict(error: &(dyn std::error::Error + 'static)) -> Option<Verdict> {
    std::iter::successors(Some(error), |&e| e.source()).find_map(cause_verdict)
}

/// What one cause says happened on the wire, looking at that cause alone: an
/// I/O error ([`crate::classify::io_error`]), or (feature `hyper`) a
/// connection closed before the whole response arrived. For walks that look
/// for more than the verdict on the way down the chain.
pub fn cause_verdict(cause: &(dyn std::error::Error + 'static)) -> Option<Verdict> {
    if let Some(io) = cause.downcast_ref::<std::io::Error>() {
        return Some(io.verdict());
    }
    #[cfg(feature = "hyper")]
    if let Some(h) = cause.downcast_ref::<hyper::Error>()
        && h.is_incomplete_message()
    {
        return Some(Verdict::retryable(ErrorType::INCOMPLETE));
    }
    None
}

/// A transport failure: a connection closed mid-response or any I/O failure
/// hyper reports is judged by its cause; a parse or user error is permanent.
#[cfg(feature = "hyper")]
impl Transient for hyper::Error {
    fn verdict(&self) -> Verdict {
        if self.is_incomplete_message() {
            return Verdict::retryable(ErrorType::INCOMPLETE);
        }
        if self.is_timeout() {
            return Verdict::retryable(ErrorType::TIMEOUT);
        }
        if self.is_parse() || self.is_user() {
            return Verdict::permanent(ErrorType::OTHER);
        }
        transport_verdict(self).unwrap_or(Verdict::retryable(ErrorType::OTHER))
    }
}

/// A connection that could not be made is retryable (nothing was sent); any
/// other failure is judged by its cause.
#[cfg(feature = "hyper-util")]
impl Transient for hyper_util::client::legacy::Error {
    fn verdict(&self) -> Verdict {
        if self.is_connect() {
            return Verdict::retryable(ErrorType::CONNECT);
        }
        transport_verdict(self).unwrap_or(Verdict::permanent(ErrorType::OTHER))
    }
}

/// Connect failures and timeouts are retryable, builder, redirect and decode
/// errors permanent, an error status by the default status rules, anything
/// else by its cause.
///
/// `Transient` says whether a failure may pass, not whether the request is
/// safe to send twice: retry only idempotent requests this way, or use the
/// `retryscope-reqwest` middleware, which checks.
#[cfg(feature = "reqwest")]
impl Transient for reqwest::Error {
    fn verdict(&self) -> Verdict {
        if self.is_connect() {
            return Verdict::retryable(ErrorType::CONNECT);
        }
        if self.is_timeout() {
            return Verdict::retryable(ErrorType::TIMEOUT);
        }
        if self.is_redirect() {
            return Verdict::permanent(ErrorType::REDIRECT);
        }
        if self.is_builder() || self.is_decode() {
            return Verdict::permanent(ErrorType::REQUEST);
        }
        if let Some(status) = self.status() {
            return status.verdict();
        }
        transport_verdict(self).unwrap_or(Verdict::retryable(ErrorType::OTHER))
    }
}

/// A reqwest error as reqwest judges it; a middleware's error by its cause
/// (permanent when none says).
#[cfg(feature = "reqwest")]
impl Transient for reqwest_middleware::Error {
    fn verdict(&self) -> Verdict {
        match self {
            reqwest_middleware::Error::Reqwest(e) => e.verdict(),
            reqwest_middleware::Error::Middleware(e) => {
                transport_verdict(e.as_ref()).unwrap_or(Verdict::permanent(ErrorType::OTHER))
            }
        }
    }
}

/// The gRPC status codes by number, as `error.type` names them.
pub const GRPC_CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// `UNAVAILABLE` is retryable, as gRPC's own retry configurations usually
/// say (gRFC A6 leaves the set to the service config); every other code is
/// permanent. The `error.type` is the code's name (`"UNAVAILABLE"`).
#[cfg(feature = "tonic")]
impl Transient for tonic::Status {
    fn verdict(&self) -> Verdict {
        let code = self.code();
        let name = usize::try_from(code as i32)
            .ok()
            .and_then(|i| GRPC_CODE_NAMES.get(i).copied())
            .unwrap_or("UNKNOWN");
        if code == tonic::Code::Unavailable {
            Verdict::retryable(ErrorType::Kind(name))
        } else {
            Verdict::permanent(ErrorType::Kind(name))
        }
    }
}

/// The classifier of `op.retry(policy)`: every `Ok` is a success, and each `Err`
/// is judged by its own [`Transient`] implementation.
#[derive(Debug, Clone, Copy, Default)]
pub struct TransientErrors;

impl<T, E: Transient> Classify<T, E> for TransientErrors {
    #[inline]
    fn classify(&mut self, result: &Result<T, E>) -> Verdict {
        match result {
            Ok(_) => Verdict::Success,
            Err(error) => error.verdict(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::ErrorType;
    use std::io;

    #[test]
    fn the_transport_walk_finds_the_io_error_under_any_wrapper() {
        #[derive(Debug)]
        struct Wrapper(io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("request failed")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let wrapped = Wrapper(io::Error::from(io::ErrorKind::ConnectionReset));
        assert_eq!(transport_verdict(&wrapped), Some(Verdict::retryable(ErrorType::RESET)));
        let plain = io::Error::other("no cause");
        assert_eq!(transport_verdict(&Wrapper(plain)), Some(Verdict::permanent(ErrorType::OTHER)));
    }
}
