//! The hedged call's future: copies polled together, one timer for whatever
//! comes next (the next copy, a copy's time limit, the deadline). Every
//! decision — whether a copy may go, what its result means, how the call
//! ends — is the driver's ([`HedgeDriver`]).

use super::policy::HedgePolicy;
use crate::classify::Classify;
use crate::clock::Clock;
use crate::driver::Scope;
use crate::driver::hedge::{HedgeDriver, Sent, Settled};
use crate::error::RetryError;
use crate::observe::Observer;
use crate::outcome::{Outcome, StopReason};
use crate::retry::{Retry, verdict_of};
use crate::sleep::Sleeper;
use crate::verdict::{ErrorType, Verdict};
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// A copy after the first: its future, boxed so that it stays pinned while
/// the list of copies changes, and its token.
type Later<Fut, O> = (Pin<Box<Fut>>, Sent<Scope<O>>);

/// The copies in flight, each beside the token the driver gave it, and the
/// driver. Dropping it before the call ended reports the copies cancelled,
/// then the driver (dropped next) reports the call cancelled.
pub(crate) struct Copies<'a, Fut, O: Observer> {
    driver: HedgeDriver<'a, O, HedgePolicy>,
    /// The first copy's token: its future lives inline in the
    /// [`HedgeFuture`], so that a call the first copy answers allocates
    /// nothing.
    first: Option<Sent<Scope<O>>>,
    /// Every later copy (the list allocated when the first hedge goes).
    later: Vec<Later<Fut, O>>,
}

impl<'a, Fut, O: Observer> Copies<'a, Fut, O> {
    #[inline]
    pub(crate) fn new(driver: HedgeDriver<'a, O, HedgePolicy>) -> Self {
        Self { driver, first: None, later: Vec::new() }
    }

    /// Drops every later copy still in flight, and reports them and the
    /// first (whose future the caller has dropped) as cancelled.
    fn cancel_all(&mut self, now: Instant) {
        if let Some(first) = self.first.take() {
            self.driver.cancel(first, now);
        }
        if self.later.is_empty() {
            return;
        }
        for (fut, sent) in std::mem::take(&mut self.later) {
            drop(fut);
            self.driver.cancel(sent, now);
        }
    }

    /// Whether any copy is in flight.
    fn in_flight(&self) -> bool {
        self.first.is_some() || !self.later.is_empty()
    }

    /// The call is over at `now`: the copies left are cancelled (the first's
    /// future dropped by the caller), the observer hears how it ended.
    fn finish(&mut self, now: Instant, outcome: Outcome, reason: Option<StopReason>) {
        if self.in_flight() {
            self.cancel_all(now);
        }
        self.driver.finish(now, outcome, reason);
    }

    /// The earliest instant something is due: the next copy, a copy's time
    /// limit or the deadline.
    fn next_event(&self) -> Option<Instant> {
        let limits =
            self.first.iter().chain(self.later.iter().map(|(_, sent)| sent)).filter_map(|c| c.limit_at);
        self.driver.next_event().into_iter().chain(limits).min()
    }
}

impl<Fut, O: Observer> Drop for Copies<'_, Fut, O> {
    fn drop(&mut self) {
        // Dropped before it ended: the caller lost interest.
        if self.driver.in_progress() {
            let now = self.driver.now();
            self.cancel_all(now);
        }
    }
}

pin_project! {
    /// The future of an awaited hedged call (a [`Retry`](crate::Retry) built
    /// by [`hedge`](crate::Retryable::hedge)).
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
        // The first copy's future, inline. Declared before `copies`, so that
        // dropping the future mid-flight drops it before `copies` reports it.
        #[pin]
        first: Option<Fut>,
        copies: Copies<'a, Fut, O>,
        // The last non-fatal failure's result, handed back if no copy wins.
        last: Option<Fut::Output>,
        // The one timer, and the instant it is set for.
        #[pin]
        timer: Option<S::Sleep>,
        timer_at: Option<Instant>,
        done: bool,
    }
}

/// Awaiting a hedged call waits on tokio's timer.
#[cfg(feature = "tokio")]
impl<'a, Op, Fut, T, E, C, O> std::future::IntoFuture for Retry<'a, Op, C, O, (), HedgePolicy>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    O: Observer,
{
    type Output = Result<T, RetryError<E>>;
    type IntoFuture = HedgeFuture<'a, Op, Fut, C, O, crate::TokioSleeper>;

    #[inline]
    fn into_future(self) -> Self::IntoFuture {
        self.with_sleeper(crate::TokioSleeper)
    }
}

/// What only a hedged call has: its future.
impl<'a, Op, Fut, T, E, C, O> Retry<'a, Op, C, O, (), HedgePolicy>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    O: Observer,
{
    /// The hedged call as a future that times its delays and limits with
    /// `sleeper`, as a retry's [`with_sleeper`](Retry::with_sleeper) does.
    #[inline]
    pub fn with_sleeper<S: Sleeper>(self, sleeper: S) -> HedgeFuture<'a, Op, Fut, C, O, S> {
        let driver = HedgeDriver::new(self.setup, self.mode, self.observer, sleeper.clock());
        HedgeFuture::new(self.op, self.classifier, sleeper, Copies::new(driver))
    }
}

impl<'a, Op, Fut, C, O, S> HedgeFuture<'a, Op, Fut, C, O, S>
where
    Fut: Future,
    O: Observer,
    S: Sleeper,
{
    #[inline]
    pub(crate) fn new(op: Op, classifier: C, sleeper: S, copies: Copies<'a, Fut, O>) -> Self {
        Self {
            op,
            classifier,
            sleeper,
            first: None,
            copies,
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
        let copies = this.copies;
        let clock: &dyn Clock = this.sleeper.clock();
        let mut now = clock.now();
        copies.driver.begin(now);
        let pacer = copies.driver.pacer();
        loop {
            // Every copy in flight, in the order sent: the first, then the others.
            let mut index = 0;
            loop {
                let polled = if index == 0 {
                    let (Some(fut), Some(sent)) = (this.first.as_mut().as_pin_mut(), copies.first.as_ref())
                    else {
                        index += 1;
                        continue;
                    };
                    poll_copy(fut, sent, this.classifier, pacer, cx, now)
                } else {
                    let Some((fut, sent)) = copies.later.get_mut(index - 1) else { break };
                    poll_copy(fut.as_mut(), sent, this.classifier, pacer, cx, now)
                };
                let Some((verdict, result)) = polled else {
                    index += 1;
                    continue;
                };
                // Done with, or cut at its time limit: either way its future goes now.
                let sent = if index == 0 {
                    this.first.set(None);
                    copies.first.take()
                } else {
                    Some(copies.later.remove(index - 1).1)
                };
                let Some(sent) = sent else { break };
                let settled = copies.driver.settle(sent, verdict, now);
                if !matches!(settled, Settled::Continue) {
                    // The call is over: the first copy, if still in flight, is dropped.
                    this.first.set(None);
                }
                match (settled, result) {
                    (Settled::Won, Some(Ok(value))) => {
                        copies.finish(now, Outcome::Success, None);
                        *this.done = true;
                        return Poll::Ready(Ok(value));
                    }
                    (Settled::Won, result) => {
                        // `verdict_of` never calls an `Err` a success.
                        copies.finish(now, Outcome::Success, None);
                        *this.done = true;
                        return Poll::Ready(give_up(&copies.driver, StopReason::Permanent, result));
                    }
                    (Settled::Fatal(reason), result) => {
                        copies.finish(now, reason.outcome(), Some(reason));
                        *this.done = true;
                        return Poll::Ready(give_up(&copies.driver, reason, result));
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
            if copies.driver.deadline_passed(now) {
                this.first.set(None);
                return Poll::Ready(end(
                    copies,
                    this.done,
                    now,
                    StopReason::DeadlineExceeded,
                    this.last.take(),
                ));
            }
            // The next copy, if it is due and the driver lets it go.
            if copies.driver.due(now)
                && let Some(sent) = copies.driver.send(now)
            {
                let fut = sent.flight().in_build_scope(&mut *this.op);
                if copies.first.is_none() && this.first.is_none() && copies.driver.attempts() == 1 {
                    this.first.set(Some(fut));
                    copies.first = Some(sent);
                } else {
                    if copies.later.capacity() == 0 {
                        copies.later.reserve_exact(copies.driver.max_copies() as usize - 1);
                    }
                    copies.later.push((Box::pin(fut), sent));
                }
                // Poll it (and the others) at once.
                continue;
            }
            if !copies.in_flight() && !copies.driver.can_send() {
                let reason = copies.driver.reason_when_idle();
                return Poll::Ready(end(copies, this.done, now, reason, this.last.take()));
            }
            let Some(wake_at) = copies.next_event() else { return Poll::Pending };
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
fn poll_copy<Fut, T, E, A: crate::observe::AttemptScope>(
    fut: Pin<&mut Fut>,
    sent: &Sent<A>,
    classifier: &mut impl Classify<T, E>,
    pacer: Option<&crate::pace::Pacer>,
    cx: &mut Context<'_>,
    now: Instant,
) -> Option<(Verdict, Option<Result<T, E>>)>
where
    Fut: Future<Output = Result<T, E>>,
{
    match sent.flight().in_scope(|| fut.poll(cx)) {
        Poll::Ready(result) => Some((verdict_of(classifier, &result, pacer), Some(result))),
        Poll::Pending if sent.limit_at.is_some_and(|at| at <= now) => match classifier.timeout() {
            // No result to hand back: a timeout is never the answer.
            Verdict::Success => Some((Verdict::retryable(ErrorType::TIMEOUT), None)),
            verdict => Some((verdict, None)),
        },
        Poll::Pending => None,
    }
}

/// Ends the call at `now` for `reason`, with `last` as the last failure.
fn end<Fut, O: Observer, T, E>(
    copies: &mut Copies<'_, Fut, O>,
    done: &mut bool,
    now: Instant,
    reason: StopReason,
    last: Option<Result<T, E>>,
) -> Result<T, RetryError<E>> {
    copies.finish(now, reason.outcome(), Some(reason));
    *done = true;
    give_up(&copies.driver, reason, last)
}

/// The call's result once it stops for `reason` with `last` as the last
/// copy's result: an `Ok` value as it came (a non-fatal response is still the
/// server's answer), an error wrapped with why, as a retry's.
fn give_up<O: Observer, T, E>(
    driver: &HedgeDriver<'_, O, HedgePolicy>,
    reason: StopReason,
    last: Option<Result<T, E>>,
) -> Result<T, RetryError<E>> {
    let (sent, last_error) = (driver.attempts(), driver.last_error());
    match last {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(RetryError::new(reason, sent, last_error, Some(e))),
        None => Err(RetryError::new(reason, sent, last_error, None)),
    }
}
