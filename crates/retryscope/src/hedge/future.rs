//! The hedged call's future: copies polled together, one timer for whatever
//! comes next (the next copy, a copy's time limit, the deadline).

use super::builder::HedgeSetup;
use crate::breaker::BreakerPermit;
use crate::classify::Classify;
use crate::clock::Clock;
use crate::error::RetryError;
use crate::observe::{
    AttemptEnd, AttemptScope, AttemptStart, Finish, HedgeOutcome, Observer, OperationInfo, OperationObserver,
};
use crate::outcome::{Outcome, StopReason};
use crate::retry::verdict_of;
use crate::sleep::Sleeper;
use crate::verdict::{ErrorType, Verdict};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

#[cfg(doc)]
use super::builder::Hedge;

type Scope<O> = <<O as Observer>::Operation as OperationObserver>::Attempt;

/// One copy in flight.
struct InFlight<Fut, A> {
    /// Boxed so that it stays pinned while the list of copies changes.
    fut: Pin<Box<Fut>>,
    number: u32,
    started: Instant,
    /// When its attempt timeout cuts it.
    limit_at: Option<Instant>,
    scope: Option<A>,
    permit: Option<BreakerPermit>,
}

/// The call's bookkeeping, apart from the operation and its classifier: the
/// copies in flight and what the observer, budget and breaker were told.
/// Dropping it before the call ended cancels the copies and reports it.
pub(crate) struct Calls<'a, Fut, O: Observer> {
    setup: HedgeSetup<'a>,
    clock: &'static dyn Clock,
    observer: O,
    operation: Option<O::Operation>,
    copies: Vec<InFlight<Fut, Scope<O>>>,
    started: Option<Instant>,
    deadline_at: Option<Instant>,
    /// Copies sent so far.
    sent: u32,
    /// When the next copy goes; `None` once no more will.
    next_at: Option<Instant>,
    /// The failure that lets the next copy go at once, for its `retry_of`.
    retry_of: Option<ErrorType>,
    /// Why no further copies are sent, if something other than the copy
    /// limit stopped them: the call's reason if every copy in flight fails.
    held_back: Option<StopReason>,
    last_error: Option<ErrorType>,
}

/// What one finished copy means for the call.
enum Settled {
    Won,
    Fatal(StopReason),
    Continue,
}

impl<'a, Fut, O: Observer> Calls<'a, Fut, O> {
    pub(crate) fn new(setup: HedgeSetup<'a>, observer: O, clock: &'static dyn Clock) -> Self {
        Self {
            setup,
            clock,
            observer,
            operation: None,
            copies: Vec::new(),
            started: None,
            deadline_at: None,
            sent: 0,
            next_at: None,
            retry_of: None,
            held_back: None,
            last_error: None,
        }
    }

    fn begin(&mut self, now: Instant) {
        self.started = Some(now);
        self.deadline_at = self.setup.policy.deadline().map(|d| now + d);
        self.next_at = Some(now);
        self.operation = Some(self.observer.start(&OperationInfo {
            dependency: &self.setup.dependency,
            operation: self.setup.operation.as_deref(),
            max_attempts: self.setup.policy.max_copies(),
            hedged: true,
        }));
        if let Some(throttle) = self.setup.throttle.as_deref() {
            throttle.request_started();
        }
    }

    /// Asks the breaker and the budget for the next copy: its permit, or why
    /// no copy may go.
    fn admit(&mut self) -> Result<Option<BreakerPermit>, StopReason> {
        let permit = match self.setup.breaker.as_deref() {
            Some(breaker) => Some(breaker.try_acquire().map_err(|_| StopReason::CircuitOpen)?),
            None => None,
        };
        if self.sent > 0
            && let Some(throttle) = self.setup.throttle.as_deref()
            && !throttle.try_acquire_retry()
        {
            // Dropped unsettled, the permit records nothing.
            return Err(StopReason::BudgetExhausted);
        }
        Ok(permit)
    }

    /// Books a copy that just ended with `verdict` at `now`.
    fn settle(&mut self, copy: InFlight<Fut, Scope<O>>, verdict: Verdict, now: Instant) -> Settled {
        let InFlight { fut, number, started, scope, permit, .. } = copy;
        // Done with, or cut at its time limit: either way it goes now.
        drop(fut);
        let healthy = match verdict {
            Verdict::Success => Some(true),
            Verdict::Permanent { .. } => None,
            _ => Some(false),
        };
        match (permit, verdict) {
            (Some(permit), Verdict::Success | Verdict::Permanent { .. }) => permit.success(),
            (Some(permit), Verdict::Retryable { error, .. }) if error.is_throttling() => drop(permit),
            (Some(permit), _) => permit.failure(),
            (None, _) => {}
        }
        if let (Some(throttle), Some(healthy)) = (self.setup.throttle.as_deref(), healthy) {
            throttle.attempt_finished(healthy);
        }
        let duration = now.saturating_duration_since(started);
        let outcome = if verdict == Verdict::Success { HedgeOutcome::Won } else { HedgeOutcome::Failed };
        let error = verdict.error_type();
        if let (Some(op), Some(scope)) = (self.operation.as_mut(), scope) {
            op.attempt_finished(scope, &AttemptEnd { number, duration, error, hedge: Some(outcome) });
        }
        if error.is_some() {
            self.last_error = error;
        }
        match verdict {
            Verdict::Success => {
                self.setup.policy.record(duration);
                Settled::Won
            }
            Verdict::Permanent { .. } => Settled::Fatal(StopReason::Permanent),
            Verdict::Retryable { error, hint } => {
                if let Some(next) = self.next_at.as_mut() {
                    *next = match hint {
                        // The server said when: the next copy goes then.
                        Some(hint) => now + hint.delay,
                        None => (*next).min(now),
                    };
                    self.retry_of = Some(error);
                }
                Settled::Continue
            }
            Verdict::Unrepeatable { .. } => self.stop_sending(StopReason::Unrepeatable),
            Verdict::RetriedElsewhere { .. } => self.stop_sending(StopReason::UpstreamRetry),
        }
    }

    fn stop_sending(&mut self, reason: StopReason) -> Settled {
        self.next_at = None;
        self.held_back.get_or_insert(reason);
        Settled::Continue
    }

    /// Drops every copy still in flight: they end as cancelled.
    fn cancel_all(&mut self, now: Instant) {
        for InFlight { fut, number, started, scope, permit, .. } in self.copies.drain(..) {
            drop(fut);
            // Released unsettled: a cancelled copy says nothing of the dependency.
            drop(permit);
            if let (Some(op), Some(scope)) = (self.operation.as_mut(), scope) {
                let duration = now.saturating_duration_since(started);
                let end = AttemptEnd { number, duration, error: None, hedge: Some(HedgeOutcome::Cancelled) };
                op.attempt_finished(scope, &end);
            }
        }
    }

    /// The call is over at `now`: the copies left are cancelled, the observer
    /// hears how it ended.
    fn finish(&mut self, now: Instant, outcome: Outcome, reason: Option<StopReason>) {
        self.cancel_all(now);
        if let Some(op) = self.operation.take() {
            let duration = self.started.map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
            op.finished(&Finish { outcome, reason, attempts: self.sent, duration });
        }
    }

    /// The earliest instant something is due: the next copy, a copy's time
    /// limit or the deadline.
    fn next_event(&self) -> Option<Instant> {
        let next_copy = self.next_at.filter(|_| self.sent < self.setup.policy.max_copies());
        let limits = self.copies.iter().filter_map(|c| c.limit_at);
        next_copy.into_iter().chain(limits).chain(self.deadline_at).min()
    }
}

impl<Fut, O: Observer> Drop for Calls<'_, Fut, O> {
    fn drop(&mut self) {
        // Dropped before it ended: the caller lost interest.
        if self.operation.is_some() {
            self.finish(self.clock.now(), Outcome::Cancelled, None);
        }
    }
}

pin_project! {
    /// The future of an awaited [`Hedge`].
    ///
    /// Dropping it mid-flight cancels every copy in flight; the observer
    /// hears [`Outcome::Cancelled`].
    #[must_use = "futures do nothing unless polled"]
    pub struct HedgeFuture<'a, Op, Fut, C, O, S>
    where
        Fut: Future,
        O: Observer,
        S: Sleeper,
    {
        op: Op,
        classifier: C,
        sleeper: S,
        calls: Calls<'a, Fut, O>,
        // The last non-fatal failure's result, handed back if no copy wins.
        last: Option<Fut::Output>,
        // The one timer, and the instant it is set for.
        #[pin]
        timer: Option<S::Sleep>,
        timer_at: Option<Instant>,
        done: bool,
    }
}

impl<'a, Op, Fut, C, O, S> HedgeFuture<'a, Op, Fut, C, O, S>
where
    Fut: Future,
    O: Observer,
    S: Sleeper,
{
    pub(crate) fn new(op: Op, classifier: C, sleeper: S, calls: Calls<'a, Fut, O>) -> Self {
        Self { op, classifier, sleeper, calls, last: None, timer: None, timer_at: None, done: false }
    }
}

impl<Op, Fut, T, E, C, O, S> Future for HedgeFuture<'_, Op, Fut, C, O, S>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    O: Observer,
    S: Sleeper,
{
    type Output = Result<T, RetryError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        assert!(!*this.done, "HedgeFuture polled after completion");
        let calls = this.calls;
        let clock = calls.clock;
        if calls.started.is_none() {
            calls.begin(clock.now());
        }
        loop {
            let now = clock.now();
            // Every copy in flight, in the order sent.
            let mut index = 0;
            while index < calls.copies.len() {
                let copy = &mut calls.copies[index];
                let fut = copy.fut.as_mut();
                let polled = match &copy.scope {
                    Some(scope) => scope.in_scope(|| fut.poll(cx)),
                    None => fut.poll(cx),
                };
                let (verdict, result) = match polled {
                    Poll::Ready(result) => (verdict_of(this.classifier, &result), Some(result)),
                    Poll::Pending if copy.limit_at.is_some_and(|at| at <= now) => {
                        match this.classifier.timeout() {
                            // No result to hand back: a timeout is never the answer.
                            Verdict::Success => (Verdict::retryable(ErrorType::TIMEOUT), None),
                            verdict => (verdict, None),
                        }
                    }
                    Poll::Pending => {
                        index += 1;
                        continue;
                    }
                };
                let copy = calls.copies.remove(index);
                match (calls.settle(copy, verdict, now), result) {
                    (Settled::Won, Some(Ok(value))) => {
                        calls.finish(now, Outcome::Success, None);
                        *this.done = true;
                        return Poll::Ready(Ok(value));
                    }
                    (Settled::Won, result) => {
                        // `verdict_of` never calls an `Err` a success.
                        calls.finish(now, Outcome::Success, None);
                        *this.done = true;
                        return Poll::Ready(give_up(calls, StopReason::Permanent, result));
                    }
                    (Settled::Fatal(reason), result) => {
                        calls.finish(now, reason.outcome(), Some(reason));
                        *this.done = true;
                        return Poll::Ready(give_up(calls, reason, result));
                    }
                    (Settled::Continue, Some(result)) => {
                        *this.last = Some(this.classifier.before_wait(result))
                    }
                    (Settled::Continue, None) => {}
                }
            }
            if calls.deadline_at.is_some_and(|at| at <= now) {
                return Poll::Ready(end(
                    calls,
                    this.done,
                    now,
                    StopReason::DeadlineExceeded,
                    this.last.take(),
                ));
            }
            // The next copy, if it is due.
            if calls.sent < calls.setup.policy.max_copies()
                && let Some(at) = calls.next_at
                && at <= now
            {
                match calls.admit() {
                    Ok(permit) => {
                        calls.sent += 1;
                        let number = calls.sent;
                        let start = AttemptStart { number, retry_of: calls.retry_of.take(), hedge: true };
                        let scope = calls.operation.as_mut().map(|op| op.attempt_started(&start));
                        let fut = match &scope {
                            Some(scope) => scope.in_build_scope(&mut *this.op),
                            None => (this.op)(),
                        };
                        if calls.copies.capacity() == 0 {
                            calls.copies.reserve_exact(calls.setup.policy.max_copies() as usize);
                        }
                        let limit_at = calls.setup.policy.attempt_timeout().map(|t| now + t);
                        calls.copies.push(InFlight {
                            fut: Box::pin(fut),
                            number,
                            started: now,
                            limit_at,
                            scope,
                            permit,
                        });
                        calls.next_at = Some(now + calls.setup.policy.current_delay(now));
                        // Poll it (and the others) at once.
                        continue;
                    }
                    Err(reason) => {
                        calls.next_at = None;
                        calls.held_back.get_or_insert(reason);
                    }
                }
            }
            let can_send = calls.next_at.is_some() && calls.sent < calls.setup.policy.max_copies();
            if calls.copies.is_empty() && !can_send {
                let reason = calls.held_back.unwrap_or(StopReason::AttemptsExhausted);
                return Poll::Ready(end(calls, this.done, now, reason, this.last.take()));
            }
            let Some(wake_at) = calls.next_event() else { return Poll::Pending };
            if *this.timer_at != Some(wake_at) || this.timer.is_none() {
                this.timer.set(Some(this.sleeper.sleep_until(wake_at)));
                *this.timer_at = Some(wake_at);
            }
            match this.timer.as_mut().as_pin_mut().map(|timer| timer.poll(cx)) {
                Some(Poll::Ready(())) => {
                    this.timer.set(None);
                    *this.timer_at = None;
                }
                _ => return Poll::Pending,
            }
        }
    }
}

/// Ends the call at `now` for `reason`, with `last` as the last failure.
fn end<Fut, O: Observer, T, E>(
    calls: &mut Calls<'_, Fut, O>,
    done: &mut bool,
    now: Instant,
    reason: StopReason,
    last: Option<Result<T, E>>,
) -> Result<T, RetryError<E>> {
    calls.finish(now, reason.outcome(), Some(reason));
    *done = true;
    give_up(calls, reason, last)
}

/// The call's result once it stops for `reason` with `last` as the last
/// copy's result: an `Ok` value as it came (a non-fatal response is still the
/// server's answer), an error wrapped with why, as a retry's.
fn give_up<Fut, O: Observer, T, E>(
    calls: &Calls<'_, Fut, O>,
    reason: StopReason,
    last: Option<Result<T, E>>,
) -> Result<T, RetryError<E>> {
    match last {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(RetryError::new(reason, calls.sent, calls.last_error, Some(e))),
        None => Err(RetryError::new(reason, calls.sent, calls.last_error, None)),
    }
}
