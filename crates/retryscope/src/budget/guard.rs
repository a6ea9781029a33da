//! A retry budget as a [`Guard`]: it counts each call, charges each retry
//! and hedge copy at its plan, and hears how each attempt ended; what it
//! has left published as a gauge.

use super::{Budget, RetryCause};
use crate::guard::{Admission, Attempt, End, Gauge, GaugeKind, Guard, Worst};
use crate::outcome::StopReason;

/// `retryscope.budget.available` (`{retry}`): how many retries the budget
/// would allow now ([`Budget::available`]), for any budget; the lowest is the
/// worst.
pub(crate) const AVAILABLE: Gauge = Gauge {
    name: "retryscope.budget.available",
    description: "Retries the retry budget would allow right now.",
    unit: "{retry}",
    worst: Worst::Lowest,
    kind: GaugeKind::F64,
};

/// Every [`Budget`] is a guard: a call is a request, a retry (or a hedge's
/// further copy) is admitted if the budget has one to spend for its cause,
/// and every attempt's end is a success or a failure to it — a permanent
/// answer, a cancelled or unsent attempt, nothing. The permit is what the
/// attempt was charged for, so that a quota refunds what it cost.
impl Guard for dyn Budget + '_ {
    type Permit = Option<RetryCause>;

    #[inline]
    fn call_started(&self) {
        self.request_started();
    }

    #[inline]
    fn admit(&self, attempt: Attempt) -> Admission<Option<RetryCause>> {
        match attempt.cause() {
            None => Admission::Go(None),
            Some(cause) if self.try_acquire_retry(cause) => Admission::Go(Some(cause)),
            Some(_) => Admission::Refuse(StopReason::BudgetExhausted),
        }
    }

    #[inline]
    fn settle(&self, _attempt: Attempt, charged: Option<RetryCause>, end: End) {
        // gRPC's throttling rule: successes earn tokens, transient failures
        // cost one; a permanent error says nothing either way.
        let Some(success) = end.served() else { return };
        match charged {
            Some(cause) => self.retry_finished(cause, success),
            None => self.attempt_finished(success),
        }
    }

    /// What it has left, always.
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        report(&AVAILABLE, self.available());
    }
}
