//! Deciding what an attempt's result means.
//!
//! A [`Classify`] implementation turns each attempt's result into a
//! [`Verdict`]. The retry builder offers three without writing a type:
//! every error retryable ([`retry_any_error`](crate::Retry::retry_any_error);
//! by default only [`Transient`](crate::Transient) errors are), [`when`](crate::Retry::when) with a
//! predicate on the error, and [`classify`](crate::Retry::classify) with a
//! function of the whole result. The helpers below classify HTTP statuses and
//! I/O errors.
//!
//! # HTTP statuses
//!
//! [`HttpClassifier::new`]'s rules, the default everywhere (`Transient for
//! http::StatusCode` too), map a response status to a [`Verdict`]:
//!
//! | Status | Verdict | `error.type` |
//! |---|---|---|
//! | 1xx, 2xx, 3xx | `Success` (a redirect is a success for the retry engine) | — |
//! | 408, 429, 500, 502, 503, 504 | `Retryable` | the code, e.g. `503` |
//! | any other 4xx / 5xx (incl. 409) | `Permanent` | the code |
//! | 600–999 (non-standard) | `Permanent` | the code |
//!
//! An [`HttpClassifier`] changes the retryable set (any code, 409 included,
//! via [`HttpClassifier::retry_status`] / [`HttpClassifier::never_retry_status`]) and
//! can attach server hints ([`crate::hints`]) to retryable responses.
//!
//! # I/O errors
//!
//! [`io_error`] maps a [`std::io::ErrorKind`] to a verdict with a bounded,
//! lowercase snake_case `error.type`:
//!
//! | `ErrorKind` | Verdict | `error.type` |
//! |---|---|---|
//! | `ConnectionRefused`, `NotConnected`, `AddrNotAvailable`, `HostUnreachable`, `NetworkUnreachable`, `NetworkDown` | `Retryable` | `connect` |
//! | `ConnectionReset`, `ConnectionAborted`, `BrokenPipe` | `Retryable` | `reset` |
//! | `TimedOut` | `Retryable` | `timeout` |
//! | `UnexpectedEof` | `Retryable` | `incomplete` |
//! | `Interrupted`, `WouldBlock` | `Retryable` | `io` |
//! | `InvalidInput` | `Permanent` | `invalid_input` |
//! | `InvalidData` | `Permanent` | `invalid_data` |
//! | `PermissionDenied` | `Permanent` | `permission_denied` |
//! | `NotFound` | `Permanent` | `not_found` |
//! | `Unsupported` | `Permanent` | `unsupported` |
//! | anything else | `Permanent` | `_OTHER` ([`ErrorType::OTHER`]) |
//!
//! # Idempotency
//!
//! A failed request may be retried only if doing so cannot duplicate a side
//! effect. Whether an HTTP request may is `retryscope-http`'s decision (its
//! method, an [`IDEMPOTENCY_KEY`] header, the caller's word, and whether it
//! reached the server); the engine holds the header's name and the one
//! key-length limit ([`MAX_IDEMPOTENCY_KEY_LEN`]) client and server share.
//!
//! # Transient errors
//!
//! Transient-only by default: errors that know whether retrying can help.
//!
//! The first rule of retrying is to retry only what is plausibly transient: a
//! refused connection or a 503 may succeed next time, a unique violation or a
//! syntax error never will, and retrying it only multiplies the load. So
//! `op.retry(policy)` retries an error only if its type says how
//! ([`Transient`](crate::Transient)); for any other error type the retry does not compile until
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

use crate::verdict::{ErrorType, Verdict};

/// Turns an attempt's result into a [`Verdict`].
pub trait Classify<T, E> {
    /// Judges one attempt's result.
    fn classify(&mut self, result: &Result<T, E>) -> Verdict;

    /// Judges an attempt that the policy's per-attempt timeout cut short. The
    /// default retries it; override it for operations that must not run twice
    /// when a first try may have reached the server.
    fn timeout(&mut self) -> Verdict {
        Verdict::retryable(ErrorType::TIMEOUT)
    }

    /// Prepares a failed attempt's result to be kept through the backoff wait
    /// that follows it.
    ///
    /// The engine keeps the result so that it can hand it back if no further
    /// attempt is made (the breaker opened, the deadline passed). Whatever it
    /// holds stays held for the whole wait, which a server's `Retry-After` can
    /// make long: release here what the caller will not need, such as the
    /// unread body of an HTTP response, which pins a pooled connection. The
    /// default keeps everything.
    ///
    /// ```
    /// use retryscope::classify::Classify;
    /// use retryscope::{ErrorType, Verdict};
    ///
    /// /// A response: a status and a body that holds a connection.
    /// struct Reply { status: u16, body: Option<Vec<u8>> }
    ///
    /// struct Statuses;
    ///
    /// impl Classify<Reply, std::io::Error> for Statuses {
    ///     fn classify(&mut self, result: &Result<Reply, std::io::Error>) -> Verdict {
    ///         match result {
    ///             Ok(reply) if reply.status == 503 => Verdict::retryable(ErrorType::Status(503)),
    ///             Ok(_) => Verdict::Success,
    ///             Err(_) => Verdict::retryable(ErrorType::OTHER),
    ///         }
    ///     }
    ///
    ///     fn before_wait(&mut self, kept: Result<Reply, std::io::Error>) -> Result<Reply, std::io::Error> {
    ///         // Keep the status, let the body (and its connection) go.
    ///         kept.map(|reply| Reply { body: None, ..reply })
    ///     }
    /// }
    /// # let kept = Statuses.before_wait(Ok(Reply { status: 503, body: Some(vec![0; 512]) }));
    /// # assert!(kept.is_ok_and(|r| r.status == 503 && r.body.is_none()));
    /// ```
    fn before_wait(&mut self, kept: Result<T, E>) -> Result<T, E> {
        kept
    }

    /// What an attempt's answer says about the dependency's pace: a
    /// `Retry-After` or gRPC pushback, a reported quota, whether it was a
    /// throttling answer ([`hints::pace_signal`](crate::hints::pace_signal)
    /// reads them from HTTP headers).
    ///
    /// The engine asks it for every attempt's result when the call's
    /// dependency has a [`Pacer`](crate::Pacer), before
    /// [`classify`](Self::classify), and the pacer learns what it says: an
    /// integration tells its pacer nothing itself. By default an answer says
    /// nothing about pace.
    ///
    /// ```
    /// use retryscope::classify::Classify;
    /// use retryscope::pace::PaceSignal;
    /// use retryscope::{ErrorType, Hint, Verdict};
    /// use std::time::Duration;
    ///
    /// /// A status and the seconds its `Retry-After` asked for.
    /// struct Reply { status: u16, retry_after: Option<u64> }
    ///
    /// struct Statuses;
    ///
    /// impl Classify<Reply, std::io::Error> for Statuses {
    ///     fn classify(&mut self, result: &Result<Reply, std::io::Error>) -> Verdict {
    ///         match result {
    ///             Ok(reply) if reply.status == 429 => Verdict::retryable(ErrorType::Status(429)),
    ///             Ok(_) => Verdict::Success,
    ///             Err(_) => Verdict::retryable(ErrorType::OTHER),
    ///         }
    ///     }
    ///
    ///     fn pace(&mut self, result: &Result<Reply, std::io::Error>) -> Option<PaceSignal> {
    ///         let reply = result.as_ref().ok()?;
    ///         let not_before = reply.retry_after.map(|seconds| Hint::retry_after(Duration::from_secs(seconds)));
    ///         Some(PaceSignal { not_before, throttled: reply.status == 429, ..PaceSignal::none() })
    ///     }
    /// }
    /// # let signal = Statuses.pace(&Ok(Reply { status: 429, retry_after: Some(2) }));
    /// # assert!(signal.is_some_and(|s| s.throttled && s.not_before.is_some()));
    /// ```
    fn pace(&mut self, result: &Result<T, E>) -> Option<crate::pace::PaceSignal> {
        let _ = result;
        None
    }
}

/// Every `Ok` is a success, every `Err` retryable: what
/// [`Retry::retry_any_error`](crate::Retry::retry_any_error) selects.
#[derive(Debug, Clone, Copy, Default)]
pub struct AnyError;

impl<T, E> Classify<T, E> for AnyError {
    fn classify(&mut self, result: &Result<T, E>) -> Verdict {
        match result {
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::retryable(ErrorType::OTHER),
        }
    }
}

/// Retries the errors a predicate accepts; the others are permanent.
#[derive(Debug, Clone, Copy)]
pub struct When<P>(pub(crate) P);

impl<T, E, P: FnMut(&E) -> bool> Classify<T, E> for When<P> {
    fn classify(&mut self, result: &Result<T, E>) -> Verdict {
        match result {
            Ok(_) => Verdict::Success,
            Err(e) if (self.0)(e) => Verdict::retryable(ErrorType::OTHER),
            Err(_) => Verdict::permanent(ErrorType::OTHER),
        }
    }
}

/// Classifies with a function of the whole result.
#[derive(Debug, Clone, Copy)]
pub struct ClassifyFn<F>(pub(crate) F);

impl<T, E, F: FnMut(&Result<T, E>) -> Verdict> Classify<T, E> for ClassifyFn<F> {
    fn classify(&mut self, result: &Result<T, E>) -> Verdict {
        (self.0)(result)
    }
}

mod io;
#[cfg(feature = "http")]
mod safety;
#[cfg(feature = "http")]
mod status;
#[cfg(all(test, feature = "http"))]
#[allow(clippy::unwrap_used)]
mod tests;
pub(crate) mod transient;

pub use io::io_error;
#[cfg(feature = "http")]
pub use safety::{IDEMPOTENCY_KEY, MAX_IDEMPOTENCY_KEY_LEN};
#[cfg(feature = "http")]
pub use status::HttpClassifier;
#[cfg(feature = "http")]
pub(crate) use status::status;
pub use transient::{GRPC_CODE_NAMES, TransientErrors, cause_verdict};
