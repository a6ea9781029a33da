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
}
