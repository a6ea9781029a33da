//! Whether the next attempt may go now: the dependency's guards asked, as
//! one [`Guard`], before each attempt is sent.

use super::*;

impl<O: Observer> Driver<'_, O> {
    /// Asks the dependency's guards whether the next attempt may be sent at
    /// `now`: `Some` wait when one holds it back (then ask again after it), or
    /// why it is not sent at all (the operation then stops).
    #[inline(never)]
    pub(crate) fn pace(&mut self, now: Instant) -> Result<Option<Duration>, StopReason> {
        if std::mem::take(&mut self.refused) {
            return Err(self.stop(now, StopReason::BudgetExhausted));
        }
        match self.clear(now) {
            Ok(hold) => {
                self.cleared = hold.is_none();
                Ok(hold)
            }
            Err(reason) => Err(self.stop(now, reason)),
        }
    }

    /// [`pace`](Self::pace) without stopping the operation on a refusal (for
    /// a hedge's copy, whose siblings may still be in flight): the next
    /// attempt is admitted if no plan admitted it (a first attempt), then
    /// cleared to go ([`Guard::send`]). A refusal settles the admission as
    /// not sent.
    #[inline]
    pub(super) fn clear(&mut self, now: Instant) -> Result<Option<Duration>, StopReason> {
        if self.admitted.is_none() {
            let attempt = if self.attempts == 0 {
                self.setup.first_attempt()
            } else {
                Attempt::retry(self.attempts + 1)
            };
            if let Some(hold) = self.admit_due(now, attempt)? {
                return Ok(Some(hold));
            }
            // Admitted at `now`: what is left of its deadline is already the
            // attempt's, and reading it again costs an `Instant` subtraction.
        } else {
            let remaining = self.remaining_for_guards(now);
            if let Some((attempt, _)) = self.admitted.as_mut() {
                *attempt = attempt.within(remaining);
            }
        }
        let Some((attempt, permits)) = self.admitted.as_mut() else { return Ok(None) };
        match self.setup.dependency.send(*attempt, permits) {
            Ok(None) => Ok(None),
            Ok(Some((wait, source))) => Ok(Some(self.hold(now, wait, source))),
            Err(reason) => {
                self.withdraw();
                self.open(now);
                Err(reason)
            }
        }
    }

    /// The guards admit `attempt`, due at `now` (the call begins with its
    /// first): `Some` hold before its send, or why it may not go.
    #[inline]
    pub(super) fn admit_due(
        &mut self,
        now: Instant,
        attempt: Attempt,
    ) -> Result<Option<Duration>, StopReason> {
        self.count_request(now);
        let attempt = self.for_guard(attempt).within(self.remaining_for_guards(now));
        // Admitted in place: the permits are filled where the driver keeps them.
        let (attempt, permits) = self.admitted.insert((attempt, Permits::default()));
        match self.setup.dependency.admit(*attempt, permits) {
            Ok(None) => Ok(None),
            Ok(Some((wait, source))) => Ok(Some(self.hold(now, wait, source))),
            Err(reason) => {
                // The guards that admitted it heard it will not go.
                self.admitted = None;
                self.open(now);
                Err(reason)
            }
        }
    }

    /// What is left of the deadline at `now`, for the guards that read it
    /// (`None` for the others: reading instants costs more than the rest of
    /// a budget's admission).
    fn remaining_for_guards(&self, now: Instant) -> Option<Duration> {
        if self.setup.dependency.reads_remaining() { self.remaining(now) } else { None }
    }

    /// A guard holds the next attempt for `wait`: the operation has begun,
    /// and its observer hears of a hold that has a `source` (a pace's).
    pub(super) fn hold(&mut self, now: Instant, wait: Duration, source: Option<HoldSource>) -> Duration {
        self.open(now);
        self.report_hold(wait, source);
        wait
    }

    /// The observer hears that the next attempt waits `wait` longer, if it
    /// has a `source`.
    pub(super) fn report_hold(&mut self, wait: Duration, source: Option<HoldSource>) {
        if let (Some(source), Some(op)) = (source, self.operation.as_mut()) {
            op.held(&Held { attempt: self.attempts + 1, wait, source });
        }
    }

    /// The attempt the guards admitted will not be sent: they hear so.
    pub(super) fn withdraw(&mut self) {
        self.cleared = false;
        if let Some((attempt, permits)) = self.admitted.take() {
            self.setup.dependency.settle(attempt, permits, End::NotSent);
        }
    }

    /// `attempt` as the guards see it: at the call's priority, with a draw
    /// for a guard that admits by chance — from the call's seed when it has
    /// one (the same every run, and apart from the jitter's numbers), else
    /// from the call's generator.
    pub(super) fn for_guard(&mut self, attempt: Attempt) -> Attempt {
        // Only a further guard may admit by chance: the others need no draw.
        if self.setup.dependency.guard.is_none() {
            return attempt.with(self.setup.priority, u32::MAX / 2);
        }
        let draw = match self.setup.seed {
            Some(seed) => crate::random::mix(seed, u64::from(attempt.number())),
            None => self.rng.get_or_insert_with(JitterRng::from_entropy).next_u64(),
        };
        attempt.with(self.setup.priority, (draw >> 32) as u32)
    }
}
