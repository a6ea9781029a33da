//! A circuit breaker as a [`Guard`]: a permit for every attempt as it is
//! sent, a retry refused at its plan when the breaker stays open past its
//! wait, and each attempt's end recorded; its state published as a gauge.

use super::{BreakerPermit, CircuitBreaker};
use crate::guard::{Admission, Attempt, End, Gauge, GaugeKind, Guard, Worst};
use crate::outcome::StopReason;

/// `retryscope.breaker.state` (`{state}`): 0 closed, 1 half-open, 2 open
/// ([`BreakerState::as_gauge`](super::BreakerState::as_gauge)); the highest,
/// the most open, is the worst.
pub(crate) const STATE: Gauge = Gauge {
    name: "retryscope.breaker.state",
    description: "Circuit breaker state: 0 closed, 1 half-open, 2 open.",
    unit: "{state}",
    worst: Worst::Highest,
    kind: GaugeKind::I64,
};

impl Guard for CircuitBreaker {
    /// The attempt's permit, taken as it is sent.
    type Permit = Option<BreakerPermit>;

    #[inline]
    fn admit(&self, attempt: Attempt) -> Admission<Option<BreakerPermit>> {
        // A breaker that is open past the retry's wait would refuse it after
        // it: refused now, before a budget spends a token on it and the
        // caller waits for nothing.
        match attempt.wait() {
            Some(wait) if self.open_for().is_some_and(|left| left > wait) => {
                Admission::Refuse(StopReason::CircuitOpen)
            }
            _ => Admission::Go(None),
        }
    }

    #[inline]
    fn send(&self, _attempt: Attempt, permit: &mut Option<BreakerPermit>) -> Admission {
        if permit.is_none() {
            match self.try_acquire() {
                Ok(taken) => *permit = Some(taken),
                Err(_) => return Admission::Refuse(StopReason::CircuitOpen),
            }
        }
        Admission::Go(())
    }

    #[inline]
    fn settle(&self, _attempt: Attempt, permit: Option<BreakerPermit>, end: End) {
        let Some(permit) = permit else { return };
        match end {
            End::Succeeded | End::Answered => permit.success(),
            End::Failed => permit.failure(),
            // A request to slow down says nothing of the dependency's
            // health, nor does an attempt cut short: dropped, the permit
            // records nothing (and frees a half-open probe slot).
            End::Throttled | End::Cancelled | End::NotSent => drop(permit),
        }
    }

    /// Its state, always.
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        // 0, 1 or 2: exact as an f64.
        report(&STATE, self.state().as_gauge() as f64);
    }
}
