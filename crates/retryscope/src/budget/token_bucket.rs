//! [`TokenBucket`]: gRPC-style retry throttling (gRFC A6).

use crate::sync::{AtomicU64, Ordering};
use std::fmt;
use std::sync::Arc;

use super::{MAX_TOKENS, MILLI};
use crate::budget::{Budget, RetryCause};
use crate::setting::SettingError;
use crate::setting::SettingValue;

/// gRPC-style retry throttling (gRFC A6).
///
/// The bucket holds up to `max_tokens` and starts full. Every failed attempt
/// takes one token (not below zero), every successful attempt gives back
/// `token_ratio` (not above `max_tokens`). Retries are allowed only while more
/// than half the bucket is left; a permitted retry costs nothing more, because
/// the failure that caused it has already paid. Tokens are kept with three
/// decimals, as in gRPC.
///
/// Unlike [`RetryBudget`](crate::RetryBudget) this reacts to *failures*, not to request volume: a
/// healthy dependency never throttles, a failing one stops retries after
/// `max_tokens / 2` net failures.
///
/// It is a dependency's budget, or a further [`Guard`](crate::guard::Guard)
/// asked beside another budget
/// ([`Dependency::with_guard`](crate::dependency::Dependency::with_guard)):
/// a gRPC channel whose service config throttles and whose client also has
/// a retry budget asks both.
///
/// # Example
///
/// ```
/// use retryscope::TokenBucket;
/// use retryscope::budget::{Budget, RetryCause};
///
/// let bucket = TokenBucket::builder().max_tokens(10).token_ratio(0.5).build()?;
/// for _ in 0..5 {
///     bucket.attempt_finished(false);
/// }
/// // 5 tokens left: not more than half of 10, so no retries.
/// assert!(!bucket.try_acquire_retry(RetryCause::Transient));
/// bucket.attempt_finished(true); // 5.5 tokens
/// assert!(bucket.try_acquire_retry(RetryCause::Transient));
/// # Ok::<(), retryscope::SettingError>(())
/// ```
#[derive(Clone)]
pub struct TokenBucket {
    inner: Arc<BucketInner>,
}

struct BucketInner {
    /// Current tokens, in thousandths.
    tokens: AtomicU64,
    /// Capacity, in thousandths.
    max: u64,
    /// Refill per success, in thousandths.
    refill: u64,
}

impl TokenBucket {
    /// A builder starting from the defaults (100 tokens, ratio 0.1).
    #[must_use]
    pub fn builder() -> TokenBucketBuilder {
        TokenBucketBuilder::default()
    }

    fn assemble(max_tokens: u32, refill: u64) -> Self {
        let max = u64::from(max_tokens) * MILLI;
        let inner = BucketInner { tokens: AtomicU64::new(max), max, refill };
        Self { inner: Arc::new(inner) }
    }

    /// Current tokens, in thousandths.
    pub(super) fn tokens(&self) -> u64 {
        self.inner.tokens.load(Ordering::Acquire)
    }

    /// Applies `change` to the token count atomically.
    fn adjust(&self, change: impl Fn(u64) -> u64) {
        // A change that leaves the count as it is (a success on a full bucket)
        // writes nothing: writing the same value back would still bounce the
        // cache line between threads.
        let _ = self.inner.tokens.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
            let next = change(t);
            (next != t).then_some(next)
        });
    }
}

impl Default for TokenBucket {
    /// A bucket of 100 tokens refilled 0.1 per success.
    fn default() -> Self {
        Self::assemble(100, 100)
    }
}

impl fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("tokens", &(self.tokens() as f64 / MILLI as f64))
            .field("max_tokens", &(self.inner.max / MILLI))
            .field("token_ratio", &(self.inner.refill as f64 / MILLI as f64))
            .finish()
    }
}

impl Budget for TokenBucket {
    /// Requests do not matter to this bucket: only attempt outcomes do.
    fn request_started(&self) {}

    /// A failure takes one token, a success gives back `token_ratio`.
    fn attempt_finished(&self, success: bool) {
        if success {
            let (refill, max) = (self.inner.refill, self.inner.max);
            self.adjust(|t| t.saturating_add(refill).min(max));
        } else {
            self.adjust(|t| t.saturating_sub(MILLI));
        }
    }

    /// Allowed while more than half the bucket is left; costs nothing.
    fn try_acquire_retry(&self, _cause: RetryCause) -> bool {
        self.tokens() * 2 > self.inner.max
    }

    /// Tokens above the half-way mark, in (fractional) tokens, never negative.
    fn available(&self) -> f64 {
        let above = (self.tokens() * 2).saturating_sub(self.inner.max);
        above as f64 / (2 * MILLI) as f64
    }
}

/// Builds a [`TokenBucket`]; see [`TokenBucket::builder`].
#[derive(Debug, Clone, Copy)]
pub struct TokenBucketBuilder {
    max_tokens: u32,
    token_ratio: f64,
}

impl Default for TokenBucketBuilder {
    fn default() -> Self {
        Self { max_tokens: 100, token_ratio: 0.1 }
    }
}

impl TokenBucketBuilder {
    /// Capacity, within `1..=`[`MAX_TOKENS`] (default 100).
    #[must_use]
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Tokens each success gives back, at least 0.001 (default 0.1), with
    /// decimals beyond the third ignored as gRFC A6 specifies (0.5466 gives back
    /// 0.546). A ratio above 1 is allowed, as gRPC allows it: each success then
    /// refills more than one failure drained, never beyond `max_tokens`.
    #[must_use]
    pub fn token_ratio(mut self, token_ratio: f64) -> Self {
        self.token_ratio = token_ratio;
        self
    }

    /// Validates the settings and builds the bucket.
    ///
    /// # Errors
    ///
    /// [`SettingError`] naming the first setting out of range.
    pub fn build(self) -> Result<TokenBucket, SettingError> {
        if !(1..=MAX_TOKENS).contains(&self.max_tokens) {
            return Err(SettingError::budget("max_tokens", SettingValue::Count(self.max_tokens)));
        }
        // A ratio below 0.001 truncates to zero thousandths: it would never refill.
        let refill = truncated_milli(self.token_ratio)
            .filter(|milli| *milli > 0)
            .ok_or(SettingError::budget("token_ratio", SettingValue::Number(self.token_ratio)))?;
        // One success never refills more than the whole bucket, so a larger
        // ratio behaves as this one.
        let refill = refill.min(u64::from(self.max_tokens) * MILLI);
        Ok(TokenBucket::assemble(self.max_tokens, refill))
    }
}

/// `ratio` in thousandths with the decimals beyond the third dropped, as A6
/// specifies (`0.5466` → 546); `None` for a negative, infinite or NaN ratio.
///
/// Truncates the shortest decimal form of `ratio` (the digits a config holds)
/// rather than `ratio × 1000`, whose binary error would turn `0.547` into 546.
fn truncated_milli(ratio: f64) -> Option<u64> {
    if !(ratio.is_finite() && ratio >= 0.0) {
        return None;
    }
    // `Display` for f64 prints the shortest round-trip decimal, never an exponent.
    let text = ratio.to_string();
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let thousandths: u64 = format!("{:0<3}", fraction.get(..3).unwrap_or(fraction)).parse().ok()?;
    // Saturates: anything this large is capped at the bucket's size anyway.
    let whole: u64 = whole.parse().unwrap_or(u64::MAX);
    Some(whole.saturating_mul(MILLI).saturating_add(thousandths))
}

#[cfg(test)]
mod truncation {
    use super::truncated_milli;

    #[test]
    fn decimals_beyond_the_third_are_dropped_not_rounded() {
        let cases =
            [(0.5466, 546), (0.547, 547), (0.1, 100), (0.0019, 1), (0.0009, 0), (1.0, 1_000), (2.5, 2_500)];
        for (ratio, milli) in cases {
            assert_eq!(truncated_milli(ratio), Some(milli), "{ratio}");
        }
        // Every three-decimal ratio survives its binary error exactly.
        for milli in 1..=5_000u64 {
            assert_eq!(truncated_milli(milli as f64 / 1_000.0), Some(milli));
        }
        assert_eq!(truncated_milli(1e300), Some(u64::MAX));
        for bad in [-0.1, f64::NAN, f64::INFINITY] {
            assert_eq!(truncated_milli(bad), None, "{bad}");
        }
    }
}
