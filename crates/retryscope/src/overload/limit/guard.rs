//! A concurrency limit as a [`Guard`]: a slot for every attempt as it is
//! sent (a full limit holds it, polling, up to the limiter's `max_wait`),
//! given back with the attempt's round trip.

use super::{ConcurrencyLimiter, LimitPermit, SLOT_POLL};
use crate::guard::{Admission, Attempt, End, Guard};
use crate::outcome::StopReason;
use std::time::Duration;

impl Guard for ConcurrencyLimiter {
    /// The attempt's slot, once taken, and how long it has waited for one.
    type Permit = (Option<LimitPermit>, Duration);

    fn admit(&self, _attempt: Attempt) -> Admission<Self::Permit> {
        Admission::Go((None, Duration::ZERO))
    }

    /// A full limit holds the attempt for [`SLOT_POLL`] at a time — waiters
    /// poll, there is no queue to grow — up to `max_wait`, never past the
    /// call's deadline, then refuses it.
    fn send(&self, attempt: Attempt, (slot, waited): &mut Self::Permit) -> Admission {
        if slot.is_some() {
            return Admission::Go(());
        }
        if let Some(taken) = self.try_acquire(attempt.priority()) {
            *slot = Some(taken);
            return Admission::Go(());
        }
        let mut left = self.max_wait().saturating_sub(*waited);
        if let Some(remaining) = attempt.remaining() {
            left = left.min(remaining);
        }
        if left.is_zero() {
            return Admission::Refuse(StopReason::ConcurrencyLimited {
                limit: self.limit(),
                waited: *waited,
            });
        }
        let hold = left.min(SLOT_POLL);
        *waited += hold;
        Admission::Hold { wait: hold, source: None, permit: () }
    }

    /// The limit learns from the round trip: an answer is a sample, a
    /// transient failure or a request to slow down a drop, a cancelled
    /// attempt nothing.
    fn settle(&self, attempt: Attempt, (slot, _): Self::Permit, end: End) {
        let Some(slot) = slot else { return };
        match end {
            End::Succeeded | End::Answered => slot.success(attempt.latency()),
            End::Failed | End::Throttled => slot.dropped(attempt.latency()),
            End::Cancelled | End::NotSent => drop(slot),
        }
    }
}
