//! Awaiting a [`Retry`]: the async state machine.
//!
//! Hand-written rather than an `async fn` so that the future has a nameable type
//! (for `IntoFuture`) and no heap allocation: an operation that succeeds at once
//! costs one poll of the operation plus a few branches (see the driver's quiet
//! first attempt), and a timer is armed only for an attempt that is not ready
//! at once. It waits with a
//! [`Sleeper`]: tokio's for `.await`, any runtime's through
//! [`Retry::with_sleeper`].

use crate::classify::Classify;
use crate::driver::{Driver, Started};
use crate::error::RetryError;
use crate::observe::Observer;
use crate::retry::{Notify, Retry, Step, final_result, settle, settle_timeout};
use crate::sleep::Sleeper;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Instant;

pin_project! {
    #[project = StateProj]
    enum State<Fut> {
        // Ready to start the next attempt.
        Idle,
        // An attempt is running. `quiet`: the first attempt of a quiet
        // operation, started at this instant without the driver's bookkeeping
        // (see `Driver::start_attempt`), which follows only if it fails.
        // `limit_at`: when its time limit ends, until the timer is armed (only
        // once the attempt turns out not to be ready at once).
        Attempt { #[pin] fut: Fut, quiet: Option<Instant>, limit_at: Option<Instant> },
        // Backing off, or held by the pacer, before the next attempt, on `timer`.
        Waiting,
        // Finished; polling again is a caller bug.
        Done,
    }
}

pin_project! {
    /// The future of an awaited [`Retry`].
    ///
    /// Dropping it mid-flight (a timeout around it, a cancelled task) cancels
    /// cleanly: the running attempt is dropped and the observer hears
    /// [`Outcome::Cancelled`](crate::Outcome::Cancelled).
    #[must_use = "futures do nothing unless polled"]
    pub struct RetryFuture<'a, Op, Fut, C, O, N, S>
    where
        Fut: Future,
        O: Observer,
        S: Sleeper,
    {
        op: Op,
        classifier: C,
        notify: N,
        sleeper: S,
        driver: Driver<'a, O>,
        // The last failed attempt's result while waiting, in case the next
        // attempt is refused (breaker opened, deadline passed).
        last: Option<Fut::Output>,
        // The one timer: the running attempt's time limit, or the wait before
        // the next attempt. Outside `state`, so that an attempt without a limit
        // moves and drops nothing of it.
        #[pin]
        timer: Option<S::Sleep>,
        #[pin]
        state: State<Fut>,
    }
}

/// Awaiting a retry waits on tokio's timer ([`TokioSleeper`](crate::TokioSleeper)).
#[cfg(feature = "tokio")]
impl<'a, Op, Fut, T, E, C, O, N> std::future::IntoFuture for Retry<'a, Op, C, O, N>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    O: Observer,
    N: Notify<E>,
{
    type Output = Result<T, RetryError<E>>;
    type IntoFuture = RetryFuture<'a, Op, Fut, C, O, N, crate::TokioSleeper>;

    #[inline]
    fn into_future(self) -> Self::IntoFuture {
        self.with_sleeper(crate::TokioSleeper)
    }
}

impl<'a, Op, Fut, T, E, C, O, N> Retry<'a, Op, C, O, N>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    O: Observer,
    N: Notify<E>,
{
    /// The retry as a future that waits with `sleeper`: how runtimes other than
    /// tokio (or tokio without the `tokio` feature) run async retries. Time —
    /// deadlines, attempt durations — comes from the sleeper's
    /// [`clock`](Sleeper::clock).
    ///
    /// With async-std: `.with_sleeper(async_std::task::sleep)`; with smol:
    /// `.with_sleeper(|d| async move { smol::Timer::after(d).await; })`. Below, a
    /// retry run by `futures`' `block_on`, which has no timer of its own:
    ///
    /// ```
    /// use retryscope::{Policy, Retryable};
    /// use std::time::Duration;
    ///
    /// let mut calls = 0;
    /// let retry = (|| {
    ///     calls += 1;
    ///     let result = if calls < 3 { Err("busy") } else { Ok(calls) };
    ///     async move { result }
    /// })
    /// .retry(Policy::builder().base_delay(Duration::from_millis(1)).max_delay(Duration::from_millis(5)).build()?)
    /// .retry_any_error()
    /// // Blocking is fine here only because `block_on` runs nothing else.
    /// .with_sleeper(|delay| {
    ///     std::thread::sleep(delay);
    ///     std::future::ready(())
    /// });
    /// assert_eq!(futures_executor::block_on(retry), Ok(3));
    /// # Ok::<(), retryscope::PolicyError>(())
    /// ```
    #[inline]
    pub fn with_sleeper<S: Sleeper>(self, sleeper: S) -> RetryFuture<'a, Op, Fut, C, O, N, S> {
        let (op, classifier, notify, driver) = self.into_parts(sleeper.clock());
        RetryFuture { op, classifier, notify, sleeper, driver, last: None, timer: None, state: State::Idle }
    }
}

impl<Op, Fut, T, E, C, O, N, S> Future for RetryFuture<'_, Op, Fut, C, O, N, S>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    O: Observer,
    N: Notify<E>,
    S: Sleeper,
{
    type Output = Result<T, RetryError<E>>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // The fast path: a quiet first attempt (a silent observer, no breaker,
        // no pacer) that is ready at once costs its poll, its classification
        // and the budget's count, in a small function; anything else goes on
        // in `drive`, the whole state machine, out of line.
        let this = self.as_mut().project();
        if !(this.driver.quiet_first() && matches!(*this.state, State::Idle)) {
            return self.drive(cx, None);
        }
        let mut state = this.state;
        let now = this.driver.now();
        let limit = this.driver.start_quietly(now);
        // Outside any scope: a quiet attempt has none (see `Driver::in_scope`).
        state.set(State::Attempt { fut: (this.op)(), quiet: Some(now), limit_at: None });
        let StateProj::Attempt { fut, quiet, .. } = state.as_mut().project() else {
            unreachable!("the attempt was just started")
        };
        let step = match fut.poll(cx) {
            Poll::Ready(result) => settle(this.driver, this.classifier, this.notify, result, quiet.take()),
            Poll::Pending => {
                // Not ready at once: only now is its time limit armed.
                let Some(limit) = limit else { return Poll::Pending };
                let mut timer = this.timer;
                timer.set(Some(this.sleeper.sleep_until(now + limit)));
                if !timer.as_mut().as_pin_mut().is_some_and(|l| l.poll(cx).is_ready()) {
                    return Poll::Pending;
                }
                timer.set(None);
                settle_timeout(this.driver, this.classifier, quiet.take())
            }
        };
        match step {
            Step::Finished(output) => {
                state.set(State::Done);
                Poll::Ready(output)
            }
            step => self.drive(cx, Some(step)),
        }
    }
}

impl<Op, Fut, T, E, C, O, N, S> RetryFuture<'_, Op, Fut, C, O, N, S>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    O: Observer,
    N: Notify<E>,
    S: Sleeper,
{
    /// The state machine: runs from the current state, or first acts on
    /// `step`, what the attempt that just ended calls for.
    #[inline(never)]
    fn drive(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut first: Option<Step<T, E>>,
    ) -> Poll<Result<T, RetryError<E>>> {
        let mut this = self.project();
        loop {
            let step = if let Some(step) = first.take() {
                step
            } else {
                match this.state.as_mut().project() {
                    StateProj::Idle => {
                        let now = this.driver.now();
                        let held = if this.driver.paced() { this.driver.pace(now) } else { Ok(None) };
                        let started = match held {
                            Ok(None) => this.driver.start_attempt(now),
                            Ok(Some(wait)) => {
                                this.timer.set(Some(this.sleeper.sleep(wait)));
                                this.state.set(State::Waiting);
                                continue;
                            }
                            Err(reason) => Err(reason),
                        };
                        let Started { limit, quiet } = match started {
                            Ok(started) => started,
                            Err(reason) => {
                                this.state.set(State::Done);
                                return Poll::Ready(final_result(this.driver, reason, this.last.take()));
                            }
                        };
                        // The limit counts from the same instant the deadline was
                        // checked at, whatever the operation does first.
                        let limit_at = limit.map(|l| now + l);
                        // Built outside the attempt's scope: the contract is that the
                        // attempt's code sees its scope while it is *polled*, and
                        // entering a span costs (~2 k instructions with the OTel
                        // observer) for what an `async` body would not run yet anyway.
                        let fut = (this.op)();
                        this.state.set(State::Attempt { fut, quiet, limit_at });
                        continue;
                    }
                    StateProj::Attempt { fut, quiet, limit_at } => {
                        let step = if let Poll::Ready(result) = this.driver.in_scope(|| fut.poll(cx)) {
                            settle(this.driver, this.classifier, this.notify, result, quiet.take())
                        } else {
                            if let Some(at) = limit_at.take() {
                                this.timer.set(Some(this.sleeper.sleep_until(at)));
                            }
                            if this.timer.as_mut().as_pin_mut().is_some_and(|l| l.poll(cx).is_ready()) {
                                settle_timeout(this.driver, this.classifier, quiet.take())
                            } else {
                                return Poll::Pending;
                            }
                        };
                        // The attempt is over: so is its time limit.
                        if this.timer.is_some() {
                            this.timer.set(None);
                        }
                        step
                    }
                    StateProj::Waiting => {
                        if let Some(sleep) = this.timer.as_mut().as_pin_mut() {
                            ready!(sleep.poll(cx));
                            this.timer.set(None);
                        }
                        this.state.set(State::Idle);
                        continue;
                    }
                    StateProj::Done => panic!("RetryFuture polled after completion"),
                }
            };
            match step {
                Step::Finished(output) => {
                    this.state.set(State::Done);
                    return Poll::Ready(output);
                }
                Step::Wait { delay, last } => {
                    *this.last = last;
                    // A zero wait (e.g. `Retry-After: 0`) needs no timer.
                    if !delay.is_zero() {
                        let sleep = if this.driver.timed() {
                            // From the instant the decision was taken, so the wait
                            // cannot push the next attempt past the deadline.
                            this.sleeper.sleep_until(this.driver.now() + delay)
                        } else {
                            this.sleeper.sleep(delay)
                        };
                        this.timer.set(Some(sleep));
                        this.state.set(State::Waiting);
                    } else {
                        this.state.set(State::Idle);
                    }
                }
            }
        }
    }
}
