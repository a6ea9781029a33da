//! The call's [`Guard`](crate::guard::Guard), as the driver feeds it: every
//! call out of line and cold, so that an unguarded call keeps one branch per
//! hook and carries none of this (see [`guard`](crate::guard) for the
//! promises these keep).

use super::{Driver, Flight, Scope};
use crate::guard::{Admission, Attempt, End};
use crate::observe::Observer;
use crate::outcome::StopReason;
use crate::random::JitterRng;
use crate::verdict::ErrorType;
use std::time::{Duration, Instant};

impl<O: Observer> Driver<'_, O> {
    /// [`admit`](Self::admit) with the call's [`Guard`](crate::guard::Guard):
    /// the first attempt is asked here, a retry was at its plan and a
    /// hedge's copy as it was due; an admission the rest refuses is settled
    /// as not sent. Out of line, so that an unguarded call carries none of it.
    #[cold]
    #[inline(never)]
    pub(super) fn admit_guarded(
        &mut self,
        now: Instant,
        retry_of: Option<ErrorType>,
        attempt_timeout: Option<Duration>,
    ) -> Result<(Flight<Scope<O>>, Option<Duration>), StopReason> {
        let mut guarded = self.guarded.take();
        if self.started.is_none() {
            // The call starts before its first admission (the guard counts
            // it), and the observer hears of it even if the guard refuses.
            self.observe_operation();
            self.count_request(now);
        }
        if self.attempts == 0 && self.setup.dependency.guard.is_some() {
            let first = self.for_guard(Attempt::first());
            let admission = self.setup.dependency.guard.map_or(Admission::Go, |guard| guard.admit(first));
            match admission {
                Admission::Go => guarded = Some(first),
                Admission::Refuse(reason) => return Err(reason),
            }
        }
        match self.admit_unguarded(now, retry_of, attempt_timeout) {
            Ok((mut flight, limit)) => {
                flight.guarded = guarded;
                Ok((flight, limit))
            }
            Err(reason) => {
                self.guarded = guarded;
                self.withdraw_guarded();
                Err(reason)
            }
        }
    }

    /// The retry the guard admitted will not be sent: it hears so.
    pub(super) fn withdraw_guarded(&mut self) {
        let guarded = self.guarded.take();
        if guarded.is_some() {
            self.settle_guarded(guarded, End::NotSent);
        }
    }

    /// The guard hears that `guarded`, an attempt it admitted, ended so.
    #[cold]
    #[inline(never)]
    pub(super) fn settle_guarded(&self, guarded: Option<Attempt>, end: End) {
        if let (Some(guard), Some(attempt)) = (self.setup.dependency.guard, guarded) {
            guard.settle(attempt, end);
        }
    }

    /// The guard hears the call start.
    #[cold]
    #[inline(never)]
    pub(super) fn guard_call_started(&self) {
        if let Some(guard) = self.setup.dependency.guard {
            guard.call_started();
        }
    }

    /// The guard admits the retry being planned, at its plan: refused, the
    /// caller waits for nothing; admitted, it is the guard's until it ends.
    #[cold]
    #[inline(never)]
    pub(super) fn guard_retry(&mut self) -> Result<(), StopReason> {
        if self.setup.dependency.guard.is_none() {
            return Ok(());
        }
        let attempt = self.for_guard(Attempt::retry(self.attempts + 1));
        let admission = self.setup.dependency.guard.map_or(Admission::Go, |guard| guard.admit(attempt));
        if let Admission::Refuse(reason) = admission {
            return Err(reason);
        }
        self.guarded = Some(attempt);
        Ok(())
    }

    /// The call is over for the guard: a retry planned and never sent
    /// (stopped in its wait, dropped) is settled, then the call ends.
    #[cold]
    #[inline(never)]
    pub(super) fn guard_call_finished(&mut self) {
        self.withdraw_guarded();
        if let (Some(guard), Some(_)) = (self.setup.dependency.guard, self.started) {
            guard.call_finished();
        }
    }

    /// `attempt` as the guard sees it: at the call's priority, with a draw
    /// for a guard that admits by chance — from the call's seed when it has
    /// one (the same every run, and apart from the jitter's numbers), else
    /// from the call's generator.
    pub(super) fn for_guard(&mut self, attempt: Attempt) -> Attempt {
        let draw = match self.setup.seed {
            Some(seed) => crate::random::mix(seed, u64::from(attempt.number())),
            None => self.rng.get_or_insert_with(JitterRng::from_entropy).next_u64(),
        };
        attempt.with(self.setup.priority, (draw >> 32) as u32)
    }
}
