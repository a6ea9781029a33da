//! An attempt's end and what follows it: the verdict recorded, the guards
//! settled, the retry planned or the operation finished.

use super::*;

impl<O: Observer> Driver<'_, O> {
    /// Ends the current attempt with `verdict` and decides what comes next.
    pub(crate) fn end_attempt(&mut self, verdict: Verdict) -> Next {
        // A success ends the operation: the end time then matters only to an
        // observer that measures durations. Anything else may need it for the
        // deadline or the next wait.
        let now = if O::TIMED || verdict != Verdict::Success || self.slot.is_some() {
            self.now()
        } else {
            self.attempt_started.unwrap_or_else(untimed_instant)
        };
        self.record_attempt(now, verdict.error_type(), Health::of(verdict));
        if let Some(error) = verdict.error_type() {
            self.last_error = Some(error);
        }
        match verdict {
            Verdict::Success => {
                self.finish(now, Outcome::Success, None);
                Next::Done
            }
            Verdict::Permanent { .. } => Next::Stop(self.stop(now, StopReason::Permanent)),
            Verdict::Unrepeatable { .. } => Next::Stop(self.stop(now, StopReason::Unrepeatable)),
            Verdict::RetriedElsewhere { .. } => Next::Stop(self.stop(now, StopReason::UpstreamRetry)),
            Verdict::Retryable { error, hint } => match self.plan_retry(now, hint) {
                // Refused, but the policy waits the backoff out first: no
                // attempt follows, so no observer hears of a wait for one.
                Ok((delay, _)) if self.refused => Next::StopAfter(delay),
                Ok((delay, source)) => {
                    let wait = Wait { next_attempt: self.attempts + 1, delay, source, error };
                    if let Some(op) = self.operation.as_mut() {
                        op.waiting(&wait);
                    }
                    Next::Wait(delay)
                }
                Err(reason) => Next::Stop(self.stop(now, reason)),
            },
        }
    }

    /// The operation was abandoned (the future dropped, the blocking call
    /// unwound): report it. An attempt cut short says nothing about the
    /// dependency, so its breaker permit is released without a verdict.
    pub(super) fn cancel(&mut self, now: Instant) {
        if self.operation.is_none() {
            return;
        }
        if self.scope.is_some() {
            self.record_attempt(now, Some(ErrorType::CANCELLED), Health::Unknown);
        }
        self.finish(now, Outcome::Cancelled, None);
    }

    /// Settles the running attempt, if one runs (see [`record`](Self::record)).
    pub(super) fn record_attempt(&mut self, now: Instant, error: Option<ErrorType>, health: Health) {
        let Some(scope) = self.scope.take() else { return };
        let flight = Flight {
            number: self.attempts,
            started: self.attempt_started,
            scope: Some(scope),
            permit: self.permit.take(),
            charged: self.charged.take(),
            guarded: self.guarded.take(),
        };
        // The attempt's slot (a retry's attempt holds it here, a hedge's copy
        // in its `Sent`) goes back with what its end says.
        if self.slot.is_some() {
            self.release_slot(health, flight.started, now);
        }
        self.record(flight, now, error, health, None);
    }

    /// Gives the running attempt's slot back (see [`release`]): cold, so
    /// that settling an attempt without a limit carries nothing of it.
    #[cold]
    #[inline(never)]
    pub(super) fn release_slot(&mut self, health: Health, started: Option<Instant>, now: Instant) {
        if let Some(slot) = self.slot.take() {
            release(slot, health, started, now);
        }
    }

    /// Settles `flight`, which ended at `now` with `error` (none for a
    /// success or a cancelled copy): the one place where the breaker, the
    /// budget and the observer hear how an attempt ended. `hedge`: how a
    /// hedge's copy ended.
    #[inline]
    pub(super) fn record(
        &mut self,
        flight: Flight<Scope<O>>,
        now: Instant,
        error: Option<ErrorType>,
        health: Health,
        hedge: Option<HedgeOutcome>,
    ) {
        let Flight { number, started, scope, permit, charged, guarded } = flight;
        if guarded.is_some() {
            self.settle_guarded(guarded, health.end());
        }
        match (permit, health) {
            (Some(permit), Health::Healthy | Health::Answered) => permit.success(),
            // A rate limit says nothing of the dependency's health: dropped,
            // the permit records nothing (and frees a half-open probe slot).
            (Some(permit), Health::Unhealthy) => permit.failure(),
            // Dropping the permit frees a half-open probe slot and records nothing.
            (permit, _) => drop(permit),
        }
        // gRPC's throttling rule: successes earn tokens, transient failures cost
        // one; a permanent error says nothing either way. An attempt the
        // budget charged for is settled as such, so that a quota can refund
        // what it cost.
        let success = match health {
            Health::Healthy => Some(true),
            Health::Unhealthy | Health::Throttling => Some(false),
            Health::Answered | Health::Unknown => None,
        };
        match (self.setup.dependency.budget, success, charged) {
            (Some(throttle), Some(success), Some(cause)) => throttle.retry_finished(cause, success),
            (Some(throttle), Some(success), None) => throttle.attempt_finished(success),
            _ => {}
        }
        let duration = started.map_or(Duration::ZERO, |s| Self::since(s, now));
        let end = AttemptEnd { number, duration, error, hedge };
        if let (Some(op), Some(scope)) = (self.operation.as_mut(), scope) {
            op.attempt_finished(scope, &end);
        }
    }

    /// A duration for the observer: zero for one that ignores durations
    /// ([`Observer::TIMED`] false), whose instants are not read from the clock.
    pub(super) fn since(earlier: Instant, now: Instant) -> Duration {
        if O::TIMED { now.saturating_duration_since(earlier) } else { Duration::ZERO }
    }

    pub(super) fn plan_retry(
        &mut self,
        now: Instant,
        hint: Option<Hint>,
    ) -> Result<(Duration, DelaySource), StopReason> {
        let elapsed = self.started.map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
        let seed = self.setup.seed;
        let rng = self.rng.get_or_insert_with(|| new_rng(seed));
        let cause = self.last_error.map_or(RetryCause::Transient, RetryCause::of);
        let (wait, source) =
            next_wait(&self.setup.policy, self.attempts, cause, self.curve, elapsed, hint, rng)?;
        // The pace in force when the wait is over, before the budget spends a
        // token on a retry the pacer may refuse.
        if let Some(pacer) = self.setup.dependency.pacer {
            pacer.offered();
        }
        let delay = match self.setup.dependency.pacer {
            Some(pacer) if !pacer.is_idle() => {
                let limit = self.setup.policy.deadline().map(|d| d.saturating_sub(elapsed + wait));
                let hold = pace::after_wait(pacer, wait, limit)?;
                wait + self.held(hold).unwrap_or(Duration::ZERO)
            }
            _ => wait,
        };
        self.paced = self.setup.dependency.pacer.is_some();
        // A breaker that is open past the wait would refuse the retry after
        // it: refused now, before the budget spends a token on it and the
        // caller waits for nothing.
        if self.setup.dependency.breaker.and_then(CircuitBreaker::open_for).is_some_and(|left| left > delay) {
            return Err(StopReason::CircuitOpen);
        }
        if self.setup.dependency.guard.is_some() {
            self.guard_retry()?;
        }
        if let Some(throttle) = self.setup.dependency.budget {
            if !throttle.try_acquire_retry_for(cause) {
                self.withdraw_guarded();
                if self.setup.policy.waits_out_refusal() {
                    // The backoff, not the pace: the refused call sends nothing.
                    self.refused = true;
                    return Ok((wait, source));
                }
                return Err(StopReason::BudgetExhausted);
            }
            self.charged = Some(cause);
        }
        // The curve goes on from the backoff's own wait, not the pace's.
        self.curve = self.curve.after(wait, source);
        Ok((delay, source))
    }

    pub(super) fn stop(&mut self, now: Instant, reason: StopReason) -> StopReason {
        self.finish(now, reason.outcome(), Some(reason));
        reason
    }

    pub(super) fn finish(&mut self, now: Instant, outcome: Outcome, reason: Option<StopReason>) {
        if let Some(op) = self.operation.take() {
            if self.setup.dependency.guard.is_some() {
                self.guard_call_finished();
            }
            let duration = self.started.map_or(Duration::ZERO, |s| Self::since(s, now));
            op.finished(&Finish { outcome, reason, attempts: self.attempts, duration });
        }
    }
}
