//! Awaiting a [`Retry`]: the async state machine.
//!
//! Hand-written rather than an `async fn` so that the future has a nameable type
//! (for `IntoFuture`) and no heap allocation: an operation that succeeds at once
//! costs one poll of the operation plus a few branches.

use crate::classify::Classify;
use crate::clock::TokioClock;
use crate::driver::Driver;
use crate::error::RetryError;
use crate::observe::Observer;
use crate::retry::{Notify, Retry, Step, give_up, settle, settle_timeout};
use pin_project_lite::pin_project;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::time::Sleep;

/// The clock of every async retry: tokio's, so `tokio::time::pause()` drives it.
static CLOCK: TokioClock = TokioClock;

pin_project! {
    #[project = StateProj]
    enum State<Fut> {
        // Ready to start the next attempt.
        Idle,
        // An attempt is running, with its time limit if it has one. The timer is
        // only armed once the attempt turns out not to be ready at once.
        Attempt { #[pin] fut: Fut, #[pin] limit: Option<Sleep>, limit_at: Option<tokio::time::Instant> },
        // Backing off before the next attempt.
        Waiting { #[pin] sleep: Sleep },
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
    pub struct RetryFuture<'a, Op, Fut, C, O, N>
    where
        Fut: Future,
        O: Observer,
    {
        op: Op,
        classifier: C,
        notify: N,
        driver: Driver<'a, O>,
        // The last failed attempt's result while waiting, in case the next
        // attempt is refused (breaker opened, deadline passed).
        last: Option<Fut::Output>,
        #[pin]
        state: State<Fut>,
    }
}

impl<'a, Op, Fut, T, E, C, O, N> IntoFuture for Retry<'a, Op, C, O, N>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    O: Observer,
    N: Notify<E>,
{
    type Output = Result<T, RetryError<E>>;
    type IntoFuture = RetryFuture<'a, Op, Fut, C, O, N>;

    fn into_future(self) -> Self::IntoFuture {
        let (op, classifier, notify, driver) = self.into_parts(&CLOCK);
        RetryFuture { op, classifier, notify, driver, last: None, state: State::Idle }
    }
}

impl<Op, Fut, T, E, C, O, N> Future for RetryFuture<'_, Op, Fut, C, O, N>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    O: Observer,
    N: Notify<E>,
{
    type Output = Result<T, RetryError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let step = match this.state.as_mut().project() {
                StateProj::Idle => {
                    let now = this.driver.now();
                    match this.driver.begin_attempt(now) {
                        Ok(limit) => {
                            // The limit counts from the same instant the deadline
                            // was checked at, whatever the operation does first.
                            let limit_at = limit.map(|l| tokio::time::Instant::from_std(now) + l);
                            let fut = this.driver.in_scope(&mut *this.op);
                            this.state.set(State::Attempt { fut, limit: None, limit_at });
                            continue;
                        }
                        Err(reason) => Step::Finished(give_up(this.driver, reason, this.last.take())),
                    }
                }
                StateProj::Attempt { fut, mut limit, limit_at } => {
                    if let Poll::Ready(result) = this.driver.in_scope(|| fut.poll(cx)) {
                        let now = this.driver.now();
                        settle(this.driver, this.classifier, this.notify, now, result)
                    } else {
                        if let Some(at) = limit_at.take() {
                            limit.set(Some(tokio::time::sleep_until(at)));
                        }
                        if limit.as_pin_mut().is_some_and(|l| l.poll(cx).is_ready()) {
                            let now = this.driver.now();
                            settle_timeout(this.driver, this.classifier, now)
                        } else {
                            return Poll::Pending;
                        }
                    }
                }
                StateProj::Waiting { sleep } => {
                    ready!(sleep.poll(cx));
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
                    // A zero wait (e.g. `Retry-After: 0`) needs no timer.
                    if !delay.is_zero() {
                        let sleep = if this.driver.timed() {
                            // From the instant the decision was taken, so the wait
                            // cannot push the next attempt past the deadline.
                            sleep_until(this.driver.now(), delay)
                        } else {
                            tokio::time::sleep(delay)
                        };
                        this.state.set(State::Waiting { sleep });
                    } else {
                        this.state.set(State::Idle);
                    }
                }
            }
        }
    }
}

/// A tokio sleep that ends `after` past `from`.
fn sleep_until(from: Instant, after: Duration) -> Sleep {
    tokio::time::sleep_until(tokio::time::Instant::from_std(from) + after)
}
