//! The errors the layer adds: why it gave up, and why it did not retry.

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

/// A request failed in a way that would have been retried, but its body could
/// not be sent again: it was a stream, or larger than the replay limit. The
/// [`source`](StdError::source) is the failure.
///
/// In gRPC mode the caller gets a `tonic::Status` instead (a tonic client
/// reads nothing else): the server's code, its message saying it was not
/// retried, and `grpc::NOT_RETRIED` (`body-not-replayable`) in its metadata.
#[derive(Debug)]
pub struct NotRetried {
    source: BoxError,
}

impl NotRetried {
    pub(crate) fn new(source: BoxError) -> Self {
        Self { source }
    }
}

impl fmt::Display for NotRetried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The failure itself is the source: a reporter that walks the chain prints it next.
        f.write_str(
            "not retried: the request body was streamed or larger than the replay limit, so it was sent once",
        )
    }
}

impl StdError for NotRetried {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

pub(crate) use retryscope_http::NotReplayable;
