//! The retry builder: `op.retry(policy).when(..).notify(..).await`.

use crate::breaker::CircuitBreaker;
use crate::classify::{AnyError, Classify, ClassifyFn, When};
use crate::driver::{Driver, Next, Setup};
use crate::error::RetryError;
use crate::error::StopReason;
use crate::observe::{NoObserver, Observer};
use crate::policy::Policy;
use crate::throttle::Throttle;
use std::time::{Duration, Instant};

/// Adds [`retry`](Retryable::retry) to every `FnMut()` closure.
///
/// A closure returning a future is retried with `.await`; a closure returning a
/// `Result` is retried in blocking code with [`call`](Retry::call).
///
/// ```
/// use retryscope::{Policy, Retryable};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut calls = 0;
/// let answer = (|| {
///     calls += 1;
///     let result = if calls < 3 { Err("busy") } else { Ok(42) };
///     async move { result }
/// })
/// .retry(Policy::interactive())
/// .when(|e: &&str| *e == "busy")
/// .await;
/// assert_eq!(answer.unwrap(), 42);
/// assert_eq!(calls, 3);
/// # }
/// ```
pub trait Retryable<R>: FnMut() -> R + Sized {
    /// Retries this operation under `policy`.
    fn retry<'a>(self, policy: Policy) -> Retry<'a, Self> {
        Retry { op: self, classifier: AnyError, observer: NoObserver, notify: (), setup: Setup::new(policy) }
    }
}

impl<R, F: FnMut() -> R> Retryable<R> for F {}

/// A configured retry of one operation. Await it (async operations) or
/// [`call`](Self::call) it (blocking ones).
#[must_use = "a retry does nothing until awaited or called"]
pub struct Retry<'a, Op, C = AnyError, O = NoObserver, N = ()> {
    pub(crate) op: Op,
    pub(crate) classifier: C,
    pub(crate) observer: O,
    pub(crate) notify: N,
    pub(crate) setup: Setup<'a>,
}

impl<'a, Op, C, O, N> Retry<'a, Op, C, O, N> {
    /// Retries only the errors `predicate` accepts; other errors are permanent.
    pub fn when<P>(self, predicate: P) -> Retry<'a, Op, When<P>, O, N> {
        self.with_classifier(When(predicate))
    }

    /// Classifies each result with `f`, e.g. to retry an `Ok` HTTP 503 or to pass a
    /// server's `Retry-After` hint.
    pub fn classify<F>(self, f: F) -> Retry<'a, Op, ClassifyFn<F>, O, N> {
        self.with_classifier(ClassifyFn(f))
    }

    /// Classifies each result with a [`Classify`] implementation.
    pub fn with_classifier<C2>(self, classifier: C2) -> Retry<'a, Op, C2, O, N> {
        Retry { op: self.op, classifier, observer: self.observer, notify: self.notify, setup: self.setup }
    }

    /// Calls `f(&error, delay)` before each wait that follows an `Err`.
    pub fn notify<N2>(self, f: N2) -> Retry<'a, Op, C, O, N2> {
        Retry {
            op: self.op,
            classifier: self.classifier,
            observer: self.observer,
            notify: f,
            setup: self.setup,
        }
    }

    /// Reports attempts, waits and the outcome to `observer` (e.g. the
    /// OpenTelemetry instrumentation).
    pub fn observe<O2: Observer>(self, observer: O2) -> Retry<'a, Op, C, O2, N> {
        Retry { op: self.op, classifier: self.classifier, observer, notify: self.notify, setup: self.setup }
    }

    /// Names the dependency called (`retryscope.dependency`). Keep it
    /// low-cardinality: a service or host name, never a URL.
    pub fn dependency(mut self, dependency: &'a str) -> Self {
        self.setup.dependency = dependency;
        self
    }

    /// Names the logical operation (`retryscope.operation`).
    pub fn operation(mut self, operation: &'a str) -> Self {
        self.setup.operation = Some(operation);
        self
    }

    /// Asks `throttle` (a [`RetryBudget`](crate::RetryBudget) or a
    /// [`TokenBucket`](crate::TokenBucket)) before every retry.
    pub fn budget(mut self, throttle: &'a dyn Throttle) -> Self {
        self.setup.throttle = Some(throttle);
        self
    }

    /// Asks `breaker` before every attempt and tells it how each ended.
    pub fn breaker(mut self, breaker: &'a CircuitBreaker) -> Self {
        self.setup.breaker = Some(breaker);
        self
    }

    /// Seeds the jitter's random-number generator, for reproducible delays.
    pub fn seed(mut self, seed: u64) -> Self {
        self.setup.seed = Some(seed);
        self
    }
}

/// Called before each wait that follows an `Err`.
pub trait Notify<E> {
    /// `error` caused a retry that will start after `delay`.
    fn notify(&mut self, error: &E, delay: Duration);
}

impl<E> Notify<E> for () {
    fn notify(&mut self, _: &E, _: Duration) {}
}

impl<E, F: FnMut(&E, Duration)> Notify<E> for F {
    fn notify(&mut self, error: &E, delay: Duration) {
        self(error, delay)
    }
}

impl<'a, Op, C, O: Observer, N> Retry<'a, Op, C, O, N> {
    pub(crate) fn into_parts(self) -> (Op, C, N, Driver<'a, O>) {
        (self.op, self.classifier, self.notify, Driver::new(self.setup, self.observer))
    }
}

/// What follows an attempt, from the front end's point of view.
pub(crate) enum Step<T, E> {
    /// Hand this back to the caller.
    Finished(Result<T, RetryError<E>>),
    /// Wait this long, then run another attempt.
    Wait(Duration),
}

/// Classifies an attempt's result, lets the driver decide, and calls `notify`
/// before a wait. Shared by the async and the blocking front ends.
pub(crate) fn settle<T, E, O: Observer>(
    driver: &mut Driver<'_, O>,
    classifier: &mut impl Classify<T, E>,
    notify: &mut impl Notify<E>,
    now: Instant,
    result: Result<T, E>,
) -> Step<T, E> {
    let verdict = classifier.classify(&result);
    let attempts = driver.attempts();
    let next = driver.end_attempt(now, verdict);
    let error_type = driver.last_error();
    let give_up = |reason, result: Result<T, E>| {
        Step::Finished(result.map_err(|e| RetryError::new(reason, attempts, error_type, Some(e))))
    };
    match next {
        // An `Err` the classifier called a success is still an error to the caller.
        Next::Done => give_up(StopReason::Permanent, result),
        Next::Stop(reason) => give_up(reason, result),
        Next::Wait(delay) => {
            if let Err(e) = &result {
                notify.notify(e, delay);
            }
            Step::Wait(delay)
        }
    }
}

/// Ends an attempt cut short by its time limit.
pub(crate) fn settle_timeout<T, E, O: Observer>(
    driver: &mut Driver<'_, O>,
    classifier: &mut impl Classify<T, E>,
    now: Instant,
) -> Step<T, E> {
    let verdict = classifier.timeout();
    let attempts = driver.attempts();
    let next = driver.end_attempt(now, verdict);
    let error_type = driver.last_error();
    match next {
        Next::Wait(delay) => Step::Wait(delay),
        Next::Done => Step::Finished(Err(RetryError::new(StopReason::Permanent, attempts, error_type, None))),
        Next::Stop(reason) => Step::Finished(Err(RetryError::new(reason, attempts, error_type, None))),
    }
}
