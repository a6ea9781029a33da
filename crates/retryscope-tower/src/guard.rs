//! A dependency's retry guard: the default budget, or gRPC's token bucket.

use retryscope::budget::BudgetShare;
use retryscope::throttle::Throttle;
use retryscope::{RetryBudget, TokenBucket};
use std::sync::Arc;

/// A dependency's retry guard: the default budget, or gRPC's token bucket.
#[derive(Debug, Clone)]
pub(crate) enum Guard {
    Budget(RetryBudget),
    // Only made with `grpc`; kept in the enum either way so the type is one.
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    Bucket(TokenBucket),
}

impl Guard {
    /// What a refusal says stopped the retries.
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Guard::Budget(_) => "retry budget",
            Guard::Bucket(_) => "retry throttling (token bucket)",
        }
    }
}

impl Throttle for Guard {
    fn request_started(&self) {
        match self {
            Guard::Budget(b) => b.request_started(),
            Guard::Bucket(b) => b.request_started(),
        }
    }

    fn attempt_finished(&self, success: bool) {
        match self {
            Guard::Budget(b) => b.attempt_finished(success),
            Guard::Bucket(b) => b.attempt_finished(success),
        }
    }

    fn try_acquire_retry(&self) -> bool {
        match self {
            Guard::Budget(b) => b.try_acquire_retry(),
            Guard::Bucket(b) => b.try_acquire_retry(),
        }
    }

    fn available(&self) -> f64 {
        match self {
            Guard::Budget(b) => b.available(),
            Guard::Bucket(b) => b.available(),
        }
    }

    fn share_floor(&self, share: Arc<dyn BudgetShare>, dependency: &str) -> bool {
        match self {
            Guard::Budget(b) => b.share_floor(share, dependency),
            Guard::Bucket(b) => b.share_floor(share, dependency),
        }
    }
}
