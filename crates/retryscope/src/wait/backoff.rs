//! The sequence of delays a policy produces.

use super::jitter::Step;
use crate::budget::RetryCause;
use crate::policy::Policy;
use crate::random::JitterRng;
use std::time::Duration;

impl Policy {
    /// The delay before retry number `retry` (0 = the first retry), given the
    /// delay used before the previous one (`previous`; the base delay before the
    /// first retry). Stateless, so job queues can call it with what they stored.
    ///
    /// ```
    /// use retryscope::{Jitter, JitterRng, Policy};
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder().jitter(Jitter::None).build()?;
    /// let mut rng = JitterRng::seeded(7);
    /// let second = policy.delay(1, policy.base_delay(), &mut rng);
    /// assert_eq!(second, Duration::from_millis(400));
    /// # Ok::<(), retryscope::PolicyError>(())
    /// ```
    pub fn delay(&self, retry: u32, previous: Duration, rng: &mut JitterRng) -> Duration {
        self.delay_after(RetryCause::Transient, retry, previous, rng)
    }

    /// [`delay`](Self::delay) after a failure of `cause`: a throttling answer
    /// backs off from the policy's throttled base and cap
    /// ([`throttled_base_delay`](Self::throttled_base_delay)), anything else
    /// from its base and cap.
    ///
    /// ```
    /// use retryscope::budget::RetryCause;
    /// use retryscope::{Jitter, JitterRng, Policy};
    /// use std::time::Duration;
    ///
    /// let policy = Policy::aws_2026().to_builder().jitter(Jitter::None).build()?;
    /// let mut rng = JitterRng::seeded(7);
    /// let throttled = policy.delay_after(RetryCause::Throttled, 0, Duration::ZERO, &mut rng);
    /// let transient = policy.delay_after(RetryCause::Transient, 0, Duration::ZERO, &mut rng);
    /// assert_eq!((throttled, transient), (Duration::from_secs(1), Duration::from_millis(50)));
    /// # Ok::<(), retryscope::PolicyError>(())
    /// ```
    pub fn delay_after(
        &self,
        cause: RetryCause,
        retry: u32,
        previous: Duration,
        rng: &mut JitterRng,
    ) -> Duration {
        let (base, cap) = self.curve_of(cause);
        let step = Step { exponential: self.exponential(base, cap, retry), previous, base, cap };
        self.jitter().apply(step, rng)
    }

    /// `min(cap, base · multiplier^retry)`, where `retry` counts from 0 for the
    /// first retry. Never overflows: anything beyond the cap is the cap.
    pub fn exponential_delay(&self, retry: u32) -> Duration {
        self.exponential(self.base_delay(), self.max_delay(), retry)
    }

    fn exponential(&self, base: Duration, cap: Duration, retry: u32) -> Duration {
        let exponent = i32::try_from(retry).unwrap_or(i32::MAX);
        let secs = base.as_secs_f64() * self.multiplier().powi(exponent);
        Duration::try_from_secs_f64(secs).unwrap_or(cap).min(cap)
    }

    /// An iterator-like source of this policy's successive delays.
    pub fn backoff(&self) -> Backoff {
        Backoff::new(*self)
    }
}

/// Successive delays of one policy, remembering the previous delay for
/// [`Jitter::Decorrelated`](crate::Jitter::Decorrelated).
///
/// ```
/// use retryscope::{Jitter, JitterRng, Policy};
/// use std::time::Duration;
///
/// let policy = Policy::builder().jitter(Jitter::None).build()?;
/// let mut backoff = policy.backoff();
/// let mut rng = JitterRng::seeded(1);
/// let delays: Vec<_> = (0..3).map(|_| backoff.next_delay(&mut rng)).collect();
/// assert_eq!(delays, [200, 400, 800].map(Duration::from_millis));
/// # Ok::<(), retryscope::PolicyError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: Policy,
    retries: u32,
    previous: Duration,
}

impl Backoff {
    /// Starts before the first retry ([`Policy::backoff`]).
    pub(crate) fn new(policy: Policy) -> Self {
        Self { policy, retries: 0, previous: policy.base_delay() }
    }

    /// The delay before the next retry; advances the sequence.
    pub fn next_delay(&mut self, rng: &mut JitterRng) -> Duration {
        let delay = self.policy.delay(self.retries, self.previous, rng);
        self.retries = self.retries.saturating_add(1);
        self.previous = delay;
        delay
    }
}
