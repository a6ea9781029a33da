//! How a server's hint combines with the delay the policy computed: a floor
//! with a random spread on top, so that the clients one server told "come back
//! in 1 s" do not all come back in the same millisecond.

use crate::random::{JitterRng, uniform};
use crate::verdict::{DelaySource, HINT_SPREAD_MAX, Hint};
use std::time::Duration;

impl Hint {
    /// The wait this hint implies when the policy alone would wait `computed`,
    /// before any spread: the longer of the two, or the pushback itself.
    pub fn apply(self, computed: Duration) -> Duration {
        match self.source {
            DelaySource::Policy => computed,
            DelaySource::GrpcPushback => self.delay,
            DelaySource::RetryAfter | DelaySource::RateLimit => self.delay.max(computed),
        }
    }

    /// The widest random spread added on top of a floor hint: a fifth of the
    /// hint, at most [`HINT_SPREAD_MAX`]; none for gRPC pushback.
    pub(crate) fn spread(self) -> Duration {
        match self.source {
            DelaySource::Policy | DelaySource::GrpcPushback => Duration::ZERO,
            DelaySource::RetryAfter | DelaySource::RateLimit => (self.delay / 5).min(HINT_SPREAD_MAX),
        }
    }

    /// The wait after a failure that carried this hint, when the policy alone
    /// would wait `computed` (already jittered), and where it came from: the
    /// backoff if it is the longer wait, else the hint plus a random spread of
    /// up to a fifth of the hint (at most 5 s; none for gRPC
    /// pushback, which is waited exactly), never beyond `limit` (what the deadline
    /// and `max_server_delay` allow; a hint above it is the caller's to refuse).
    ///
    /// ```
    /// use retryscope::{DelaySource, Hint, JitterRng};
    /// use std::time::Duration;
    ///
    /// let mut rng = JitterRng::seeded(7);
    /// let (limit, backoff) = (Duration::from_secs(60), Duration::from_millis(150));
    /// let (wait, source) = Hint::retry_after(Duration::from_secs(1)).wait(backoff, limit, &mut rng);
    /// assert!(wait >= Duration::from_secs(1) && wait <= Duration::from_millis(1_200));
    /// assert_eq!(source, DelaySource::RetryAfter);
    /// // `Retry-After: 0` keeps the backoff.
    /// let zero = Hint::retry_after(Duration::ZERO).wait(backoff, limit, &mut rng);
    /// assert_eq!(zero, (backoff, DelaySource::Policy));
    /// ```
    pub fn wait(self, computed: Duration, limit: Duration, rng: &mut JitterRng) -> (Duration, DelaySource) {
        let floor = self.apply(computed);
        if floor == computed && self.source != DelaySource::GrpcPushback {
            // The backoff is already the longer wait, and already jittered.
            return (computed, DelaySource::Policy);
        }
        let spread = self.spread().min(limit.saturating_sub(floor));
        (floor.saturating_add(uniform(rng, Duration::ZERO, spread)), self.source)
    }
}
