//! A retry budget as a [`Guard`]: it counts each call, charges each retry
//! and hedge copy at its plan, and hears how each attempt ended; what it
//! has left published as a gauge.

use super::token_bucket::TokenBucket;
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

/// A6's token bucket is also a guard of its own, for a dependency whose
/// budget slot holds another budget: a gRPC channel whose service config
/// throttles, given a retry budget in code as well
/// ([`Dependency::with_guard`](crate::dependency::Dependency::with_guard)).
/// Both are asked and a retry goes only when both allow it; each hears
/// every attempt's end. The bucket charges nothing when it admits (only
/// failures take tokens), so asking it beside a budget never spends a retry
/// that the other refuses. It publishes no gauge: the budget slot's
/// `retryscope.budget.available` speaks for the dependency.
impl Guard for TokenBucket {
    type Permit = ();

    #[inline]
    fn admit(&self, attempt: Attempt) -> Admission {
        match attempt.cause() {
            Some(cause) if !self.try_acquire_retry(cause) => Admission::Refuse(StopReason::BudgetExhausted),
            _ => Admission::Go(()),
        }
    }

    #[inline]
    fn settle(&self, _attempt: Attempt, (): (), end: End) {
        // A6: a success gives back `tokenRatio`, a retryable failure takes a
        // token; a permanent answer, a cancelled or unsent attempt, nothing.
        if let Some(success) = end.served() {
            self.attempt_finished(success);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_as_a_guard_refuses_retries_at_half_and_never_a_first_attempt() {
        let bucket = TokenBucket::builder().max_tokens(4).token_ratio(1.0).build().expect("valid");
        let retry = Attempt::retry(2);
        assert_eq!(bucket.admit(retry), Admission::Go(()));
        // 4 tokens: two failures leave 2, which is not more than half.
        bucket.settle(retry, (), End::Failed);
        bucket.settle(retry, (), End::Throttled);
        assert_eq!(bucket.admit(retry), Admission::Refuse(StopReason::BudgetExhausted));
        assert_eq!(bucket.admit(Attempt::first()), Admission::Go(()));
        // A permanent answer, a cancelled or unsent attempt say nothing; a
        // success gives a token back.
        for silent in [End::Answered, End::Cancelled, End::NotSent] {
            bucket.settle(retry, (), silent);
        }
        assert_eq!(bucket.admit(retry), Admission::Refuse(StopReason::BudgetExhausted));
        bucket.settle(retry, (), End::Succeeded);
        assert_eq!(bucket.admit(retry), Admission::Go(()));
    }
}
