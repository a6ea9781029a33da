//! A concurrency limit as a [`Guard`]: a slot for every attempt as it is
//! sent (a full limit holds it, polling, up to the limiter's `max_wait`),
//! given back with the attempt's round trip; its limit and the slots taken
//! published as gauges.

use super::{ConcurrencyLimiter, LimitPermit, SLOT_POLL};
use crate::guard::{Admission, Attempt, End, Gauge, GaugeKind, Guard, Worst};
use crate::outcome::StopReason;
use std::time::Duration;

/// `retryscope.limit.limit` (`{request}`): how many attempts may be in
/// flight at once; the lowest is the worst.
pub(crate) const LIMIT: Gauge = Gauge {
    name: "retryscope.limit.limit",
    description: "The adaptive concurrency limit: how many attempts may be in flight to the dependency.",
    unit: "{request}",
    worst: Worst::Lowest,
    kind: GaugeKind::U64,
};

/// `retryscope.limit.in_flight` (`{request}`): how many attempts hold a
/// slot now; the highest is the worst.
pub(crate) const LIMIT_IN_FLIGHT: Gauge = Gauge {
    name: "retryscope.limit.in_flight",
    description: "How many attempts hold a slot of the dependency's adaptive concurrency limit.",
    unit: "{request}",
    worst: Worst::Highest,
    kind: GaugeKind::U64,
};

impl Guard for ConcurrencyLimiter {
    /// The attempt's slot, once taken, and how long it has waited for one,
    /// in microseconds (the holds handed out, not the clock: at most the
    /// limiter's `max_wait`, a minute).
    type Permit = (Option<LimitPermit>, u32);

    #[inline]
    fn admit(&self, _attempt: Attempt) -> Admission<Self::Permit> {
        Admission::Go((None, 0))
    }

    /// A full limit holds the attempt for 2 ms at a time — waiters
    /// poll, there is no queue to grow — up to `max_wait`, never past the
    /// call's deadline, then refuses it.
    #[inline]
    fn send(&self, attempt: Attempt, (slot, waited): &mut Self::Permit) -> Admission {
        if slot.is_some() {
            return Admission::Go(());
        }
        if let Some(taken) = self.try_acquire(attempt.priority()) {
            *slot = Some(taken);
            return Admission::Go(());
        }
        let waited_for = Duration::from_micros(u64::from(*waited));
        let mut left = self.max_wait().saturating_sub(waited_for);
        if let Some(remaining) = attempt.remaining() {
            left = left.min(remaining);
        }
        if left.is_zero() {
            return Admission::Refuse(StopReason::ConcurrencyLimited {
                limit: self.limit(),
                waited: waited_for,
            });
        }
        let hold = left.min(SLOT_POLL);
        *waited = waited.saturating_add(u32::try_from(hold.as_micros()).unwrap_or(u32::MAX));
        Admission::Hold { wait: hold, source: None, permit: () }
    }

    /// The limit learns from the round trip: an answer is a sample, a
    /// transient failure or a request to slow down a drop, a cancelled
    /// attempt nothing.
    #[inline]
    fn settle(&self, attempt: Attempt, (slot, _): Self::Permit, end: End) {
        let Some(slot) = slot else { return };
        match end {
            End::Succeeded | End::Answered => slot.success(attempt.latency()),
            End::Failed | End::Throttled => slot.dropped(attempt.latency()),
            End::Cancelled | End::NotSent => drop(slot),
        }
    }

    /// The limit and the slots taken, always: a limit has both from its start.
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        report(&LIMIT, f64::from(self.limit()));
        report(&LIMIT_IN_FLIGHT, f64::from(self.in_flight()));
    }
}
