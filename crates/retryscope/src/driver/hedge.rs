//! A hedged call's decisions: the driver with overlapping attempts.
//!
//! Every copy goes through the admission a retry's attempt goes through —
//! the dependency's guards admit it when it is due and clear it to go, then
//! the deadline ([`Driver::admit`]) — is settled where an attempt is
//! ([`Driver::record`]), and the call finishes once, through the driver.
//! What is the hedge's own is only *when* the next copy is due: after the
//! delay (fixed, or learned from the dependency's latencies), at once after
//! a non-fatal failure, after a server's hint, or never again.
//!
//! The hedge's future polls the copies and keeps their tokens ([`Sent`])
//! beside their futures; it asks this driver for everything else.

use super::attempt::end_of;
use super::{Driver, Flight, Scope, Setup};
use crate::budget::RetryCause;
use crate::clock::Clock;
use crate::guard::Attempt;
use crate::guard::End;
use crate::observe::{HedgeOutcome, Observer};
use crate::outcome::{Outcome, StopReason};
use crate::policy::Policy;
use crate::verdict::{ErrorType, Verdict};
use std::time::{Duration, Instant};

/// What the driver asks of a hedging policy
/// ([`HedgePolicy`](crate::hedge::HedgePolicy)): the limits, and when the
/// next copy goes. A trait, so that the driver needs nothing of the hedge
/// module that builds on it.
pub(crate) trait CopyPolicy {
    /// The most copies a call sends, the first included.
    fn max_copies(&self) -> u32;
    /// The time limit of the whole call.
    fn deadline(&self) -> Option<Duration>;
    /// The time limit of each copy.
    fn attempt_timeout(&self) -> Option<Duration>;
    /// The limits above as the settings the driver runs the copies under.
    fn driven(&self) -> Policy;
    /// The delay before the next copy, as of `now`.
    fn next_delay(&self, now: Instant) -> Duration;
    /// Whether the delay is learned from latencies: whether a copy's must
    /// be measured at all.
    fn learns(&self) -> bool;
    /// A copy took `latency`, or at least that: what a learned delay learns.
    fn record(&self, latency: Duration);
}

/// A copy the driver let go: its token until it is settled or cancelled.
pub(crate) struct Sent<A> {
    flight: Flight<A>,
    /// When its attempt timeout cuts it.
    pub(crate) limit_at: Option<Instant>,
}

impl<A> Sent<A> {
    /// The attempt in flight, for its scope.
    pub(crate) fn flight(&self) -> &Flight<A> {
        &self.flight
    }
}

/// What one finished copy means for the call.
pub(crate) enum Settled {
    /// It is the call's answer: cancel the others and finish.
    Won,
    /// It ends the call, for this reason.
    Fatal(StopReason),
    /// The call goes on with the copies in flight (and maybe another).
    Continue,
}

pub(crate) struct HedgeDriver<'a, O: Observer, P> {
    driver: Driver<'a, O>,
    policy: P,
    /// When the call began; `None` before its first poll.
    began: Option<Instant>,
    deadline_at: Option<Instant>,
    /// When the next copy goes; `None` once no more will.
    next_at: Option<Instant>,
    /// Until when the pacer holds the next copy: no failure brings it sooner.
    held_until: Option<Instant>,
    /// The failure that lets the next copy go at once, for its `retry_of`.
    retry_of: Option<ErrorType>,
    /// Why no further copies are sent, if something other than the copy
    /// limit stopped them: the call's reason if every copy in flight fails.
    held_back: Option<StopReason>,
    /// When the copy that won was sent.
    winner_sent: Option<Instant>,
}

impl<'a, O: Observer, P: CopyPolicy> HedgeDriver<'a, O, P> {
    #[inline]
    /// A hedged call with `setup`, whose policy is `policy`'s
    /// [`driven`](CopyPolicy::driven) one.
    pub(crate) fn new(mut setup: Setup<'a>, policy: P, observer: O, clock: &'a dyn Clock) -> Self {
        setup.hedged = true;
        Self {
            driver: Driver::new(setup, observer, clock),
            policy,
            began: None,
            deadline_at: None,
            next_at: None,
            held_until: None,
            retry_of: None,
            held_back: None,
            winner_sent: None,
        }
    }

    /// The call begins at `now`, unless it already has: the first copy is due.
    pub(crate) fn begin(&mut self, now: Instant) {
        if self.began.is_none() {
            self.began = Some(now);
            self.deadline_at = self.policy.deadline().map(|d| now + d);
            self.next_at = Some(now);
        }
    }

    /// Whether the call's deadline has passed at `now`.
    pub(crate) fn deadline_passed(&self, now: Instant) -> bool {
        self.deadline_at.is_some_and(|at| at <= now)
    }

    /// Whether a further copy may still go, now or later.
    pub(crate) fn can_send(&self) -> bool {
        self.next_at.is_some() && self.driver.attempts() < self.policy.max_copies()
    }

    /// Whether the next copy is due at `now`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.can_send() && self.next_at.is_some_and(|at| at <= now)
    }

    /// Sends the next copy at `now` if the dependency lets it go, as it lets
    /// a retry's attempt go: its guards admit it (once, however long they
    /// hold it), then clear it (a hold moves the copy to the hold's end; a
    /// refusal sends no further copy), then the deadline. A copy after a
    /// failed one is its retry; any other beyond the first, a hedge. `None`:
    /// no copy now.
    pub(crate) fn send(&mut self, now: Instant) -> Option<Sent<Scope<O>>> {
        if self.driver.admitted.is_none() {
            let number = self.driver.attempts() + 1;
            let attempt = match self.retry_of {
                _ if number == 1 => Attempt::first(),
                Some(error) => Attempt::retry(number).because(RetryCause::of(error)),
                None => Attempt::hedge(number),
            };
            match self.driver.admit_due(now, attempt) {
                Ok(None) => {}
                Ok(Some(wait)) => return self.hold(now, wait),
                Err(reason) => return self.stop_sending(reason),
            }
        }
        match self.driver.clear(now) {
            Ok(None) => {}
            Ok(Some(wait)) => return self.hold(now, wait),
            Err(reason) => return self.stop_sending(reason),
        }
        match self.driver.admit(now, self.retry_of.take(), self.policy.attempt_timeout()) {
            Ok((scope, _)) => {
                let number = self.driver.attempts;
                let admitted = self.driver.admitted.take();
                let flight = Flight { number, started: Some(now), scope, admitted };
                let limit_at = self.policy.attempt_timeout().map(|t| now + t);
                self.next_at = Some(now + self.policy.next_delay(now));
                Some(Sent { flight, limit_at })
            }
            Err(reason) => {
                self.driver.withdraw();
                self.stop_sending(reason)
            }
        }
    }

    /// The guards hold the next copy for `wait`: it goes at the hold's end,
    /// and no failure brings it sooner.
    fn hold<T>(&mut self, now: Instant, wait: Duration) -> Option<T> {
        self.held_until = Some(now + wait);
        self.next_at = self.held_until;
        None
    }

    /// No further copies, for `reason`.
    fn stop_sending<T>(&mut self, reason: StopReason) -> Option<T> {
        self.next_at = None;
        self.held_back.get_or_insert(reason);
        None
    }

    /// Settles a copy that ended with `verdict` at `now` (its future already
    /// dropped) and says what it means for the call.
    pub(crate) fn settle(&mut self, sent: Sent<Scope<O>>, verdict: Verdict, now: Instant) -> Settled {
        let started = sent.flight.started;
        let error = verdict.error_type();
        let outcome = if verdict == Verdict::Success { HedgeOutcome::Won } else { HedgeOutcome::Failed };
        self.driver.record(sent.flight, now, error, end_of(verdict), Some(outcome));
        if error.is_some() {
            self.driver.last_error = error;
        }
        match verdict {
            Verdict::Success => {
                // Only a learned delay needs the latency: reading instants
                // costs more than the rest of a copy that answers at once.
                if self.policy.learns()
                    && let Some(started) = started
                {
                    self.policy.record(now.saturating_duration_since(started));
                    self.winner_sent = Some(started);
                }
                Settled::Won
            }
            Verdict::Permanent { .. } => Settled::Fatal(StopReason::Permanent),
            Verdict::Retryable { error, hint } => {
                // A hint past what the policy may wait means "not any time
                // soon", as it does for a retry: no further copy goes, and
                // the call ends once those in flight have (what a retry does
                // with it in `wait::next_wait`).
                if let Some(hint) = hint
                    && self.next_at.is_some()
                {
                    let limit = self.hint_limit(now);
                    if hint.delay > limit {
                        self.stop_sending::<()>(StopReason::HintTooLong { hint, limit });
                    }
                }
                if let Some(next) = self.next_at.as_mut() {
                    let at = match hint {
                        // The server said when: the next copy goes then.
                        Some(hint) => now + hint.delay,
                        None => (*next).min(now),
                    };
                    // A failure does not cut short the pacer's hold.
                    *next = self.held_until.map_or(at, |held| at.max(held));
                    self.retry_of = Some(error);
                }
                Settled::Continue
            }
            Verdict::Unrepeatable { .. } => {
                self.stop_sending::<()>(StopReason::Unrepeatable);
                Settled::Continue
            }
            Verdict::RetriedElsewhere { .. } => {
                self.stop_sending::<()>(StopReason::UpstreamRetry);
                Settled::Continue
            }
        }
    }

    /// The longest a server's hint may hold the next copy at `now`: the
    /// policy's `max_server_delay`, or what is left of the deadline.
    fn hint_limit(&self, now: Instant) -> Duration {
        let most = self.policy.driven().max_server_delay();
        self.deadline_at.map_or(most, |at| most.min(at.saturating_duration_since(now)))
    }

    /// A copy still in flight is cancelled at `now` (its future dropped): it
    /// says nothing of the dependency's health: its guards hear it was
    /// cancelled (a breaker's permit released without a verdict, the budget
    /// counting nothing).
    ///
    /// A copy sent before the one that won ran longer than the winner and
    /// had not answered: its latency is at least the time it was in flight,
    /// and a percentile delay counts that lower bound. Counting only winners
    /// would learn from the fast answers alone, and set the delay too short
    /// for a dependency whose slow calls are the reason to hedge. A copy sent
    /// after the winner says nothing of the kind, and counts nothing.
    pub(crate) fn cancel(&mut self, sent: Sent<Scope<O>>, now: Instant) {
        if let (Some(started), Some(winner)) = (sent.flight.started, self.winner_sent)
            && started < winner
        {
            self.policy.record(now.saturating_duration_since(started));
        }
        self.driver.record(sent.flight, now, None, End::Cancelled, Some(HedgeOutcome::Cancelled));
    }

    /// The call is over at `now` with `outcome`; its copies are settled or
    /// cancelled already.
    pub(crate) fn finish(&mut self, now: Instant, outcome: Outcome, reason: Option<StopReason>) {
        self.driver.finish(now, outcome, reason);
    }

    /// Why the call ends when no copy is in flight and none may go.
    pub(crate) fn reason_when_idle(&self) -> StopReason {
        self.held_back.unwrap_or(StopReason::AttemptsExhausted)
    }

    /// Whether the call has begun and not finished: copies to cancel if it
    /// is dropped.
    pub(crate) fn in_progress(&self) -> bool {
        self.driver.operation.is_some()
    }

    /// The earliest instant the driver has something due: the next copy or
    /// the deadline.
    pub(crate) fn next_event(&self) -> Option<Instant> {
        let next_copy = self.next_at.filter(|_| self.can_send());
        next_copy.into_iter().chain(self.deadline_at).min()
    }

    /// The most copies the call sends.
    pub(crate) fn max_copies(&self) -> u32 {
        self.policy.max_copies()
    }

    /// Copies sent so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.driver.attempts()
    }

    /// The `error.type` of the last failed copy, if any failed.
    pub(crate) fn last_error(&self) -> Option<ErrorType> {
        self.driver.last_error()
    }

    /// The dependency's pacer, if it has one.
    pub(crate) fn pacer(&self) -> Option<&'a crate::pace::Pacer> {
        self.driver.pacer()
    }

    /// The current time, from the call's clock.
    pub(crate) fn now(&self) -> Instant {
        self.driver.clock.now()
    }
}
