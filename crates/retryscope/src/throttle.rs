//! Fleet-level protection against retry amplification.
//!
//! A [`Throttle`] decides whether a retry may start at all, whatever the policy
//! says. The engine tells it when logical requests start and how attempts end, and
//! asks it before every retry. Two implementations ship:
//! [`RetryBudget`](crate::budget::RetryBudget) (retries capped to a fraction of
//! requests) and [`TokenBucket`](crate::budget::TokenBucket) (gRPC-style retry
//! throttling).

/// Decides whether a retry may start. Shared across tasks and threads; every
/// method must be cheap and must not block.
pub trait Throttle: Send + Sync {
    /// A logical request started (its first attempt is about to run).
    fn request_started(&self);
    /// An attempt finished; `success` is whether it succeeded.
    fn attempt_finished(&self, success: bool);
    /// Asks for permission to retry; `true` consumes the permission.
    fn try_acquire_retry(&self) -> bool;
    /// How many retries could start right now (for the `retryscope.budget.available`
    /// gauge).
    fn available(&self) -> f64;
}
