//! The errors the layer adds: why it gave up, and (defined in
//! `retryscope-http`, shared with `retryscope-reqwest`) why it did not retry.

use retryscope::{ErrorType, RetryError, StopReason};
use std::error::Error as StdError;
use std::fmt;

/// The error type of tower middleware: any error, boxed.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// The layer stopped retrying for a reason of its own — attempts, deadline,
/// budget, breaker or an over-long server hint — rather than because the
/// failure was permanent. Its [`source`](StdError::source) is the last attempt's
/// error, if it produced one.
///
/// In gRPC mode the caller gets a `tonic::Status` (`DEADLINE_EXCEEDED`,
/// `UNAVAILABLE`, or the last attempt's status) whose `source()` is this.
#[derive(Debug)]
pub struct GaveUp {
    inner: RetryError<BoxError>,
}

impl GaveUp {
    pub(crate) fn new(inner: RetryError<BoxError>) -> Self {
        Self { inner }
    }

    /// Why the layer stopped.
    pub fn reason(&self) -> StopReason {
        self.inner.reason()
    }

    /// How many attempts ran.
    pub fn attempts(&self) -> u32 {
        self.inner.attempts()
    }

    /// The last failure's `error.type` (`503`, `UNAVAILABLE`, `connect`…).
    pub fn error_type(&self) -> Option<ErrorType> {
        self.inner.error_type()
    }

    /// The last attempt's error, if it produced one.
    pub fn last_error(&self) -> Option<&BoxError> {
        self.inner.last_error()
    }
}

impl fmt::Display for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl StdError for GaveUp {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner.last_error().map(|e| &**e as &(dyn StdError + 'static))
    }
}

pub(crate) use retryscope_http::__private::NotReplayable;
pub use retryscope_http::NotRetried;
