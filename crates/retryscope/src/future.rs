//! Awaiting a [`Retry`]: the async state machine.
//!
//! Hand-written rather than an `async fn` so that the future has a nameable type
//! (for `IntoFuture`) and no heap allocation. Most calls succeed at once, so
//! `poll` is a small fast path for the driver's quiet first attempt (a silent
//! observer, no breaker, no pacer, borrowed names): it runs that attempt
//! without building the driver at all, and an operation that succeeds at once
//! costs one poll of the operation, its classification and a budget's count.
//! Everything else — a failure, an attempt not ready at once, an observed or
//! guarded call — goes out of line to `drive`, the whole state machine (through
//! `take_over` if the fast path started the attempt); a timer is armed only for
//! an attempt that is not ready at once. It waits with a [`Sleeper`]: tokio's
//! for `.await`, any runtime's through [`Retry::with_sleeper`].

use crate::classify::Classify;
use crate::clock::Clock;
use crate::driver::{Driver, QuietSetup, Started, untimed_instant};
use crate::error::RetryError;
use crate::guard::Attempt;
use crate::observe::Observer;
use crate::retry::{Notify, Retry, Step, final_result, settle, settle_timeout, settle_verdict, verdict_of};
use crate::sleep::Sleeper;
use crate::verdict::Verdict;
use pin_project_lite::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

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

/// The engine's side of a retry: its settings until something needs more
/// than the fast path (see `RetryFuture::poll`), then the driver.
#[allow(
    clippy::large_enum_variant,
    reason = "the future is one allocation-free value: boxing the driver would allocate for every call that fails once, and `Fresh` is there so the fast path writes none of the driver, not to be small"
)]
enum Phase<'a, O: Observer> {
    /// No attempt has needed the driver: before the first poll, and after a
    /// quiet first attempt that succeeded at once. Such a call never builds
    /// one: a dozen fields written and dropped that it would never read. Its
    /// names are borrowed: it has nothing of its own to drop.
    Fresh {
        setup: QuietSetup<'a>,
        observer: O,
    },
    Running(Driver<'a, O>),
    /// Only while `Fresh` turns into `Running`.
    Moving,
}

impl<'a, O: Observer> Phase<'a, O> {
    /// The driver, built now if it was not yet.
    #[inline]
    fn driver(&mut self, clock: &'a dyn Clock) -> &mut Driver<'a, O> {
        if !matches!(self, Phase::Running(_)) {
            self.build(clock);
        }
        match self {
            Phase::Running(driver) => driver,
            // `build` leaves a running driver.
            Phase::Fresh { .. } | Phase::Moving => unreachable!("the driver was just built"),
        }
    }

    #[cold]
    #[inline(never)]
    fn build(&mut self, clock: &'a dyn Clock) {
        if let Phase::Fresh { setup, observer } = std::mem::replace(self, Phase::Moving) {
            *self = Phase::Running(Driver::new(setup.into(), observer, clock));
        }
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
        phase: Phase<'a, O>,
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

    #[inline(always)]
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
    #[inline(always)]
    pub fn with_sleeper<S: Sleeper>(self, sleeper: S) -> RetryFuture<'a, Op, Fut, C, O, N, S> {
        let Retry { op, classifier, observer, notify, setup, mode: () } = self;
        // Only a retry the fast path can run starts without its driver: one
        // that starts quietly (see `Driver::start_attempt`) with no pacer to
        // ask, and borrows its names. For any other, building it later would
        // cost a move of the whole phase.
        let quiet = if O::SILENT { setup.quiet() } else { None };
        let phase = match quiet {
            Some(setup) => Phase::Fresh { setup, observer },
            None => Phase::Running(Driver::new(setup, observer, sleeper.clock())),
        };
        RetryFuture { op, classifier, notify, sleeper, phase, last: None, timer: None, state: State::Idle }
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
        // The fast path: the quiet first attempt (a silent observer, no
        // breaker, no pacer, borrowed names) runs without a driver; one that
        // is ready at once and succeeds costs its poll, its classification and
        // the budget's count, in this small function. Anything else goes on
        // out of line: in `take_over` if that attempt failed or is not ready,
        // then in `drive`, the whole state machine.
        let this = self.as_mut().project();
        let (&Phase::Fresh { setup, .. }, State::Idle) = (&*this.phase, &*this.state) else {
            return self.drive(cx);
        };
        // Read the clock only if something uses the time (see `Driver::now`).
        let start = (O::TIMED || setup.policy.is_timed()).then(|| this.sleeper.clock().now());
        // The guards (a budget at most: see `QuietSetup`) hear the call.
        setup.call_started();
        let mut state = this.state;
        // Built and polled outside any scope: a quiet attempt has none.
        state.set(State::Attempt { fut: (this.op)(), quiet: None, limit_at: None });
        let StateProj::Attempt { fut, .. } = state.as_mut().project() else {
            unreachable!("the attempt was just started")
        };
        let failed = match fut.poll(cx) {
            Poll::Ready(result) => {
                // Quiet: no pacer (it would have made the call paced).
                let verdict = verdict_of(this.classifier, &result, None);
                match result {
                    Ok(value) if verdict == Verdict::Success => {
                        // The setup as read before the attempt, which cannot
                        // have changed it: the phase need not be read again.
                        setup.call_succeeded(Attempt::first());
                        state.set(State::Done);
                        return Poll::Ready(Ok(value));
                    }
                    result => Some((result, verdict)),
                }
            }
            Poll::Pending => None,
        };
        self.take_over(cx, start.unwrap_or_else(untimed_instant), failed)
    }
}

/// Sets up the wait of `delay` before the next attempt.
fn schedule<Fut, O: Observer, S: Sleeper>(
    driver: &Driver<'_, O>,
    sleeper: &S,
    mut timer: Pin<&mut Option<S::Sleep>>,
    mut state: Pin<&mut State<Fut>>,
    delay: Duration,
) {
    // A zero wait (e.g. `Retry-After: 0`) needs no timer.
    if delay.is_zero() {
        state.set(State::Idle);
        return;
    }
    let sleep = if driver.timed() {
        // From the instant the decision was taken, so the wait cannot push
        // the next attempt past the deadline.
        sleeper.sleep_until(driver.now() + delay)
    } else {
        sleeper.sleep(delay)
    };
    timer.set(Some(sleep));
    state.set(State::Waiting);
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
    /// The state machine, from the current state.
    #[inline(never)]
    fn drive(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, RetryError<E>>> {
        let mut this = self.project();
        let driver = this.phase.driver(this.sleeper.clock());
        loop {
            let step = match this.state.as_mut().project() {
                StateProj::Idle => {
                    let now = driver.now();
                    let held = if driver.paced() { driver.pace(now) } else { Ok(None) };
                    let started = match held {
                        Ok(None) => driver.start_attempt(now),
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
                            return Poll::Ready(final_result(driver, reason, this.last.take()));
                        }
                    };
                    // The limit counts from the same instant the deadline was
                    // checked at, whatever the operation does first.
                    let limit_at = limit.map(|l| now + l);
                    // Built in the scope only if the scope asks for it: its
                    // contract may cover only the polls, and entering a span
                    // costs (~2 k instructions with the OTel observer) for what
                    // an `async` body would not run yet anyway.
                    let fut = driver.in_build_scope(&mut *this.op);
                    this.state.set(State::Attempt { fut, quiet, limit_at });
                    continue;
                }
                StateProj::Attempt { fut, quiet, limit_at } => {
                    let step = if let Poll::Ready(result) = driver.in_scope(|| fut.poll(cx)) {
                        settle(driver, this.classifier, this.notify, result, quiet.take())
                    } else {
                        if let Some(at) = limit_at.take() {
                            this.timer.set(Some(this.sleeper.sleep_until(at)));
                        }
                        if this.timer.as_mut().as_pin_mut().is_some_and(|l| l.poll(cx).is_ready()) {
                            settle_timeout(driver, this.classifier, quiet.take())
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
            };
            match step {
                Step::Finished(output) => {
                    this.state.set(State::Done);
                    return Poll::Ready(output);
                }
                Step::Wait { delay, last } => {
                    *this.last = last;
                    schedule(driver, this.sleeper, this.timer.as_mut(), this.state.as_mut(), delay);
                }
            }
        }
    }

    /// The driver takes over the fast path's quiet attempt, started at
    /// `started`: it `failed` (with its result and verdict), or it was not
    /// ready at once. Out of line, so that the fast path, which rarely comes
    /// here, holds none of it.
    #[inline(never)]
    fn take_over(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        started: Instant,
        failed: Option<(Result<T, E>, Verdict)>,
    ) -> Poll<Result<T, RetryError<E>>> {
        let this = self.as_mut().project();
        let (mut state, mut timer) = (this.state, this.timer);
        let StateProj::Attempt { quiet, .. } = state.as_mut().project() else {
            unreachable!("the quiet attempt is running")
        };
        let clock = this.sleeper.clock();
        let driver = this.phase.driver(clock);
        let step = match failed {
            Some((result, verdict)) => {
                // It failed: the driver books the attempt.
                driver.resume_quiet(started);
                settle_verdict(driver, this.classifier, this.notify, result, verdict, Some(started))
            }
            None => {
                // Not ready at once: only now is the attempt's time limit
                // armed, from the instant it started.
                *quiet = Some(started);
                let Some(limit) = driver.resume_quiet(started) else { return Poll::Pending };
                timer.set(Some(this.sleeper.sleep_until(started + limit)));
                if !timer.as_mut().as_pin_mut().is_some_and(|l| l.poll(cx).is_ready()) {
                    return Poll::Pending;
                }
                timer.set(None);
                settle_timeout(driver, this.classifier, quiet.take())
            }
        };
        match step {
            Step::Finished(output) => {
                state.set(State::Done);
                return Poll::Ready(output);
            }
            Step::Wait { delay, last } => {
                *this.last = last;
                schedule(driver, this.sleeper, timer, state, delay);
            }
        }
        self.drive(cx)
    }
}
