//! The errors both integrations add: a request not retried because its body
//! cannot be sent again, and the guard against a bug that would resend one.

use std::error::Error as StdError;
use std::fmt;

/// Any error, boxed: what a failure is held as, whichever client produced it.
type BoxError = Box<dyn StdError + Send + Sync>;

/// A request failed in a way that would have been retried, but its body could
/// not be sent again: it was a stream, or (tower) larger than the replay limit.
/// Its [`source`](StdError::source) is the failure.
///
/// In gRPC mode `retryscope-tower` returns a `tonic::Status` instead (a tonic
/// client reads nothing else): the server's code, its message saying it was
/// not retried, and `grpc::NOT_RETRIED` (`body-not-replayable`) in its metadata.
#[derive(Debug)]
pub struct NotRetried {
    source: BoxError,
}

impl NotRetried {
    /// Wraps the failure that was not retried; for the integrations.
    #[doc(hidden)]
    pub fn new(source: impl Into<BoxError>) -> Self {
        Self { source: source.into() }
    }
}

impl fmt::Display for NotRetried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The failure itself is the source: a reporter that walks the chain prints it next.
        f.write_str("not retried: the request body cannot be sent again, so it was sent once")
    }
}

impl StdError for NotRetried {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

/// `budget_shared` was given to a builder that keeps no retry budget
/// (`no_budget()`): there is no floor to divide among the fleet, and the share
/// would be ignored. Refused rather than ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoBudgetToShare;

impl fmt::Display for NoBudgetToShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "budget_shared needs a retry budget per dependency, and this builder has none (no_budget)",
        )
    }
}

impl StdError for NoBudgetToShare {}

/// The engine asked for a second attempt of a request that can only be sent
/// once. The classifiers prevent this; the error exists so that a bug cannot
/// turn into a panic or a silently duplicated request. [`Judge::cause`]
/// classifies it as permanent.
///
/// [`Judge::cause`]: crate::judge::Judge::cause
#[derive(Debug)]
pub struct NotReplayable;

impl fmt::Display for NotReplayable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request body cannot be sent again")
    }
}

impl StdError for NotReplayable {}
