//! An attempt's end and what follows it: the verdict recorded, the guards
//! settled, the retry planned or the operation finished.

use super::*;

impl<O: Observer> Driver<'_, O> {
    /// Ends the current attempt with `verdict` and decides what comes next.
    pub(crate) fn end_attempt(&mut self, verdict: Verdict) -> Next {
        // A success ends the operation: the end time then matters only to an
        // observer that measures durations. Anything else may need it for the
        // deadline or the next wait.
        let now = if self.observed() || verdict != Verdict::Success || self.setup.dependency.limiter.is_some()
        {
            self.now()
        } else {
            self.attempt_started.unwrap_or_else(untimed_instant)
        };
        self.record_attempt(now, verdict.error_type(), end_of(verdict));
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
    /// dependency: its guards hear it was cancelled.
    pub(super) fn cancel(&mut self, now: Instant) {
        if self.operation.is_none() {
            return;
        }
        if self.scope.is_some() {
            self.record_attempt(now, Some(ErrorType::CANCELLED), End::Cancelled);
        }
        self.finish(now, Outcome::Cancelled, None);
    }

    /// Settles the running attempt, if one runs (see [`record`](Self::record)).
    pub(super) fn record_attempt(&mut self, now: Instant, error: Option<ErrorType>, end: End) {
        let Some(scope) = self.scope.take() else { return };
        let flight = Flight {
            number: self.attempts,
            started: self.attempt_started,
            scope: Some(scope),
            admitted: self.admitted.take(),
        };
        self.record(flight, now, error, end, None);
    }

    /// Settles `flight`, which ended at `now` with `error` (none for a
    /// success or a cancelled copy): the one place where the dependency's
    /// guards and the observer hear how an attempt ended. `hedge`: how a
    /// hedge's copy ended.
    #[inline]
    pub(super) fn record(
        &mut self,
        flight: Flight<Scope<O>>,
        now: Instant,
        error: Option<ErrorType>,
        end: End,
        hedge: Option<HedgeOutcome>,
    ) {
        let Flight { number, started, scope, admitted } = flight;
        // How long the attempt took, worked out once for the guards and the
        // observer: an `Instant` subtraction costs some 55 instructions.
        // (A success that nobody times ends at its start: nothing to work out.)
        let took = match started {
            Some(started) if self.timed && started != now => now.saturating_duration_since(started),
            _ => Duration::ZERO,
        };
        if let Some((attempt, permits)) = admitted {
            // A round trip a concurrency limit learns from: read whenever the
            // call reads the clock (a limit makes it).
            let latency = if self.timed { took } else { Duration::ZERO };
            self.setup.dependency.settle(attempt.took(latency), permits, end);
        }
        // Zero for an observer that ignores durations (`Observer::is_timed`).
        let duration = if self.observed() { took } else { Duration::ZERO };
        let end = AttemptEnd { number, duration, error, hedge };
        if let (Some(op), Some(scope)) = (self.operation.as_mut(), scope) {
            op.attempt_finished(scope, &end);
        }
    }

    /// A duration for the observer: zero for one that ignores durations
    /// ([`Observer::is_timed`] false), whose instants may not be read from
    /// the clock.
    pub(super) fn since(&self, earlier: Instant, now: Instant) -> Duration {
        if self.observed() { now.saturating_duration_since(earlier) } else { Duration::ZERO }
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
        // The guards admit the retry at its plan, before its wait: a pace
        // lengthens the wait, a refusal costs the caller none.
        let limit = self.setup.policy.deadline().map(|d| d.saturating_sub(elapsed + wait));
        let attempt = Attempt::retry(self.attempts + 1).because(cause).after(wait).within(limit);
        let attempt = self.for_guard(attempt);
        let mut permits = Permits::default();
        let delay = match self.setup.dependency.admit(attempt, &mut permits) {
            Ok(hold) => {
                self.admitted = Some((attempt, permits));
                match hold {
                    None => wait,
                    Some((held, hold_source)) => {
                        self.report_hold(held, hold_source);
                        wait + held
                    }
                }
            }
            Err(StopReason::BudgetExhausted) if self.setup.policy.waits_out_refusal() => {
                // The backoff, not the pace: the refused call sends nothing.
                self.refused = true;
                return Ok((wait, source));
            }
            Err(reason) => return Err(reason),
        };
        // The curve goes on from the backoff's own wait, not the pace's.
        self.curve = self.curve.after(wait, source);
        Ok((delay, source))
    }

    pub(super) fn stop(&mut self, now: Instant, reason: StopReason) -> StopReason {
        self.finish(now, reason.outcome(), Some(reason));
        reason
    }

    pub(super) fn finish(&mut self, now: Instant, outcome: Outcome, reason: Option<StopReason>) {
        if self.operation.is_none() {
            return;
        }
        // A retry planned and never sent (stopped in its wait, dropped)
        // is settled, then the call ends for the guards.
        self.withdraw();
        if self.started.is_some() {
            self.setup.dependency.call_finished();
        }
        let duration = self.started.map_or(Duration::ZERO, |s| self.since(s, now));
        let finish = Finish { outcome, reason, attempts: self.attempts, duration };
        // Taken only now, handed straight on: taken first, the operation
        // (hundreds of bytes with telemetry's) was kept on the stack across
        // the guards' settlement and copied once more.
        if let Some(op) = self.operation.take() {
            op.finished(&finish);
        }
    }
}
