//! The hedging policy: how many copies, after what delay, within what time.

use super::delay::{HedgeDelay, PercentileDelay};
use super::latency::LatencyTracker;
use crate::driver::hedge::CopyPolicy;
use crate::policy::{MAX_DURATION, Policy};
use crate::setting::{SettingError, SettingValue};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

/// The most copies a hedged call may send, the first included: gRFC A6 caps
/// `hedgingPolicy.maxAttempts` at 5, and a policy asking for more is refused
/// rather than silently capped.
pub(crate) const MAX_COPIES: u32 = 5;

/// A validated hedging policy: build one with [`HedgePolicy::builder`].
///
/// Clones share the latency tracker of a [percentile delay](HedgeDelay::percentile):
/// build one policy per dependency and clone it into every call. A client that
/// calls many dependencies keeps one policy as a template and gives each
/// dependency its own [`fresh`](Self::fresh) copy, as the HTTP integrations'
/// per-dependency guards do.
///
/// ```
/// use retryscope::hedge::{HedgeDelay, HedgePolicy};
/// use std::time::Duration;
///
/// let policy = HedgePolicy::builder()
///     .max_copies(3)
///     .delay(HedgeDelay::Fixed(Duration::from_millis(50)))
///     .attempt_timeout(Duration::from_secs(2))
///     .deadline(Duration::from_secs(5))
///     .build()?;
/// assert_eq!(policy.max_copies(), 3);
/// # Ok::<(), retryscope::SettingError>(())
/// ```
///
/// **Limits**:
///
/// | | value |
/// |---|---|
/// | The most copies a hedged call may send, the first included: gRFC A6 caps `hedgingPolicy.maxAttempts` at 5, and a policy asking for more is refused rather than silently capped. | 5 |
#[derive(Clone)]
pub struct HedgePolicy {
    max_copies: u32,
    delay: HedgeDelay,
    tracker: Option<Arc<LatencyTracker>>,
    deadline: Option<Duration>,
    attempt_timeout: Option<Duration>,
    /// What the driver runs the copies under, made once: the copy limit, the
    /// deadline and the attempt timeout as a retry policy's.
    driven: Policy,
}

impl HedgePolicy {
    /// A builder with the defaults: 2 copies, a p95 delay
    /// ([`HedgeDelay::percentile`]`(0.95)` with its defaults), each copy cut
    /// at 5 s and the whole call at 15 s (as [`Policy::interactive`](crate::Policy::interactive)).
    pub const fn builder() -> HedgePolicyBuilder {
        HedgePolicyBuilder {
            max_copies: 2,
            delay: HedgeDelay::percentile(0.95),
            deadline: Some(Duration::from_secs(15)),
            attempt_timeout: Some(Duration::from_secs(5)),
        }
    }

    /// The most copies a call sends, the first included.
    pub const fn max_copies(&self) -> u32 {
        self.max_copies
    }

    /// The time limit of the whole call, copies and delays included.
    pub const fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The time limit of each copy.
    pub const fn attempt_timeout(&self) -> Option<Duration> {
        self.attempt_timeout
    }

    /// The same settings with a latency tracker of its own, that learns
    /// nothing from this policy's calls nor this policy from its: one per
    /// dependency, so that a slow host's latencies do not set a fast host's
    /// delay. A fixed delay has no tracker: the copy is a plain clone.
    ///
    /// ```
    /// use retryscope::hedge::{HedgeDelay, HedgePolicy};
    /// use std::time::Instant;
    ///
    /// let template = HedgePolicy::builder().delay(HedgeDelay::percentile(0.9)).build()?;
    /// let fast_host = template.fresh();
    /// assert_eq!(fast_host.max_copies(), template.max_copies());
    /// assert_eq!(fast_host.percentile_delay(Instant::now()), template.percentile_delay(Instant::now()));
    /// # Ok::<(), retryscope::SettingError>(())
    /// ```
    #[must_use]
    pub fn fresh(&self) -> Self {
        let tracker = self.tracker.as_ref().map(|tracker| Arc::new(LatencyTracker::new(tracker.window())));
        Self { tracker, ..self.clone() }
    }

    /// The same policy (sharing its latency tracker) whose deadline is at
    /// most `limit`: a caller's own timeout as the whole hedged call's
    /// deadline, copies and delays included, as
    /// [`Policy::with_deadline_within`] does for a retried call. A longer
    /// limit leaves the policy's own deadline.
    ///
    /// ```
    /// use retryscope::hedge::HedgePolicy;
    /// use std::time::Duration;
    ///
    /// let policy = HedgePolicy::builder().build()?; // a 15 s deadline
    /// let call = policy.with_deadline_within(Duration::from_millis(800));
    /// assert_eq!(call.deadline(), Some(Duration::from_millis(800)));
    /// let call = policy.with_deadline_within(Duration::from_secs(60));
    /// assert_eq!(call.deadline(), Some(Duration::from_secs(15)));
    /// # Ok::<(), retryscope::SettingError>(())
    /// ```
    #[must_use]
    pub fn with_deadline_within(&self, limit: Duration) -> Self {
        let driven = self.driven.with_deadline_within(limit);
        Self { deadline: driven.deadline(), driven, ..self.clone() }
    }

    /// The percentile delay the tracker would give now, for tests and
    /// dashboards: `None` for a fixed delay.
    ///
    /// ```
    /// use retryscope::hedge::{HedgeDelay, HedgePolicy};
    /// use std::time::{Duration, Instant};
    ///
    /// let policy = HedgePolicy::builder().delay(HedgeDelay::percentile(0.9)).build()?;
    /// // Nothing measured yet: the fallback.
    /// assert_eq!(policy.percentile_delay(Instant::now()), Some(Duration::from_millis(100)));
    /// # Ok::<(), retryscope::SettingError>(())
    /// ```
    pub fn percentile_delay(&self, now: std::time::Instant) -> Option<Duration> {
        match (&self.delay, &self.tracker) {
            (HedgeDelay::Percentile(p), Some(tracker)) => Some(tracker.delay(p, now)),
            _ => None,
        }
    }
}

impl CopyPolicy for HedgePolicy {
    fn max_copies(&self) -> u32 {
        self.max_copies
    }

    fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    fn attempt_timeout(&self) -> Option<Duration> {
        self.attempt_timeout
    }

    fn driven(&self) -> Policy {
        self.driven
    }

    fn next_delay(&self, now: Instant) -> Duration {
        match (&self.delay, &self.tracker) {
            (HedgeDelay::Percentile(p), Some(tracker)) => tracker.delay(p, now),
            (HedgeDelay::Fixed(delay), _)
            | (HedgeDelay::Percentile(PercentileDelay { fallback: delay, .. }), None) => *delay,
        }
    }

    fn learns(&self) -> bool {
        self.tracker.is_some()
    }

    fn record(&self, latency: Duration) {
        if let Some(tracker) = &self.tracker {
            tracker.record(latency);
        }
    }
}

impl fmt::Debug for HedgePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgePolicy")
            .field("max_copies", &self.max_copies)
            .field("delay", &self.delay)
            .field("deadline", &self.deadline)
            .field("attempt_timeout", &self.attempt_timeout)
            .finish_non_exhaustive()
    }
}

/// Builds a [`HedgePolicy`]; see [`HedgePolicy::builder`] for the defaults.
#[derive(Debug, Clone, Copy)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct HedgePolicyBuilder {
    max_copies: u32,
    delay: HedgeDelay,
    deadline: Option<Duration>,
    attempt_timeout: Option<Duration>,
}

impl HedgePolicyBuilder {
    /// The most copies a call sends, the first included: 1 (no hedging) to
    /// 5 (gRFC A6's cap).
    pub const fn max_copies(mut self, copies: u32) -> Self {
        self.max_copies = copies;
        self
    }

    /// How long to wait for an answer before sending the next copy.
    pub const fn delay(mut self, delay: HedgeDelay) -> Self {
        self.delay = delay;
        self
    }

    /// The time limit of the whole call: at most [`MAX_DURATION`].
    pub const fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// No time limit on the whole call (each copy still has its attempt
    /// timeout unless that is off too).
    pub const fn no_deadline(mut self) -> Self {
        self.deadline = None;
        self
    }

    /// The time limit of each copy: at most [`MAX_DURATION`]. A copy cut
    /// short counts as a non-fatal failure (the classifier's
    /// [`timeout`](crate::classify::Classify::timeout) verdict says).
    pub const fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// No time limit on each copy.
    pub const fn no_attempt_timeout(mut self) -> Self {
        self.attempt_timeout = None;
        self
    }

    /// Checks the settings and returns the policy.
    pub fn build(self) -> Result<HedgePolicy, SettingError> {
        let within = |setting: &'static str, value: Duration, min: Duration, max: Duration| {
            if value < min || value > max {
                Err(SettingError::hedge(
                    setting,
                    SettingValue::Duration(value),
                    SettingValue::Duration(min),
                    SettingValue::Duration(max),
                ))
            } else {
                Ok(())
            }
        };
        let tiny = Duration::from_nanos(1);
        if !(1..=MAX_COPIES).contains(&self.max_copies) {
            return Err(SettingError::hedge(
                "max_copies",
                SettingValue::Count(self.max_copies),
                SettingValue::Count(1),
                SettingValue::Count(MAX_COPIES),
            ));
        }
        if let Some(deadline) = self.deadline {
            within("deadline", deadline, tiny, MAX_DURATION)?;
        }
        if let Some(timeout) = self.attempt_timeout {
            within("attempt_timeout", timeout, tiny, MAX_DURATION)?;
        }
        let tracker = match self.delay {
            HedgeDelay::Fixed(delay) => {
                within("delay", delay, Duration::ZERO, MAX_DURATION)?;
                None
            }
            HedgeDelay::Percentile(p) => {
                if !(p.quantile > 0.0 && p.quantile < 1.0) {
                    return Err(SettingError::hedge(
                        "quantile",
                        SettingValue::Number(p.quantile),
                        SettingValue::Number(0.0),
                        SettingValue::Number(1.0),
                    ));
                }
                within("max", p.max, Duration::ZERO, MAX_DURATION)?;
                within("min", p.min, Duration::ZERO, p.max)?;
                within("fallback", p.fallback, Duration::ZERO, MAX_DURATION)?;
                within("window", p.window, Duration::from_millis(1), MAX_DURATION)?;
                if p.min_samples == 0 {
                    return Err(SettingError::hedge(
                        "min_samples",
                        SettingValue::Count(0),
                        SettingValue::Count(1),
                        SettingValue::Count(u32::MAX),
                    ));
                }
                Some(Arc::new(LatencyTracker::new(p.window)))
            }
        };
        Ok(HedgePolicy {
            max_copies: self.max_copies,
            delay: self.delay,
            tracker,
            deadline: self.deadline,
            attempt_timeout: self.attempt_timeout,
            driven: Policy::of_copies(self.max_copies, self.deadline, self.attempt_timeout),
        })
    }
}

/// What a hedging setting accepts, in a refusal's message: `min..=max` (for
/// `quantile`, strictly between).
pub(crate) fn describe(
    setting: &'static str,
    value: SettingValue,
    min: SettingValue,
    max: SettingValue,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    if setting == "quantile" {
        write!(f, "quantile must be above {min} and below {max}, got {value}")
    } else {
        write!(f, "{setting} must be at least {min} and at most {max}, got {value}")
    }
}
