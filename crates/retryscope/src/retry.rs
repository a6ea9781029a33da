//! The one builder of a call: `op.retry(policy).when(..).notify(..).await`,
//! or hedged, `op.hedge(hedge_policy).when(..).await`.

use crate::classify::TransientErrors;
use crate::classify::{AnyError, Classify, ClassifyFn, When};
use crate::clock::Clock;
use crate::dependency::DependencyRef;
use crate::driver::hedge::CopyPolicy;
use crate::driver::{Driver, Next, Setup};
use crate::error::RetryError;
use crate::hedge::HedgePolicy;
use crate::observe::{NoObserver, Observer};
use crate::outcome::StopReason;
use crate::overload::Priority;
use crate::pace::Pacer;
use crate::policy::Policy;
use crate::shared::Shared;
use crate::verdict::{ErrorType, Verdict};
use std::time::{Duration, Instant};

/// Adds [`retry`](Retryable::retry) and [`hedge`](Retryable::hedge) to every
/// `FnMut()` closure.
///
/// A closure returning a future is retried with `.await`; a closure returning a
/// `Result` is retried in blocking code with [`call`](Retry::call). A closure
/// returning a future can also be hedged: called once per copy, copies
/// overlapping (see [`hedge`](crate::hedge)).
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
    /// Retries this operation under `policy`, retrying only the errors whose
    /// type says they are transient ([`Transient`](crate::Transient)). For an
    /// error type that does not, say which errors to retry with
    /// [`when`](Retry::when) or [`classify`](Retry::classify), or that every
    /// error is worth a retry with [`retry_any_error`](Retry::retry_any_error).
    #[inline(always)]
    fn retry<'a>(self, policy: Policy) -> Retry<'a, Self> {
        Retry {
            op: self,
            classifier: TransientErrors,
            observer: NoObserver,
            notify: (),
            setup: Setup::new(policy),
            mode: (),
        }
    }

    /// Hedges this operation under `policy`: the same builder as a
    /// [`retry`](Self::retry)'s, in its hedging mode. The policy is taken by
    /// value as `retry` takes its own: pass a clone of the dependency's
    /// (clones share a percentile delay's latencies). Only the errors whose
    /// type says they are transient ([`Transient`](crate::Transient)) are
    /// non-fatal; say otherwise with [`when`](Retry::when) or
    /// [`classify`](Retry::classify).
    ///
    /// The operation must be idempotent: copies run at the same time (see
    /// [`hedge`](crate::hedge)).
    ///
    /// ```
    /// use retryscope::Retryable;
    /// use retryscope::hedge::{HedgeDelay, HedgePolicy};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let policy = HedgePolicy::builder().delay(HedgeDelay::Fixed(Duration::from_millis(20))).build()?;
    /// let answer = (|| async { Ok::<_, std::io::Error>("fast") }).hedge(policy).await?;
    /// assert_eq!(answer, "fast");
    /// # Ok(())
    /// # }
    /// ```
    #[inline(always)]
    fn hedge<'a>(self, policy: HedgePolicy) -> Retry<'a, Self, TransientErrors, NoObserver, (), HedgePolicy> {
        Retry {
            op: self,
            classifier: TransientErrors,
            observer: NoObserver,
            notify: (),
            // The driver's policy: the hedge's deadline and attempt timeout,
            // as many attempts as copies.
            setup: Setup::new(policy.driven()),
            mode: policy,
        }
    }
}

impl<R, F: FnMut() -> R> Retryable<R> for F {}

/// A configured call of one operation: retried, or hedged. Await it (async
/// operations on tokio, feature `tokio`), run it on another runtime with
/// [`with_sleeper`](Self::with_sleeper), or [`call`](Self::call) it (blocking
/// operations, retried only).
///
/// `M` is the mode, what the call carries beyond what every call has (the
/// operation, its classifier, observer, dependency and names, its
/// [`Policy`]): nothing, `()`, for a retry ([`Retryable::retry`]); the
/// [`HedgePolicy`] for a hedged call ([`Retryable::hedge`]). The setters
/// every call has are written once, for every mode; those that only make
/// sense for attempts one after another ([`notify`](Self::notify),
/// [`retry_any_error`](Self::retry_any_error), [`resuming`](Self::resuming),
/// [`seed`](Self::seed), [`call`](Self::call)) exist for a retry only. A
/// type, not a value: each mode's future is the one it always was
/// ([`RetryFuture`](crate::RetryFuture), [`HedgeFuture`](crate::hedge::HedgeFuture)),
/// with nothing in it to say which.
#[must_use = "a retried or hedged call does nothing until awaited (or, retried, called)"]
pub struct Retry<'a, Op, C = TransientErrors, O = NoObserver, N = (), M = ()> {
    pub(crate) op: Op,
    pub(crate) classifier: C,
    pub(crate) observer: O,
    /// Told of each retry: `()` in a hedged call, which waits for no error.
    pub(crate) notify: N,
    pub(crate) setup: Setup<'a>,
    /// `()` for a retry, whose policy is the setup's; a hedged call's
    /// [`HedgePolicy`] (the setup holds the limits it drives the copies by).
    pub(crate) mode: M,
}

/// What every call has, retried or hedged.
impl<'a, Op, C, O, N, M> Retry<'a, Op, C, O, N, M> {
    /// Retries only the errors `predicate` accepts; other errors are permanent.
    /// (A hedged call's non-fatal errors: the next copy goes at once.)
    pub fn when<P>(self, predicate: P) -> Retry<'a, Op, When<P>, O, N, M> {
        self.with_classifier(When(predicate))
    }

    /// Classifies each result with `f`, e.g. to retry an `Ok` HTTP 503 or to pass a
    /// server's `Retry-After` hint (for a hedged call, see the table in
    /// [`hedge`](crate::hedge)).
    pub fn classify<F>(self, f: F) -> Retry<'a, Op, ClassifyFn<F>, O, N, M> {
        self.with_classifier(ClassifyFn(f))
    }

    /// Classifies each result with a [`Classify`] implementation.
    // The builder's steps are always inlined: each moves the whole retry
    // (its setup alone is 200 bytes), and an integration that chains five
    // of them copied it at each step out of line (two copies fewer a tower
    // call once inlined, BENCHMARKS.md).
    #[inline(always)]
    pub fn with_classifier<C2>(self, classifier: C2) -> Retry<'a, Op, C2, O, N, M> {
        Retry {
            op: self.op,
            classifier,
            observer: self.observer,
            notify: self.notify,
            setup: self.setup,
            mode: self.mode,
        }
    }

    /// Reports attempts, waits and the outcome to `observer` (e.g. the
    /// OpenTelemetry instrumentation).
    #[inline(always)]
    pub fn observe<O2: Observer>(self, observer: O2) -> Retry<'a, Op, C, O2, N, M> {
        Retry {
            op: self.op,
            classifier: self.classifier,
            observer,
            notify: self.notify,
            setup: self.setup,
            mode: self.mode,
        }
    }

    /// The dependency called: its name (`retryscope.dependency`) and its
    /// guards, if it has any. Takes a [`Dependency`](crate::dependency::Dependency),
    /// borrowed — its budget, breaker, pacer, concurrency limit and further
    /// guards then guard this call — or a name alone (`&str`, `String`, or
    /// an `Arc<str>` for a `'static` retry). Keep names low-cardinality: a
    /// service or host name, never a URL. A hedged call's copies are admitted
    /// as a retry's attempts are: every copy beyond the first is charged to
    /// the budget as a retry, and the guards are asked before every copy
    /// (see [`hedge`](crate::hedge)).
    ///
    /// ```
    /// use retryscope::dependency::Dependency;
    /// use retryscope::{Policy, RetryBudget, Retryable, StopReason};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // A budget with no retry to spend: no share of requests, no floor.
    /// let no_retries = RetryBudget::builder().ratio(0.0).min_per_second(0).build().unwrap();
    /// let search = Dependency::new("search").with_budget(no_retries);
    /// let error = (|| async { Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset)) })
    ///     .retry(Policy::interactive())
    ///     .dependency(&search)
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!((error.reason(), error.attempts()), (StopReason::BudgetExhausted, 1));
    /// # }
    /// ```
    #[inline(always)]
    pub fn dependency(mut self, dependency: impl Into<DependencyRef<'a>>) -> Self {
        self.setup.dependency = dependency.into();
        self
    }

    /// Names the logical operation (`retryscope.operation`): a `&str` or an
    /// `Arc<str>`.
    #[inline(always)]
    pub fn operation(mut self, operation: impl Into<Shared<'a, str>>) -> Self {
        self.setup.operation = operation.into().into();
        self
    }

    /// How much this call matters when the dependency's guards must refuse
    /// some (critical unless set): sheddable calls are refused first by the
    /// adaptive throttle and the concurrency limit (see
    /// [`Priority`](crate::overload::Priority)).
    #[inline(always)]
    pub fn priority(mut self, priority: Priority) -> Self {
        self.setup.priority = priority;
        self
    }
}

/// What only a retry has: its attempts run one after another.
impl<'a, Op, C, O, N> Retry<'a, Op, C, O, N> {
    /// Retries every error, whatever its type: the choice for an operation
    /// whose every failure is known to be transient. Prefer [`when`](Self::when),
    /// which names the errors worth a retry.
    ///
    /// ```
    /// use retryscope::{Policy, Retryable};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let mut calls = 0;
    /// let answer = (|| {
    ///     calls += 1;
    ///     let result = if calls < 3 { Err("flaky") } else { Ok(42) };
    ///     async move { result }
    /// })
    /// .retry(Policy::interactive())
    /// .retry_any_error()
    /// .await;
    /// assert_eq!((answer.ok(), calls), (Some(42), 3));
    /// # }
    /// ```
    pub fn retry_any_error(self) -> Retry<'a, Op, AnyError, O, N> {
        self.with_classifier(AnyError)
    }

    /// Calls `f(&error, delay)` before each wait that follows an `Err`.
    pub fn notify<N2>(self, f: N2) -> Retry<'a, Op, C, O, N2> {
        Retry {
            op: self.op,
            classifier: self.classifier,
            observer: self.observer,
            notify: f,
            setup: self.setup,
            mode: self.mode,
        }
    }

    /// Runs the call as attempt `number` of work retried across calls — a
    /// job's redelivery after a failure, each delivery one call: the
    /// dependency's guards admit its first attempt as that retry, so a
    /// budget charges it as one (priced as a transient failure's) and
    /// settles it as one, and refuses it, before it runs, when it has none
    /// to spend ([`StopReason::BudgetExhausted`](crate::StopReason::BudgetExhausted)
    /// with no attempt made). The call's own attempts, as its observer
    /// counts them, still start at 1. `0` and `1`: a fresh call (the
    /// default).
    ///
    /// ```
    /// use retryscope::dependency::Dependency;
    /// use retryscope::{Policy, RetryBudget, Retryable, StopReason};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let no_retries = RetryBudget::builder().ratio(0.0).min_per_second(0).build().unwrap();
    /// let inventory = Dependency::new("inventory").with_budget(no_retries);
    /// // A job's third delivery: a retry the budget has no token for.
    /// let error = (|| async { Ok::<_, std::io::Error>(()) })
    ///     .retry(Policy::interactive())
    ///     .dependency(&inventory)
    ///     .resuming(3)
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!((error.reason(), error.attempts()), (StopReason::BudgetExhausted, 0));
    /// # }
    /// ```
    pub fn resuming(mut self, number: u32) -> Self {
        self.setup.resumes = number.max(1);
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
    /// Splits the builder for a front end that reads time from `clock`.
    pub(crate) fn into_parts<'b>(self, clock: &'b dyn Clock) -> (Op, C, N, Driver<'b, O>)
    where
        'a: 'b,
    {
        (self.op, self.classifier, self.notify, Driver::new(self.setup, self.observer, clock))
    }
}

/// What follows an attempt, from the front end's point of view.
pub(crate) enum Step<T, E> {
    /// Hand this back to the caller.
    Finished(Result<T, RetryError<E>>),
    /// Wait this long, then run another attempt. `last` is the failed attempt's
    /// result, kept in case the next attempt is refused.
    Wait { delay: Duration, last: Option<Result<T, E>> },
}

/// Classifies an attempt's result, lets the driver decide, and calls `notify`
/// before a wait. Shared by the async and the blocking front ends. `quiet` is
/// the attempt's [`Started::quiet`](crate::driver::Started::quiet).
#[inline]
pub(crate) fn settle<T, E, O: Observer>(
    driver: &mut Driver<'_, O>,
    classifier: &mut impl Classify<T, E>,
    notify: &mut impl Notify<E>,
    result: Result<T, E>,
    quiet: Option<Instant>,
) -> Step<T, E> {
    let verdict = verdict_of(classifier, &result, driver.pacer());
    settle_verdict(driver, classifier, notify, result, verdict, quiet)
}

/// What `classifier` makes of an attempt's `result`, once `pacer`, the
/// dependency's if it has one, has learned what the result says about pace
/// ([`Classify::pace`]). Each result is classified once: a classifier may
/// count what it sees.
#[inline]
pub(crate) fn verdict_of<T, E>(
    classifier: &mut impl Classify<T, E>,
    result: &Result<T, E>,
    pacer: Option<&Pacer>,
) -> Verdict {
    if let Some(pacer) = pacer {
        learn(pacer, classifier, result);
    }
    match (classifier.classify(result), result) {
        // An `Err` is never a success: the caller gets an error, and the
        // telemetry, the breaker and the budget must say the same.
        (Verdict::Success, Err(_)) => Verdict::permanent(ErrorType::OTHER),
        (verdict, _) => verdict,
    }
}

/// The pacer learns what `result` says about pace: out of line, so that a
/// call without a pacer carries none of it.
#[inline(never)]
fn learn<T, E>(pacer: &Pacer, classifier: &mut impl Classify<T, E>, result: &Result<T, E>) {
    if let Some(signal) = classifier.pace(result) {
        pacer.learn(&signal);
    }
}

/// [`settle`] once the result is classified as `verdict` (by [`verdict_of`]).
#[inline]
pub(crate) fn settle_verdict<T, E, O: Observer>(
    driver: &mut Driver<'_, O>,
    classifier: &mut impl Classify<T, E>,
    notify: &mut impl Notify<E>,
    result: Result<T, E>,
    verdict: Verdict,
    quiet: Option<Instant>,
) -> Step<T, E> {
    if let Some(started) = quiet {
        if verdict == Verdict::Success {
            driver.quiet_success();
            return Step::Finished(final_result(driver, StopReason::Permanent, Some(result)));
        }
        driver.book_quiet_attempt(started);
    }
    conclude(driver, classifier, notify, result, verdict)
}

/// [`settle`] once the attempt is booked: the driver decides.
fn conclude<T, E, O: Observer>(
    driver: &mut Driver<'_, O>,
    classifier: &mut impl Classify<T, E>,
    notify: &mut impl Notify<E>,
    result: Result<T, E>,
    verdict: Verdict,
) -> Step<T, E> {
    match driver.end_attempt(verdict) {
        Next::Done => Step::Finished(final_result(driver, StopReason::Permanent, Some(result))),
        Next::Stop(reason) => Step::Finished(final_result(driver, reason, Some(result))),
        Next::Wait(delay) => {
            if let Err(e) = &result {
                notify.notify(e, delay);
            }
            // Kept through the wait: whatever it holds (a connection) is
            // released first.
            Step::Wait { delay, last: Some(classifier.before_wait(result)) }
        }
        // No retry follows the wait: nobody is notified of one.
        Next::StopAfter(delay) => Step::Wait { delay, last: Some(classifier.before_wait(result)) },
    }
}

/// Ends an attempt cut short by its time limit; `quiet` as for [`settle`].
pub(crate) fn settle_timeout<T, E, O: Observer>(
    driver: &mut Driver<'_, O>,
    classifier: &mut impl Classify<T, E>,
    quiet: Option<Instant>,
) -> Step<T, E> {
    if let Some(started) = quiet {
        driver.book_quiet_attempt(started);
    }
    let verdict = classifier.timeout();
    match driver.end_attempt(verdict) {
        Next::Wait(delay) | Next::StopAfter(delay) => Step::Wait { delay, last: None },
        Next::Done => Step::Finished(final_result(driver, StopReason::Permanent, None)),
        Next::Stop(reason) => Step::Finished(final_result(driver, reason, None)),
    }
}

/// The operation's final result, once the engine stops for `reason` with `last` as the
/// last attempt's result: an `Ok` value as it came (a retryable response whose
/// retries ran out is still the server's answer), an error wrapped with why.
pub(crate) fn final_result<T, E, O: Observer>(
    driver: &Driver<'_, O>,
    reason: StopReason,
    last: Option<Result<T, E>>,
) -> Result<T, RetryError<E>> {
    let error = |last| RetryError::new(reason, driver.attempts(), driver.last_error(), last);
    match last {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(error(Some(e))),
        None => Err(error(None)),
    }
}
