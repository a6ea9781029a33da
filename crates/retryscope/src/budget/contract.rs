//! What a budget is to the engine: fleet-level protection against retry
//! amplification.
//!
//! A [`Budget`] decides whether a retry may start at all, whatever the policy
//! says. The engine tells it when logical requests start and how attempts end, and
//! asks it before every retry. Two implementations ship:
//! [`RetryBudget`](crate::budget::RetryBudget) (retries capped to a fraction of
//! requests) and [`TokenBucket`](crate::budget::TokenBucket) (gRPC-style retry
//! throttling). A third, [`RetryQuota`](crate::budget::RetryQuota) (the AWS
//! SDKs' retry quota), prices each retry by its [`RetryCause`].

use crate::budget::BudgetShare;
use crate::verdict::ErrorType;
use std::sync::Arc;

/// Decides whether a retry may start. Shared across tasks and threads; every
/// method must be cheap and must not block.
pub trait Budget: Send + Sync {
    /// A logical request started (its first attempt is about to run).
    fn request_started(&self);
    /// An attempt finished; `success` is whether it succeeded.
    fn attempt_finished(&self, success: bool);
    /// Asks for permission to retry after a failure of `cause`; `true`
    /// consumes the permission. A budget that prices retries by their cause
    /// (the AWS retry quota) reads it; the others ignore it.
    fn try_acquire_retry(&self, cause: RetryCause) -> bool;
    /// How many retries could start right now (for the `retryscope.budget.available`
    /// gauge).
    fn available(&self) -> f64;

    /// A retry granted by [`try_acquire_retry`](Self::try_acquire_retry)
    /// with `cause` finished; `success` is whether it succeeded. The engine
    /// calls it instead of [`attempt_finished`](Self::attempt_finished) for
    /// every attempt a grant paid for, so that a throttle can refund what that
    /// grant cost; the default is `attempt_finished(success)`.
    fn retry_finished(&self, cause: RetryCause, success: bool) {
        let _ = cause;
        self.attempt_finished(success);
    }

    /// Shares this throttle's floor with the other replicas of a fleet
    /// through `share`, as the throttle of `dependency` (see
    /// [`BudgetShare`]): what a client given a budget share does with each
    /// dependency's throttle as it makes it. `true` when the floor is shared
    /// from now on; `false` when it was shared already or there is no floor
    /// to share — the default, right for the token bucket and the AWS retry
    /// quota, whose tokens come back only with successes, so that a fleet
    /// calling a dependency that is down gets no more retries from them as
    /// time passes. [`RetryBudget`](crate::RetryBudget) shares its
    /// `min_per_second` floor ([`RetryBudget::share_with`](crate::RetryBudget::share_with)).
    fn share_floor(&self, share: Arc<dyn BudgetShare>, dependency: &str) -> bool {
        let _ = (share, dependency);
        false
    }
}

/// A budget behind an `Arc` is a budget: what a caller keeps to read the
/// budget a [`Dependency`](crate::dependency::Dependency) guards its calls
/// with, when the budget is not a handle itself.
impl<B: Budget + ?Sized> Budget for Arc<B> {
    fn request_started(&self) {
        (**self).request_started();
    }
    fn attempt_finished(&self, success: bool) {
        (**self).attempt_finished(success);
    }
    fn try_acquire_retry(&self, cause: RetryCause) -> bool {
        (**self).try_acquire_retry(cause)
    }
    fn available(&self) -> f64 {
        (**self).available()
    }
    fn retry_finished(&self, cause: RetryCause, success: bool) {
        (**self).retry_finished(cause, success);
    }
    fn share_floor(&self, share: Arc<dyn BudgetShare>, dependency: &str) -> bool {
        (**self).share_floor(share, dependency)
    }
}

/// Why a retry (or a hedge's further copy) is wanted: what a throttle that
/// prices retries by their cause reads ([`Budget::try_acquire_retry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetryCause {
    /// A transient failure: a 5xx, a reset, a refused connection.
    Transient,
    /// The attempt timed out (a client-side timeout, or gRPC
    /// `DEADLINE_EXCEEDED`).
    Timeout,
    /// The dependency asked the client to slow down: HTTP 429 or gRPC
    /// `RESOURCE_EXHAUSTED`.
    Throttled,
    /// A hedge's further copy, sent while earlier ones are still in flight.
    Hedge,
}

impl RetryCause {
    /// The cause of a retry after a failure of type `error`.
    ///
    /// ```
    /// use retryscope::ErrorType;
    /// use retryscope::budget::RetryCause;
    ///
    /// assert_eq!(RetryCause::of(ErrorType::Status(429)), RetryCause::Throttled);
    /// assert_eq!(RetryCause::of(ErrorType::TIMEOUT), RetryCause::Timeout);
    /// assert_eq!(RetryCause::of(ErrorType::Status(503)), RetryCause::Transient);
    /// ```
    pub fn of(error: ErrorType) -> Self {
        if error.is_throttling() {
            Self::Throttled
        } else if matches!(error, ErrorType::TIMEOUT | ErrorType::Kind("DEADLINE_EXCEEDED")) {
            Self::Timeout
        } else {
            Self::Transient
        }
    }
}
