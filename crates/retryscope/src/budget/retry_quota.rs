//! [`RetryQuota`]: the AWS SDKs' retry quota, each retry priced by its cause.

use crate::budget::{Budget, RetryCause};
use crate::setting::SettingValue;
use crate::sync::{AtomicU64, Ordering};
use std::fmt;
use std::sync::Arc;

use crate::setting::SettingError;

/// The largest capacity a [`RetryQuota`] accepts.
pub(crate) const MAX_QUOTA: u32 = 100_000;

/// The AWS SDKs' retry quota (the cross-SDK "standard" retry mode): a bucket of
/// `capacity` tokens, starting full, from which every retry takes its price —
/// the price of its [`RetryCause`] — and is refused when the bucket holds less.
/// A retry that succeeds gives its price back; a first attempt that succeeds
/// gives `success_increment`. Failures cost nothing more: the retry they led to
/// already paid.
///
/// Unlike [`TokenBucket`](crate::TokenBucket), the price depends on why the
/// retry is wanted, which the engine says through
/// [`Budget::try_acquire_retry`]: so that a fleet that is merely being
/// rate-limited keeps more of its retries than one whose dependency fails.
///
/// Two presets: [`aws_standard`](Self::aws_standard), the standard mode as
/// the SDKs have shipped it (500 tokens; 5 a retry, 10 after a timeout), and
/// [`aws_2026`](Self::aws_2026), the 2026 retry behaviour (500 tokens; 14 a
/// retry, 5 after a throttling answer). Pair the 2026 preset with
/// [`PolicyBuilder::hint_headroom`](crate::PolicyBuilder::hint_headroom)`(5 s)`:
/// that behaviour honours `x-amz-retry-after` within [computed backoff,
/// computed backoff + 5 s].
///
/// ```
/// use retryscope::budget::RetryQuota;
/// use retryscope::budget::{Budget, RetryCause};
///
/// let quota = RetryQuota::aws_2026();
/// assert!(quota.try_acquire_retry(RetryCause::Transient)); // 500 - 14
/// assert!(quota.try_acquire_retry(RetryCause::Throttled)); // - 5
/// assert_eq!(quota.tokens(), 481);
/// quota.retry_finished(RetryCause::Transient, true); // refunded: 495
/// quota.retry_finished(RetryCause::Throttled, false); // a failure keeps the price
/// assert_eq!(quota.tokens(), 495);
/// ```
///
/// **Limits**:
///
/// | | value |
/// |---|---|
/// | The largest capacity a [`RetryQuota`] accepts. | 100,000 |
#[derive(Clone)]
pub struct RetryQuota {
    inner: Arc<QuotaInner>,
}

struct QuotaInner {
    /// Never above the capacity, a `u32`: kept in the guards' one atomic type.
    tokens: AtomicU64,
    prices: Prices,
}

/// What a quota holds and charges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Prices {
    capacity: u32,
    retry: u32,
    timeout: u32,
    throttled: u32,
    success: u32,
}

impl Prices {
    const fn of(&self, cause: RetryCause) -> u32 {
        match cause {
            RetryCause::Timeout => self.timeout,
            RetryCause::Throttled => self.throttled,
            // A hedge's copy is priced as a retry: AWS has no hedging.
            RetryCause::Transient | RetryCause::Hedge => self.retry,
        }
    }
}

/// The standard retry mode's quota as the AWS SDKs ship it (the SRA's
/// `INITIAL_RETRY_TOKENS`, `RETRY_COST`, `TIMEOUT_RETRY_COST`,
/// `NO_RETRY_INCREMENT`).
const AWS_STANDARD: Prices = Prices { capacity: 500, retry: 5, timeout: 10, throttled: 5, success: 1 };

/// The 2026 retry behaviour: a retry costs 14, a throttled retry 5. It names no
/// separate price for a timeout, so a timeout's retry costs what any other does.
const AWS_2026: Prices = Prices { capacity: 500, retry: 14, timeout: 14, throttled: 5, success: 1 };

impl RetryQuota {
    /// The standard retry mode's quota as the AWS SDKs ship it: 500 tokens, a
    /// retry costs 5 (10 after a timeout), a first attempt's success gives 1.
    #[must_use]
    pub fn aws_standard() -> Self {
        Self::assemble(AWS_STANDARD)
    }

    /// The AWS 2026 retry behaviour's quota: 500 tokens, a retry costs 14, a
    /// retry after a throttling answer (429, `ThrottlingException`) 5, a first
    /// attempt's success gives 1.
    #[must_use]
    pub fn aws_2026() -> Self {
        Self::assemble(AWS_2026)
    }

    /// A builder starting from [`aws_2026`](Self::aws_2026)'s figures.
    pub fn builder() -> RetryQuotaBuilder {
        RetryQuotaBuilder { prices: AWS_2026 }
    }

    fn assemble(prices: Prices) -> Self {
        Self { inner: Arc::new(QuotaInner { tokens: AtomicU64::new(u64::from(prices.capacity)), prices }) }
    }

    /// The tokens left.
    pub fn tokens(&self) -> u32 {
        // Never above the capacity, itself a `u32`.
        u32::try_from(self.inner.tokens.load(Ordering::Acquire)).unwrap_or(u32::MAX)
    }

    fn give_back(&self, tokens: u32) {
        let capacity = u64::from(self.inner.prices.capacity);
        // Always `Some`: the update cannot fail.
        let _ = self.inner.tokens.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
            Some(t.saturating_add(u64::from(tokens)).min(capacity))
        });
    }
}

impl fmt::Debug for RetryQuota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.inner.prices;
        f.debug_struct("RetryQuota")
            .field("tokens", &self.tokens())
            .field("capacity", &p.capacity)
            .field("retry_cost", &p.retry)
            .field("timeout_cost", &p.timeout)
            .field("throttled_cost", &p.throttled)
            .field("success_increment", &p.success)
            .finish()
    }
}

impl Budget for RetryQuota {
    /// Requests do not matter to the quota: only retries and their ends do.
    fn request_started(&self) {}

    /// A first attempt that succeeded gives `success_increment` back; a failed
    /// one costs nothing (its retry will pay).
    fn attempt_finished(&self, success: bool) {
        if success {
            self.give_back(self.inner.prices.success);
        }
    }

    /// Priced as a transient failure's retry.
    /// How many retries at a transient failure's price the quota still pays for.
    fn available(&self) -> f64 {
        f64::from(self.tokens() / self.inner.prices.retry)
    }

    /// Takes the price of `cause`, if the quota holds that much.
    fn try_acquire_retry(&self, cause: RetryCause) -> bool {
        let price = u64::from(self.inner.prices.of(cause));
        self.inner.tokens.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| t.checked_sub(price)).is_ok()
    }

    /// A retry that succeeded gives its price back; a failed one keeps it spent.
    fn retry_finished(&self, cause: RetryCause, success: bool) {
        if success {
            self.give_back(self.inner.prices.of(cause));
        }
    }
}

/// Builds a [`RetryQuota`]; see [`RetryQuota::builder`].
#[derive(Debug, Clone, Copy)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RetryQuotaBuilder {
    prices: Prices,
}

impl RetryQuotaBuilder {
    /// How many tokens the quota holds, and starts with (1..=100,000).
    pub fn capacity(mut self, tokens: u32) -> Self {
        self.prices.capacity = tokens;
        self
    }

    /// What a retry after a transient failure (or a hedge's copy) costs.
    #[cfg(test)]
    pub(crate) fn retry_cost(mut self, tokens: u32) -> Self {
        self.prices.retry = tokens;
        self
    }

    /// What a retry after a throttling answer costs.
    #[cfg(test)]
    pub(crate) fn throttled_cost(mut self, tokens: u32) -> Self {
        self.prices.throttled = tokens;
        self
    }

    /// What a first attempt's success gives back (0 for nothing).
    #[cfg(test)]
    pub(crate) fn success_increment(mut self, tokens: u32) -> Self {
        self.prices.success = tokens;
        self
    }

    /// The quota, or the first setting out of range: the capacity must be
    /// within 1..=100,000, each cost within 1..=capacity (a free retry
    /// would make the quota bound nothing), the increment at most the capacity.
    pub fn build(self) -> Result<RetryQuota, SettingError> {
        let p = self.prices;
        if !(1..=MAX_QUOTA).contains(&p.capacity) {
            return Err(SettingError::budget("capacity", SettingValue::Count(p.capacity)));
        }
        for (setting, cost) in
            [("retry_cost", p.retry), ("timeout_cost", p.timeout), ("throttled_cost", p.throttled)]
        {
            if !(1..=p.capacity).contains(&cost) {
                return Err(SettingError::budget(setting, SettingValue::Count(cost)));
            }
        }
        if p.success > p.capacity {
            return Err(SettingError::budget("success_increment", SettingValue::Count(p.success)));
        }
        Ok(RetryQuota::assemble(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_2026_preset_prices_throttled_retries_below_others() {
        let quota = RetryQuota::aws_2026();
        // 500 / 14: 35 retries after failures, then 10 tokens left.
        assert_eq!((0..40).filter(|_| quota.try_acquire_retry(RetryCause::Transient)).count(), 35);
        assert_eq!(quota.tokens(), 10);
        // Two throttled retries still fit, at 5 each.
        assert!(quota.try_acquire_retry(RetryCause::Throttled));
        assert!(quota.try_acquire_retry(RetryCause::Throttled));
        assert!(!quota.try_acquire_retry(RetryCause::Throttled));
        assert_eq!(quota.available(), 0.0);
    }

    #[test]
    fn the_standard_preset_charges_timeouts_double() {
        let quota = RetryQuota::aws_standard();
        assert!(quota.try_acquire_retry(RetryCause::Timeout));
        assert_eq!(quota.tokens(), 490);
        assert!(quota.try_acquire_retry(RetryCause::Transient));
        assert_eq!(quota.tokens(), 485);
        quota.retry_finished(RetryCause::Timeout, true);
        assert_eq!(quota.tokens(), 495);
    }

    #[test]
    fn successes_refill_up_to_the_capacity_only() {
        let quota = RetryQuota::aws_2026();
        quota.attempt_finished(true);
        assert_eq!(quota.tokens(), 500);
        assert!(quota.try_acquire_retry(RetryCause::Transient));
        quota.attempt_finished(false);
        assert_eq!(quota.tokens(), 486);
        (0..20).for_each(|_| quota.attempt_finished(true));
        assert_eq!(quota.tokens(), 500);
    }

    #[test]
    fn the_builder_refuses_what_would_bound_nothing() {
        let refused = |b: RetryQuotaBuilder| b.build().expect_err("out of range").to_string();
        assert!(refused(RetryQuota::builder().capacity(0)).contains("capacity"));
        assert!(refused(RetryQuota::builder().capacity(MAX_QUOTA + 1)).contains("capacity"));
        assert!(refused(RetryQuota::builder().retry_cost(0)).contains("retry_cost"));
        assert!(refused(RetryQuota::builder().capacity(20).throttled_cost(21)).contains("throttled_cost"));
        assert!(refused(RetryQuota::builder().success_increment(501)).contains("success_increment"));
        let quota = RetryQuota::builder().capacity(20).retry_cost(10).build().expect("in range");
        assert_eq!(quota.available(), 2.0);
    }
}
