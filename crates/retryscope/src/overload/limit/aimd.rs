//! AIMD: additive increase, multiplicative decrease, as Netflix's
//! concurrency-limits `AIMDLimit` defines it.

use super::Sample;
use crate::setting::SettingError;
use crate::setting::SettingValue;
use std::time::Duration;

/// The limit a new AIMD limiter starts at (Netflix's 20).
const AIMD_DEFAULT_INITIAL_LIMIT: u32 = 20;
/// The lowest limit unless set (Netflix's 20).
const AIMD_DEFAULT_MIN_LIMIT: u32 = 20;
/// The highest limit unless set (Netflix's 200).
const AIMD_DEFAULT_MAX_LIMIT: u32 = 200;
/// The factor a drop multiplies the limit by unless set (Netflix's 0.9).
const AIMD_DEFAULT_BACKOFF_RATIO: f64 = 0.9;
/// The round trip beyond which an answer counts as a drop unless set
/// (Netflix's 5 s).
const AIMD_DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The backoff ratio's range, Netflix's `[0.5, 1.0)`: below one half a
/// single drop would more than halve the limit, at one it would never shrink.
const AIMD_BACKOFF_RATIO_RANGE: (f64, f64) = (0.5, 1.0);

/// The loss-based limit: while attempts come back in time and the limit is
/// in use (at least half of it in flight when the attempt was sent), each
/// one raises the limit by one; a drop — a transient failure, a request to
/// slow down, or an answer slower than the timeout — multiplies it by the
/// backoff ratio. Kept within `min_limit..=max_limit`.
///
/// ```
/// use retryscope::overload::{Aimd, ConcurrencyLimiter};
/// use std::time::Duration;
///
/// # fn main() -> Result<(), retryscope::SettingError> {
/// let aimd = Aimd::builder().initial_limit(10).min_limit(1).timeout(Duration::from_millis(500)).build()?;
/// let limiter = ConcurrencyLimiter::builder(aimd).build()?;
/// let permits: Vec<_> = (0..5).filter_map(|_| limiter.try_acquire(Default::default())).collect();
/// assert_eq!((limiter.limit(), limiter.in_flight()), (10, 5));
/// // Only the fifth was sent with half the limit in flight (5 · 2 ≥ 10): +1.
/// for permit in permits {
///     permit.success(Duration::from_millis(20));
/// }
/// assert_eq!(limiter.limit(), 11);
/// let slow = limiter.try_acquire(Default::default()).expect("a free slot");
/// slow.success(Duration::from_secs(1)); // past the timeout: a drop, ⌊11 · 0.9⌋
/// assert_eq!(limiter.limit(), 9);
/// # Ok(())
/// # }
/// ```
///
/// **Defaults and limits** (Netflix's):
///
/// | | value |
/// |---|---|
/// | The limit a new AIMD limiter starts at (Netflix's 20). | 20 |
/// | The lowest limit unless set (Netflix's 20). | 20 |
/// | The highest limit unless set (Netflix's 200). | 200 |
/// | The factor a drop multiplies the limit by, fixed (Netflix's 0.9). | 0.9 |
/// | The round trip beyond which an answer counts as a drop unless set (Netflix's 5 s). | 5 s |
/// | The backoff ratio's range, Netflix's `[0.5, 1.0)`: below one half a single drop would more than halve the limit, at one it would never shrink. | 0.5 to 1.0 |
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Aimd {
    pub(super) initial_limit: u32,
    pub(super) min_limit: u32,
    pub(super) max_limit: u32,
    backoff_ratio: f64,
    timeout: Duration,
}

impl Aimd {
    /// Settings other than Netflix's defaults.
    pub fn builder() -> AimdBuilder {
        AimdBuilder::default()
    }

    /// The limit after `sample`, from `limit`: Netflix's `_update`.
    pub(super) fn update(&self, limit: f64, sample: Sample) -> f64 {
        let current = limit as u32;
        let next = if sample.dropped || sample.rtt > self.timeout {
            (f64::from(current) * self.backoff_ratio) as u32
        } else if sample.in_flight.saturating_mul(2) >= current {
            current.saturating_add(1)
        } else {
            current
        };
        f64::from(next.clamp(self.min_limit, self.max_limit))
    }
}

impl Default for Aimd {
    fn default() -> Self {
        Self {
            initial_limit: AIMD_DEFAULT_INITIAL_LIMIT,
            min_limit: AIMD_DEFAULT_MIN_LIMIT,
            max_limit: AIMD_DEFAULT_MAX_LIMIT,
            backoff_ratio: AIMD_DEFAULT_BACKOFF_RATIO,
            timeout: AIMD_DEFAULT_TIMEOUT,
        }
    }
}

/// Builds an [`Aimd`] limit; see [`Aimd::builder`].
#[derive(Debug, Clone, Default)]
#[must_use = "a builder makes no limit until `build` is called"]
pub struct AimdBuilder {
    aimd: Aimd,
}

impl AimdBuilder {
    /// The limit it starts at (default 20), within `min_limit..=max_limit`.
    pub const fn initial_limit(mut self, limit: u32) -> Self {
        self.aimd.initial_limit = limit;
        self
    }

    /// The lowest limit, at least 1 (default 20).
    pub const fn min_limit(mut self, limit: u32) -> Self {
        self.aimd.min_limit = limit;
        self
    }

    /// The highest limit, at least `min_limit` and at most
    /// 10,000 (default 200).
    pub const fn max_limit(mut self, limit: u32) -> Self {
        self.aimd.max_limit = limit;
        self
    }

    /// What a drop multiplies the limit by, within `[0.5, 1.0)` (default 0.9).
    #[cfg(test)]
    pub(crate) const fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.aimd.backoff_ratio = ratio;
        self
    }

    /// The round trip beyond which a successful answer still counts as a drop
    /// (default 5 s), within 1 ms..=60 s. Set it
    /// a little above the dependency's normal latency so that queueing at
    /// the dependency shrinks the limit before anything fails.
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.aimd.timeout = timeout;
        self
    }

    /// The limit, or the setting that is out of range.
    pub fn build(self) -> Result<Aimd, SettingError> {
        let a = self.aimd;
        super::check_limits(a.initial_limit, a.min_limit, a.max_limit)?;
        let (low, high) = AIMD_BACKOFF_RATIO_RANGE;
        if !(low..high).contains(&a.backoff_ratio) {
            return Err(SettingError::overload("backoff_ratio", SettingValue::Number(a.backoff_ratio)));
        }
        super::check_duration("timeout", a.timeout)?;
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rtt_ms: u64, in_flight: u32, dropped: bool) -> Sample {
        Sample { rtt: Duration::from_millis(rtt_ms), in_flight, dropped }
    }

    #[test]
    fn the_update_is_netflixs_additive_increase_multiplicative_decrease() {
        let aimd = Aimd::builder().min_limit(1).max_limit(30).build().expect("valid");
        // In use (in flight · 2 ≥ limit): +1.
        assert_eq!(aimd.update(10.0, sample(10, 5, false)), 11.0);
        // Not in use: unchanged.
        assert_eq!(aimd.update(10.0, sample(10, 4, false)), 10.0);
        // A drop: · 0.9, truncated as Netflix's int cast does.
        assert_eq!(aimd.update(10.0, sample(10, 9, true)), 9.0);
        assert_eq!(aimd.update(15.0, sample(10, 9, true)), 13.0);
        // Slower than the timeout is a drop too.
        assert_eq!(aimd.update(20.0, sample(5_001, 1, false)), 18.0);
        // Clamped.
        assert_eq!(aimd.update(30.0, sample(10, 30, false)), 30.0);
        assert_eq!(aimd.update(1.0, sample(10, 1, true)), 1.0);
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        for (builder, setting) in [
            (Aimd::builder().min_limit(0), "min_limit"),
            (Aimd::builder().min_limit(30).max_limit(10).initial_limit(20), "max_limit"),
            (Aimd::builder().initial_limit(500), "initial_limit"),
            (Aimd::builder().max_limit(100_000).initial_limit(20), "max_limit"),
            (Aimd::builder().backoff_ratio(1.0), "backoff_ratio"),
            (Aimd::builder().backoff_ratio(0.4), "backoff_ratio"),
            (Aimd::builder().backoff_ratio(f64::NAN), "backoff_ratio"),
            (Aimd::builder().timeout(Duration::ZERO), "timeout"),
        ] {
            let error = builder.build().expect_err("out of range");
            assert!(error.setting() == setting, "{error}");
        }
    }
}
