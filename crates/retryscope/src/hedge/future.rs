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

/// A copy after the first: its future, boxed so that it stays pinned while
/// the list of copies changes, and its slot.
type Later<Fut, A> = (Pin<Box<Fut>>, Slot<A>);

/// What is known of one copy in flight, beside its future.
struct Slot<A> {
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
    /// The first copy's slot: its future lives inline in the [`HedgeFuture`],
    /// so that a call the first copy answers allocates nothing.
    first: Option<Slot<Scope<O>>>,
    /// Every later copy (the list allocated when the first hedge goes).
    copies: Vec<Later<Fut, Scope<O>>>,
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
            first: None,
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

    /// Books a copy that just ended with `verdict` at `now` (its future
    /// already dropped).
    fn settle(&mut self, copy: Slot<Scope<O>>, verdict: Verdict, now: Instant) -> Settled {
        let Slot { number, started, scope, permit, .. } = copy;
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
        // Only an observer that uses durations, or a percentile delay, needs it.
        let duration = if O::TIMED || self.setup.policy.tracks_latency() {
            now.saturating_duration_since(started)
        } else {
            Duration::ZERO
        };
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

    /// Drops every later copy still in flight, and reports them and the
    /// first (whose future the caller has dropped) as cancelled.
    fn cancel_all(&mut self, now: Instant) {
        let later = std::mem::take(&mut self.copies);
        let slots = self.first.take().into_iter().chain(later.into_iter().map(|(fut, slot)| {
            drop(fut);
            slot
        }));
        for Slot { number, started, scope, permit, .. } in slots {
            // Released unsettled: a cancelled copy says nothing of the dependency.
            drop(permit);
            if let (Some(op), Some(scope)) = (self.operation.as_mut(), scope) {
                let duration = now.saturating_duration_since(started);
                let end = AttemptEnd { number, duration, error: None, hedge: Some(HedgeOutcome::Cancelled) };
                op.attempt_finished(scope, &end);
            }
        }
    }

    /// Whether any copy is in flight.
    fn in_flight(&self) -> bool {
        self.first.is_some() || !self.copies.is_empty()
    }

    /// The call is over at `now`: the copies left are cancelled (the first's
    /// future dropped by the caller), the observer hears how it ended.
    fn finish(&mut self, now: Instant, outcome: Outcome, reason: Option<StopReason>) {
        if self.in_flight() {
            self.cancel_all(now);
        }
        if let Some(op) = self.operation.take() {
            let duration = match self.started {
                Some(started) if O::TIMED => now.saturating_duration_since(started),
                _ => Duration::ZERO,
            };
            op.finished(&Finish { outcome, reason, attempts: self.sent, duration });
        }
    }

    /// The earliest instant something is due: the next copy, a copy's time
    /// limit or the deadline.
    fn next_event(&self) -> Option<Instant> {
        let next_copy = self.next_at.filter(|_| self.sent < self.setup.policy.max_copies());
        let limits =
            self.first.iter().chain(self.copies.iter().map(|(_, slot)| slot)).filter_map(|c| c.limit_at);
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
        // The first copy's future, inline. Declared before `calls`, so that
        // dropping the future mid-flight drops it before `calls` reports it.
        #[pin]
        first: Option<Fut>,
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
        Self {
            op,
            classifier,
            sleeper,
            first: None,
            calls,
            last: None,
            timer: None,
            timer_at: None,
            done: false,
        }
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
        let mut now = clock.now();
        if calls.started.is_none() {
            calls.begin(now);
        }
        loop {
            // Every copy in flight, in the order sent: the first, then the others.
            let mut index = 0;
            loop {
                let polled = if index == 0 {
                    let (Some(fut), Some(slot)) = (this.first.as_mut().as_pin_mut(), calls.first.as_ref())
                    else {
                        index += 1;
                        continue;
                    };
                    poll_copy(fut, slot, this.classifier, cx, now)
                } else {
                    let Some((fut, slot)) = calls.copies.get_mut(index - 1) else { break };
                    poll_copy(fut.as_mut(), slot, this.classifier, cx, now)
                };
                let Some((verdict, result)) = polled else {
                    index += 1;
                    continue;
                };
                // Done with, or cut at its time limit: either way its future goes now.
                let slot = if index == 0 {
                    this.first.set(None);
                    calls.first.take()
                } else {
                    Some(calls.copies.remove(index - 1).1)
                };
                let Some(slot) = slot else { break };
                let settled = calls.settle(slot, verdict, now);
                if !matches!(settled, Settled::Continue) {
                    // The call is over: the first copy, if still in flight, is dropped.
                    this.first.set(None);
                }
                match (settled, result) {
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
                // The slot at `index` now holds the next copy (or none).
                if index == 0 {
                    index = 1;
                }
            }
            if calls.deadline_at.is_some_and(|at| at <= now) {
                this.first.set(None);
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
                        let limit_at = calls.setup.policy.attempt_timeout().map(|t| now + t);
                        let slot = Slot { number, started: now, limit_at, scope, permit };
                        if calls.first.is_none() && this.first.is_none() && number == 1 {
                            this.first.set(Some(fut));
                            calls.first = Some(slot);
                        } else {
                            if calls.copies.capacity() == 0 {
                                calls.copies.reserve_exact(calls.setup.policy.max_copies() as usize - 1);
                            }
                            calls.copies.push((Box::pin(fut), slot));
                        }
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
            if !calls.in_flight() && !can_send {
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
                    now = clock.now();
                }
                _ => return Poll::Pending,
            }
        }
    }
}

/// Polls one copy in its scope: its verdict and result once it is ready, or
/// its timeout verdict once its time limit has passed at `now`.
fn poll_copy<Fut, T, E, A: AttemptScope>(
    fut: Pin<&mut Fut>,
    slot: &Slot<A>,
    classifier: &mut impl Classify<T, E>,
    cx: &mut Context<'_>,
    now: Instant,
) -> Option<(Verdict, Option<Result<T, E>>)>
where
    Fut: Future<Output = Result<T, E>>,
{
    let polled = match &slot.scope {
        Some(scope) => scope.in_scope(|| fut.poll(cx)),
        None => fut.poll(cx),
    };
    match polled {
        Poll::Ready(result) => Some((verdict_of(classifier, &result), Some(result))),
        Poll::Pending if slot.limit_at.is_some_and(|at| at <= now) => match classifier.timeout() {
            // No result to hand back: a timeout is never the answer.
            Verdict::Success => Some((Verdict::retryable(ErrorType::TIMEOUT), None)),
            verdict => Some((verdict, None)),
        },
        Poll::Pending => None,
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
