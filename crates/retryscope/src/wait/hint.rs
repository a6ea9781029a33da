//! How a server's hint combines with the delay the policy computed.

use crate::verdict::{DelaySource, Hint};
use std::time::Duration;

impl Hint {
    /// The wait this hint implies when the policy alone would wait `computed`.
    pub fn apply(self, computed: Duration) -> Duration {
        match self.source {
            DelaySource::Policy => computed,
            DelaySource::RetryAfter | DelaySource::GrpcPushback => self.delay,
            DelaySource::RateLimit => self.delay.max(computed),
        }
    }

    /// The wait this hint implies over `computed`, and where its length came
    /// from: a `RateLimit` hint that does not lengthen the computed delay
    /// leaves the wait the policy's.
    #[inline]
    pub(super) fn combine(self, computed: Duration) -> (Duration, DelaySource) {
        let delay = self.apply(computed);
        let source = if delay == computed && self.source == DelaySource::RateLimit {
            DelaySource::Policy
        } else {
            self.source
        };
        (delay, source)
    }
}
