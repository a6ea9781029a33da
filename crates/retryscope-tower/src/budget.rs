//! A dependency's retry budget: the default ratio budget, or gRPC's token bucket.

use retryscope::budget::BudgetShare;
use retryscope::throttle::Throttle;
use retryscope::{RetryBudget, TokenBucket};
use std::sync::Arc;

/// A dependency's retry budget: the default ratio budget, or gRPC's token bucket.
#[derive(Debug, Clone)]
pub(crate) enum Budget {
    Ratio(RetryBudget),
    // Only made with `grpc`; kept in the enum either way so the type is one.
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    Bucket(TokenBucket),
}

impl Budget {
    /// What a refusal says stopped the retries.
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Budget::Ratio(_) => "retry budget",
            Budget::Bucket(_) => "retry throttling (token bucket)",
        }
    }
}

impl Throttle for Budget {
    fn request_started(&self) {
        match self {
            Budget::Ratio(b) => b.request_started(),
            Budget::Bucket(b) => b.request_started(),
        }
    }

    fn attempt_finished(&self, success: bool) {
        match self {
            Budget::Ratio(b) => b.attempt_finished(success),
            Budget::Bucket(b) => b.attempt_finished(success),
        }
    }

    fn try_acquire_retry(&self) -> bool {
        match self {
            Budget::Ratio(b) => b.try_acquire_retry(),
            Budget::Bucket(b) => b.try_acquire_retry(),
        }
    }

    fn available(&self) -> f64 {
        match self {
            Budget::Ratio(b) => b.available(),
            Budget::Bucket(b) => b.available(),
        }
    }

    fn share_floor(&self, share: Arc<dyn BudgetShare>, dependency: &str) -> bool {
        match self {
            Budget::Ratio(b) => b.share_floor(share, dependency),
            Budget::Bucket(b) => b.share_floor(share, dependency),
        }
    }
}
