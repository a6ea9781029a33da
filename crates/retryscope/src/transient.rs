//! Transient-only by default: errors that know whether retrying can help.
//!
//! The first rule of retrying is to retry only what is plausibly transient: a
//! refused connection or a 503 may succeed next time, a unique violation or a
//! syntax error never will, and retrying it only multiplies the load. So
//! `op.retry(policy)` retries an error only if its type says how
//! ([`Transient`]); for any other error type the retry does not compile until
//! the caller says which errors to retry ([`Retry::when`](crate::Retry::when),
//! [`classify`](crate::Retry::classify)) or that every error is worth a retry
//! ([`Retry::retry_any_error`](crate::Retry::retry_any_error)).
//!
//! ```
//! use retryscope::{Policy, Retryable};
//! use std::io;
//!
//! # async fn connect() -> io::Result<()> { Ok(()) }
//! # async fn run() -> Result<(), retryscope::RetryError<io::Error>> {
//! // `std::io::Error` is `Transient`: a refused connection is retried, a
//! // permission error is returned at once.
//! (|| connect()).retry(Policy::interactive()).await?;
//! # Ok(()) }
//! ```
//!
//! An error type that does not say is refused at compile time:
//!
//! ```compile_fail,E0277
//! use retryscope::{Policy, Retryable};
//!
//! struct UniqueViolation;
//!
//! # async fn run() {
//! let _ = (|| async { Err::<(), _>(UniqueViolation) }).retry(Policy::interactive()).await;
//! # }
//! ```
//!
//! Until it says how, or the caller says which errors to retry:
//!
//! ```
//! use retryscope::{Policy, Retryable};
//!
//! #[derive(Debug)]
//! enum DbError { Deadlock, UniqueViolation }
//!
//! # async fn run() {
//! let result = (|| async { Err::<(), _>(DbError::UniqueViolation) })
//!     .retry(Policy::interactive())
//!     .when(|e: &DbError| matches!(e, DbError::Deadlock))
//!     .await;
//! assert_eq!(result.unwrap_err().attempts(), 1); // never retried
//! # }
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(run());
//! ```

use crate::classify::Classify;
use crate::outcome::{ErrorType, Verdict};
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
/// use retryscope::outcome::{ErrorType, Verdict};
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

/// The default status rules ([`crate::classify::status`]): 408, 429, 500, 502,
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
