//! A dependency's retry budget: the default ratio budget, or gRPC's token bucket.

use retryscope::budget::BudgetShare;
use retryscope::budget::{Budget, RetryCause};
use retryscope::{RetryBudget, TokenBucket};
use std::sync::Arc;

/// A dependency's retry budget: the default ratio budget, or gRPC's token bucket.
#[derive(Debug, Clone)]
pub(crate) enum LayerBudget {
    Ratio(RetryBudget),
    // Only made with `grpc`; kept in the enum either way so the type is one.
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    Bucket(TokenBucket),
}

impl LayerBudget {
    /// What a refusal says stopped the retries.
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    pub(crate) fn name(&self) -> &'static str {
        match self {
            LayerBudget::Ratio(_) => "retry budget",
            LayerBudget::Bucket(_) => "retry throttling (token bucket)",
        }
    }
}

impl Budget for LayerBudget {
    fn request_started(&self) {
        match self {
            LayerBudget::Ratio(b) => b.request_started(),
            LayerBudget::Bucket(b) => b.request_started(),
        }
    }

    fn attempt_finished(&self, success: bool) {
        match self {
            LayerBudget::Ratio(b) => b.attempt_finished(success),
            LayerBudget::Bucket(b) => b.attempt_finished(success),
        }
    }

    fn try_acquire_retry(&self, cause: RetryCause) -> bool {
        match self {
            LayerBudget::Ratio(b) => b.try_acquire_retry(cause),
            LayerBudget::Bucket(b) => b.try_acquire_retry(cause),
        }
    }

    fn available(&self) -> f64 {
        match self {
            LayerBudget::Ratio(b) => b.available(),
            LayerBudget::Bucket(b) => b.available(),
        }
    }

    fn share_floor(&self, share: Arc<dyn BudgetShare>, dependency: &str) -> bool {
        match self {
            LayerBudget::Ratio(b) => b.share_floor(share, dependency),
            LayerBudget::Bucket(b) => b.share_floor(share, dependency),
        }
    }
}
