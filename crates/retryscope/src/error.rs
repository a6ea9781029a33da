//! The error a caller gets back when the engine gives up.

use crate::outcome::StopReason;
use crate::verdict::ErrorType;
use std::error::Error;
use std::fmt;

/// The error returned when the engine gives up.
///
/// It says why ([`reason`](Self::reason)), how many attempts ran
/// ([`attempts`](Self::attempts)), what kind of failure the last attempt had
/// ([`error_type`](Self::error_type)) and carries the last attempt's error, if it
/// produced one (a timed-out attempt, a retryable response, or a refusal before the
/// first attempt has none).
///
/// Its `Display` says what happened; the last error is its
/// [`source`](Error::source), so an error reporter that walks the chain
/// (anyhow's `{:#}`, eyre, a `tracing` error field) prints it once:
///
/// ```
/// use retryscope::{ErrorType, RetryError, StopReason};
/// use std::error::Error;
///
/// let last = std::io::Error::new(std::io::ErrorKind::TimedOut, "read timed out");
/// let error = RetryError::new(StopReason::AttemptsExhausted, 3, Some(ErrorType::TIMEOUT), Some(last));
/// assert_eq!(error.to_string(), "gave up after 3 attempt(s): all attempts failed; last failure: timeout");
/// assert_eq!(error.source().map(ToString::to_string).as_deref(), Some("read timed out"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryError<E> {
    reason: StopReason,
    attempts: u32,
    error_type: Option<ErrorType>,
    last: Option<E>,
}

impl<E> RetryError<E> {
    /// An error for a stop after `attempts` attempts, the last of which failed
    /// with `error_type` and, if it produced one, the error `last`.
    pub fn new(reason: StopReason, attempts: u32, error_type: Option<ErrorType>, last: Option<E>) -> Self {
        Self { reason, attempts, error_type, last }
    }

    /// The last failure's `error.type` (e.g. `timeout`, `503`), if an attempt ran.
    pub fn error_type(&self) -> Option<ErrorType> {
        self.error_type
    }

    /// Why the engine stopped.
    pub fn reason(&self) -> StopReason {
        self.reason
    }

    /// How many attempts ran.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The last attempt's error, if it produced one.
    pub fn last_error(&self) -> Option<&E> {
        self.last.as_ref()
    }

    /// Takes the last attempt's error.
    pub fn into_last_error(self) -> Option<E> {
        self.last
    }
}

/// Says what happened — how many attempts, why the engine stopped, and the last
/// failure's `error.type` — but not the last error itself: that is
/// [`source`](Error::source), and a reporter that walks the chain (anyhow's
/// `{:#}`, eyre, `tracing`'s error fields) prints it next. Repeating it here
/// would print it twice (the Rust API guidelines, C-GOOD-ERR).
impl<E> fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gave up after {} attempt(s): {}", self.attempts, self.reason)?;
        match self.error_type {
            Some(error_type) => write!(f, "; last failure: {error_type}"),
            None => Ok(()),
        }
    }
}

impl<E: Error + 'static> Error for RetryError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.last.as_ref().map(|e| e as &(dyn Error + 'static))
    }
}
