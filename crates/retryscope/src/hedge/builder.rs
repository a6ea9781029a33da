//! The hedge builder: `op.hedge(policy).dependency(&dep).when(..).await`.

use super::future::{Copies, HedgeFuture};
use super::policy::HedgePolicy;
use crate::classify::TransientErrors;
use crate::classify::{Classify, ClassifyFn, When};
use crate::dependency::DependencyRef;
use crate::driver::Setup;
use crate::driver::hedge::{CopyPolicy, HedgeDriver};
use crate::observe::{NoObserver, Observer};
use crate::overload::Priority;
use crate::shared::Shared;
use crate::sleep::Sleeper;
use std::future::Future;

/// Adds [`hedge`](Hedgeable::hedge) to every `FnMut()` closure that returns a
/// future: the operation factory, called once per copy.
///
/// The factory must be idempotent: copies run at the same time (see
/// [the module](super)).
///
/// ```
/// use retryscope::hedge::{HedgeDelay, HedgePolicy, Hedgeable};
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
pub trait Hedgeable<R>: FnMut() -> R + Sized {
    /// Hedges this operation under `policy`, taken by value as
    /// [`retry`](crate::Retryable::retry) takes its policy: pass a clone of
    /// the dependency's policy (clones share a percentile delay's
    /// latencies). Only the errors whose type says they are transient
    /// ([`Transient`](crate::Transient)) are non-fatal; say otherwise with
    /// [`when`](Hedge::when) or [`classify`](Hedge::classify).
    fn hedge<'a>(self, policy: HedgePolicy) -> Hedge<'a, Self> {
        Hedge {
            op: self,
            classifier: TransientErrors,
            observer: NoObserver,
            setup: Setup::new(policy.driven()),
            policy,
        }
    }
}

impl<R, F: FnMut() -> R> Hedgeable<R> for F {}

/// A configured hedged call. Await it (on tokio, feature `tokio`), or run it
/// on another runtime with [`with_sleeper`](Self::with_sleeper).
#[must_use = "a hedged call does nothing until awaited"]
pub struct Hedge<'a, Op, C = TransientErrors, O = NoObserver> {
    op: Op,
    classifier: C,
    observer: O,
    /// The guards and names, as a retry's.
    setup: Setup<'a>,
    policy: HedgePolicy,
}

impl<'a, Op, C, O> Hedge<'a, Op, C, O> {
    /// Makes the errors `predicate` accepts non-fatal (the next copy goes at
    /// once); other errors are fatal and end the call.
    pub fn when<P>(self, predicate: P) -> Hedge<'a, Op, When<P>, O> {
        self.with_classifier(When(predicate))
    }

    /// Classifies each copy's result with `f` (see the table in
    /// [the module](super)).
    pub fn classify<F>(self, f: F) -> Hedge<'a, Op, ClassifyFn<F>, O> {
        self.with_classifier(ClassifyFn(f))
    }

    /// Classifies each copy's result with a [`Classify`] implementation.
    pub fn with_classifier<C2>(self, classifier: C2) -> Hedge<'a, Op, C2, O> {
        Hedge { op: self.op, classifier, observer: self.observer, setup: self.setup, policy: self.policy }
    }

    /// Reports every copy and the outcome to `observer`.
    pub fn observe<O2: Observer>(self, observer: O2) -> Hedge<'a, Op, C, O2> {
        Hedge { op: self.op, classifier: self.classifier, observer, setup: self.setup, policy: self.policy }
    }

    /// The dependency called: its name and its guards, as
    /// [`Retry::dependency`](crate::Retry::dependency) takes it. Its budget
    /// is charged every copy beyond the first, as a retry would be (a
    /// refusal sends no further copies); its breaker, pacer, concurrency
    /// limit and further guards are asked before every copy, as a retry's
    /// are before every attempt (see [the module](super)).
    #[inline]
    pub fn dependency(mut self, dependency: impl Into<DependencyRef<'a>>) -> Self {
        self.setup.dependency = dependency.into();
        self
    }

    /// Names the logical operation (`retryscope.operation`).
    pub fn operation(mut self, operation: impl Into<Shared<'a, str>>) -> Self {
        self.setup.operation = operation.into().into();
        self
    }

    /// How much this call matters when the dependency's guards must refuse
    /// some (critical unless set): sheddable calls are refused first by the
    /// adaptive throttle and the concurrency limit (see
    /// [`Priority`](crate::overload::Priority)).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.setup.priority = priority;
        self
    }
}

/// Awaiting a hedged call waits on tokio's timer.
#[cfg(feature = "tokio")]
impl<'a, Op, Fut, T, E, C, O> std::future::IntoFuture for Hedge<'a, Op, C, O>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    O: Observer,
{
    type Output = Result<T, crate::error::RetryError<E>>;
    type IntoFuture = HedgeFuture<'a, Op, Fut, C, O, crate::TokioSleeper>;

    #[inline]
    fn into_future(self) -> Self::IntoFuture {
        self.with_sleeper(crate::TokioSleeper)
    }
}

impl<'a, Op, Fut, T, E, C, O> Hedge<'a, Op, C, O>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    O: Observer,
{
    /// The hedged call as a future that times its delays and limits with
    /// `sleeper` (see [`Retry::with_sleeper`](crate::Retry::with_sleeper)).
    #[inline]
    pub fn with_sleeper<S: Sleeper>(self, sleeper: S) -> HedgeFuture<'a, Op, Fut, C, O, S> {
        let driver = HedgeDriver::new(self.setup, self.policy, self.observer, sleeper.clock());
        HedgeFuture::new(self.op, self.classifier, sleeper, Copies::new(driver))
    }
}
