//! Whether the next attempt may go now: the pacer's schedule, the adaptive
//! limiter's token, the concurrency limit's slot — asked before each attempt.

use super::*;

impl<O: Observer> Driver<'_, O> {
    /// Asks the pacer, if any, whether the next attempt may be sent now:
    /// `Some` wait when it is held back (then ask again after it), or why it
    /// is not sent at all (the operation then stops). The schedule is asked
    /// once per attempt (a retry's plan already asked it); the adaptive
    /// limiter's token last, at the moment of sending, and again after any
    /// hold. The concurrency limit's slot is taken after the pacer lets the
    /// attempt go: a full limit holds it for [`SLOT_POLL`] at a time, up to
    /// the limiter's `max_wait`, then refuses it.
    #[inline(never)]
    pub(crate) fn pace(&mut self, now: Instant) -> Result<Option<Duration>, StopReason> {
        if std::mem::take(&mut self.refused) {
            return Err(self.stop(now, StopReason::BudgetExhausted));
        }
        match self.ask_pacer(now) {
            Ok(hold) => Ok(hold),
            Err(reason) => Err(self.stop(now, reason)),
        }
    }

    /// [`pace`](Self::pace) without stopping the operation on a refusal: for
    /// a hedge's copy, whose siblings may still be in flight.
    pub(super) fn ask_pacer(&mut self, now: Instant) -> Result<Option<Duration>, StopReason> {
        match self.ask_schedule(now)? {
            None => self.ask_limiter(now),
            hold => Ok(hold),
        }
    }

    /// Takes the concurrency limit's slot for the next attempt, if the
    /// dependency has a limit: `Some` wait when it is full (ask again after
    /// it), or [`StopReason::ConcurrencyLimited`] once the attempt has waited
    /// as long as it may.
    pub(super) fn ask_limiter(&mut self, now: Instant) -> Result<Option<Duration>, StopReason> {
        let Some(limiter) = self.setup.dependency.limiter else { return Ok(None) };
        if self.slot.is_some() {
            return Ok(None);
        }
        if let Some(slot) = limiter.try_acquire(self.setup.priority) {
            self.slot = Some(slot);
            self.slot_waited = 0;
            return Ok(None);
        }
        let (max_wait, limit) = (limiter.max_wait(), limiter.limit());
        self.open(now);
        let waited = Duration::from_micros(u64::from(self.slot_waited));
        let mut left = max_wait.saturating_sub(waited);
        if let Some(remaining) = self.remaining(now) {
            left = left.min(remaining);
        }
        if left.is_zero() {
            self.slot_waited = 0;
            return Err(StopReason::ConcurrencyLimited { limit, waited });
        }
        // The schedule let this attempt go already: after the wait, only the
        // adaptive rate's token is asked again.
        self.paced = self.setup.dependency.pacer.is_some();
        let hold = left.min(SLOT_POLL);
        // At most `MAX_TIMEOUT` (60 s) in all: fits in a u32 of microseconds.
        self.slot_waited =
            self.slot_waited.saturating_add(u32::try_from(hold.as_micros()).unwrap_or(u32::MAX));
        Ok(Some(hold))
    }

    /// The pacer's part of [`ask_pacer`](Self::ask_pacer).
    pub(super) fn ask_schedule(&mut self, now: Instant) -> Result<Option<Duration>, StopReason> {
        let Some(pacer) = self.setup.dependency.pacer else { return Ok(None) };
        let scheduled = std::mem::take(&mut self.paced);
        // A send that no retry's plan nor hold counted yet.
        if !scheduled {
            pacer.offered();
        }
        if pacer.is_idle() {
            return Ok(None);
        }
        let remaining = self.remaining(now);
        let hold = pace::before_send(pacer, scheduled, remaining);
        if !matches!(hold, Ok(None)) {
            self.open(now);
        }
        Ok(self.held(hold?))
    }

    /// Reports the pacer's hold of the next attempt, if it holds it: the extra
    /// wait.
    pub(super) fn held(&mut self, hold: Hold) -> Option<Duration> {
        let (wait, source) = hold?;
        self.paced = true;
        if let Some(op) = self.operation.as_mut() {
            op.held(&Held { attempt: self.attempts + 1, wait, source });
        }
        Some(wait)
    }
}
