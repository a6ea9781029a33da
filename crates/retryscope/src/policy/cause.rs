//! Waits by cause: a throttling answer backs off from a base (and up to a
//! cap) of its own, and a retry the budget refuses may still wait out its
//! backoff before the call fails.
//!
//! A server that says "slow down" (429, `RESOURCE_EXHAUSTED`) asks for a
//! longer wait than one that failed for a moment: the AWS SDKs' 2026 retry
//! behaviour waits from 1 s after a throttling answer, from 50 ms after any
//! other transient failure ([`Policy::aws_2026`]). Which base applies is
//! decided by the failure the wait follows, [`RetryCause::of`] its error
//! type: the same classification the retry quota prices by.

use super::{Policy, PolicyBuilder, PolicyError, Settings, duration};
use crate::budget::RetryCause;
use std::time::Duration;

impl Policy {
    /// The delay before the first retry after a throttling answer, before
    /// jitter: [`base_delay`](Self::base_delay) unless set apart
    /// ([`PolicyBuilder::throttled_base_delay`]).
    pub const fn throttled_base_delay(&self) -> Duration {
        match duration(self.throttled_base_delay) {
            Some(base) => base,
            None => self.base_delay(),
        }
    }

    /// The cap on delays after a throttling answer:
    /// [`max_delay`](Self::max_delay) unless set apart
    /// ([`PolicyBuilder::throttled_max_delay`]).
    pub const fn throttled_max_delay(&self) -> Duration {
        match duration(self.throttled_max_delay) {
            Some(cap) => cap,
            None => self.max_delay(),
        }
    }

    /// Whether a retry the budget refuses still waits its backoff before the
    /// call fails with [`StopReason::BudgetExhausted`](crate::StopReason::BudgetExhausted)
    /// ([`PolicyBuilder::wait_out_refusal`]).
    pub const fn waits_out_refusal(&self) -> bool {
        self.wait_out_refusal
    }

    /// The base and the cap of the backoff after a failure of `cause`.
    pub(crate) const fn curve_of(&self, cause: RetryCause) -> (Duration, Duration) {
        match cause {
            RetryCause::Throttled => (self.throttled_base_delay(), self.throttled_max_delay()),
            _ => (self.base_delay(), self.max_delay()),
        }
    }
}

impl PolicyBuilder {
    /// The delay before the first retry after a throttling answer (HTTP 429,
    /// gRPC `RESOURCE_EXHAUSTED`), before jitter; the curve then grows by the
    /// same multiplier. Must be > 0 and ≤ the throttled cap. Unset, a
    /// throttling answer backs off from [`base_delay`](Self::base_delay).
    ///
    /// ```
    /// use retryscope::Policy;
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder()
    ///     .base_delay(Duration::from_millis(50))
    ///     .throttled_base_delay(Duration::from_secs(1))
    ///     .build()?;
    /// assert_eq!(policy.throttled_base_delay(), Duration::from_secs(1));
    /// assert_eq!(policy.throttled_max_delay(), policy.max_delay());
    /// # Ok::<(), retryscope::PolicyError>(())
    /// ```
    pub const fn throttled_base_delay(mut self, delay: Duration) -> Self {
        self.settings.throttled_base_delay = Some(delay);
        self
    }

    /// The cap on delays after a throttling answer. Must be > 0. Unset, the
    /// cap of every other failure, [`max_delay`](Self::max_delay).
    pub const fn throttled_max_delay(mut self, delay: Duration) -> Self {
        self.settings.throttled_max_delay = Some(delay);
        self
    }

    /// When the budget refuses a retry (an empty
    /// [`RetryQuota`](crate::budget::RetryQuota)), the call still waits the
    /// backoff it would have waited, then fails with
    /// [`StopReason::BudgetExhausted`](crate::StopReason::BudgetExhausted).
    /// For long polls, whose callers call again at once: failing fast would
    /// turn an empty quota into a tight loop. The AWS SDKs do this for their
    /// long-polling operations (SQS `ReceiveMessage`, Step Functions
    /// `GetActivityTask`). Off by default: a refused retry fails at once.
    pub const fn wait_out_refusal(mut self, wait: bool) -> Self {
        self.settings.wait_out_refusal = wait;
        self
    }
}

/// Checks the throttled base and cap of `p`, durations bounded by `limit`:
/// the cap above zero and within `limit`, the base above zero and within the
/// cap it applies to (either may be the one every failure has).
pub(super) fn validate(p: &Settings, limit: Duration) -> Result<(), PolicyError> {
    let cap = p.throttled_max_delay.unwrap_or(p.max_delay);
    if cap.is_zero() || cap > limit {
        return Err(PolicyError::out_of_range("throttled_max_delay", cap, limit));
    }
    let base = p.throttled_base_delay.unwrap_or(p.base_delay);
    if base.is_zero() || base > cap {
        return Err(PolicyError::out_of_range("throttled_base_delay", base, cap));
    }
    Ok(())
}
