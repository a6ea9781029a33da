//! Published retry-throttling schemes the engine does not ship, reproduced as
//! small [`Budget`] implementations so the simulator drives them exactly as
//! it drives the engine's own [`RetryBudget`](retryscope::RetryBudget) and
//! [`TokenBucket`](retryscope::TokenBucket).
//!
//! They are per-client, single-threaded in the simulator, and keep their state
//! in relaxed atomics only because [`Budget`] requires `Send + Sync`.
//! Token amounts are kept in thousandths so that deposits like 0.1 add up
//! exactly.

use retryscope::budget::{Budget, RetryCause};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Thousandths of a token per token.
const MILLI: u64 = 1_000;

/// Grants every retry: "N retries" with nothing in the way.
#[derive(Debug, Default)]
pub struct Unlimited;

impl Budget for Unlimited {
    fn request_started(&self) {}
    fn attempt_finished(&self, _success: bool) {}
    fn try_acquire_retry(&self, _cause: RetryCause) -> bool {
        true
    }
    fn available(&self) -> f64 {
        f64::INFINITY
    }
}

/// The client-side retry token bucket of "Fixing retries with token buckets
/// and circuit breakers" (Marc Brooker, 2022), with the parameters of the
/// issue that commissioned this simulator: capacity 5 tokens, starting full;
/// every call (logical request) deposits 0.1 token; a retry is allowed only
/// while the bucket holds more than one token, and takes one.
///
/// At low failure rates it behaves like plain N retries; above about 10 %
/// failures it settles at about 0.1 retries per call.
#[derive(Debug)]
pub struct AdaptiveBucket {
    tokens: AtomicU64,
    capacity: u64,
    deposit: u64,
}

impl AdaptiveBucket {
    /// The bucket described above.
    pub fn new() -> Self {
        Self::with(5 * MILLI, MILLI / 10)
    }

    /// A bucket of `capacity` thousandths of a token, starting full, refilled
    /// `deposit` thousandths per call.
    pub fn with(capacity: u64, deposit: u64) -> Self {
        Self { tokens: AtomicU64::new(capacity), capacity, deposit }
    }
}

impl Default for AdaptiveBucket {
    fn default() -> Self {
        Self::new()
    }
}

impl Budget for AdaptiveBucket {
    fn request_started(&self) {
        let t = self.tokens.load(Relaxed);
        self.tokens.store((t + self.deposit).min(self.capacity), Relaxed);
    }
    fn attempt_finished(&self, _success: bool) {}
    fn try_acquire_retry(&self, _cause: RetryCause) -> bool {
        let t = self.tokens.load(Relaxed);
        let granted = t > MILLI;
        if granted {
            self.tokens.store(t - MILLI, Relaxed);
        }
        granted
    }
    fn available(&self) -> f64 {
        (self.tokens.load(Relaxed).saturating_sub(1) / MILLI) as f64
    }
}

/// The client-side circuit breaker of the same post, used only to break
/// retries (first tries always go out): retries stop while the client's
/// cumulative failures divided by its first tries exceed `threshold` (0.1),
/// and are otherwise allowed, up to the policy's limit.
#[derive(Debug)]
pub struct FailureRatioBreaker {
    first_tries: AtomicU64,
    failures: AtomicU64,
    /// The threshold in thousandths.
    threshold: u64,
}

impl FailureRatioBreaker {
    /// A breaker that stops retries above a 10 % failure ratio.
    pub fn new() -> Self {
        Self { first_tries: AtomicU64::new(0), failures: AtomicU64::new(0), threshold: MILLI / 10 }
    }
}

impl Default for FailureRatioBreaker {
    fn default() -> Self {
        Self::new()
    }
}

impl Budget for FailureRatioBreaker {
    fn request_started(&self) {
        self.first_tries.fetch_add(1, Relaxed);
    }
    fn attempt_finished(&self, success: bool) {
        if !success {
            self.failures.fetch_add(1, Relaxed);
        }
    }
    fn try_acquire_retry(&self, _cause: RetryCause) -> bool {
        // failures / first_tries <= threshold, in integers.
        self.failures.load(Relaxed) * MILLI <= self.threshold * self.first_tries.load(Relaxed)
    }
    fn available(&self) -> f64 {
        if self.try_acquire_retry(RetryCause::Transient) { 1.0 } else { 0.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_bucket_needs_more_than_one_token() {
        let bucket = AdaptiveBucket::new();
        // 5 tokens: four retries leave exactly 1, which is not more than 1.
        assert_eq!((0..10).filter(|_| bucket.try_acquire_retry(RetryCause::Transient)).count(), 4);
        (0..10).for_each(|_| bucket.request_started()); // 2 tokens
        assert!(bucket.try_acquire_retry(RetryCause::Transient));
        assert!(!bucket.try_acquire_retry(RetryCause::Transient));
    }

    #[test]
    fn breaker_stops_retries_above_ten_percent_failures() {
        let breaker = FailureRatioBreaker::new();
        (0..10).for_each(|_| breaker.request_started());
        breaker.attempt_finished(false);
        assert!(breaker.try_acquire_retry(RetryCause::Transient));
        breaker.attempt_finished(false);
        assert!(!breaker.try_acquire_retry(RetryCause::Transient));
    }
}
