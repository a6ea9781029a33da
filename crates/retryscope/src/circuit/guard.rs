//! A circuit breaker as a [`Guard`]: a permit for every attempt as it is
//! sent, a retry refused at its plan when the breaker stays open past its
//! wait, and each attempt's end recorded.

use super::{BreakerPermit, CircuitBreaker};
use crate::guard::{Admission, Attempt, End, Guard};
use crate::outcome::StopReason;

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
}
