//! The hook through which the engine reports what it does.
//!
//! The engine knows nothing of OpenTelemetry. It reports each logical operation
//! to an [`Observer`], which starts a per-operation [`OperationObserver`]; that
//! one hears about every attempt, every wait and the final outcome. The
//! `retryscope-otel` crate implements these traits to emit spans and metrics;
//! tests implement them to record events.
//!
//! Every attempt's future is polled inside its [`AttemptScope`], so an
//! implementation can make a tracing span current for exactly the attempt's
//! duration (and code inside the attempt, such as an HTTP client injecting
//! `traceparent`, sees it). The call that builds an async attempt's future
//! (the operation closure) runs in [`AttemptScope::in_build_scope`]: inside
//! the scope too unless the implementation says its contract covers only the
//! polls. A blocking attempt runs entirely inside its scope.

use crate::outcome::{Outcome, StopReason};
pub use crate::pace::signal::Held;
use crate::verdict::{DelaySource, ErrorType};
use std::time::Duration;

/// Starts observing logical operations. Implemented by instrumentation.
pub trait Observer {
    /// Per-operation state.
    type Operation: OperationObserver;

    /// Whether this observer uses the durations it is given. An observer that
    /// ignores them sets `false`, so that an operation without a deadline or
    /// timeout never reads the clock.
    const TIMED: bool = true;

    /// Whether this observer does nothing at all with what it is told, as
    /// [`NoObserver`]. For a silent observer, and an operation without a
    /// breaker, the engine starts the first attempt with only what must come
    /// first (a budget counts the request) and books it only if it fails: an
    /// operation that succeeds at once skips the bookkeeping, and the observer
    /// hears nothing of it. Leave it `false` unless every method is a no-op.
    const SILENT: bool = false;

    /// A logical operation starts (before its first attempt).
    fn start(&self, operation: &OperationInfo<'_>) -> Self::Operation;

    /// Whether this observer, as it is now, uses the durations it is given:
    /// [`TIMED`](Self::TIMED) unless it says otherwise. An observer that may
    /// be absent at run time says `false` while it is (an `Option` that is
    /// `None`, as the HTTP integrations' telemetry is when nothing would hear
    /// it), so that a call it would not hear reads the clock only for what
    /// else needs the time: a deadline, a timeout, a concurrency limit. Asked
    /// once a call, before its first attempt is settled; only a `TIMED`
    /// observer is asked.
    fn is_timed(&self) -> bool {
        Self::TIMED
    }
}

/// Observes one logical operation: its attempts, its waits and how it ended.
pub trait OperationObserver {
    /// Per-attempt state, within which the attempt runs.
    type Attempt: AttemptScope;

    /// An attempt starts. Attempts are numbered from 1.
    fn attempt_started(&mut self, attempt: &AttemptStart) -> Self::Attempt;

    /// The attempt ended; `scope` is the value `attempt_started` returned.
    fn attempt_finished(&mut self, scope: Self::Attempt, attempt: &AttemptEnd);

    /// The engine is about to wait before the next attempt.
    fn waiting(&mut self, wait: &Wait);

    /// The pacer holds the next attempt back (see [`pace`](crate::pace)):
    /// before the first attempt, or as part of a retry's wait, reported just
    /// before [`waiting`](Self::waiting), whose delay includes the hold.
    fn held(&mut self, held: &Held) {
        let _ = held;
    }

    /// The operation ended. Called exactly once, also when the caller drops the
    /// operation (with [`Outcome::Cancelled`]).
    fn finished(self, finish: &Finish);
}

/// Runs the code of one attempt (each poll of its future) in a context.
pub trait AttemptScope {
    /// Runs `f` in this attempt's context. The default runs it as is.
    fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Runs `f`, the call that builds an async attempt's future (the
    /// operation closure), before its first poll. The default runs it in
    /// [`in_scope`](Self::in_scope), so code in the closure before its
    /// future sees the attempt's context as the future's polls do. An
    /// implementation whose contract covers only the polls can run `f` as is
    /// and save entering its context once per attempt (a `tracing` span's
    /// enter and exit: about 2,200 instructions with tracing-opentelemetry):
    /// an `async` body runs only when polled anyway.
    fn in_build_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        self.in_scope(f)
    }
}

impl AttemptScope for () {}

/// What is being called: low-cardinality labels for telemetry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperationInfo<'a> {
    /// The dependency called (`retryscope.dependency`), e.g. a host name.
    pub dependency: &'a str,
    /// An optional logical operation name (`retryscope.operation`).
    pub operation: Option<&'a str>,
    /// The policy's attempt limit: attempt numbers never exceed it. For a
    /// hedged call, its copy limit.
    pub max_attempts: u32,
    /// Whether the attempts are hedged copies that overlap in time (see
    /// [`hedge`](crate::hedge)) rather than retries that follow each other.
    pub hedged: bool,
    /// The call's priority ([`Retry::priority`](crate::Retry::priority)):
    /// which calls the overload guards refuse first.
    pub priority: crate::overload::Priority,
}

/// An attempt is starting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptStart {
    /// The attempt number, from 1.
    pub number: u32,
    /// For a retry, the `error.type` of the failure that caused it; for a
    /// hedged copy sent at once after a non-fatal failure, that failure's.
    pub retry_of: Option<ErrorType>,
    /// Whether this attempt is a copy of a hedged call (every copy is, the
    /// first included): copies overlap, and end as a [`HedgeOutcome`].
    pub hedge: bool,
    /// How long the attempt may run from its start: the policy's attempt
    /// timeout cut to what is left of the deadline; `None` when neither
    /// bounds it. What an integration derives the attempt's own limits from
    /// (its connect's, say).
    pub limit: Option<Duration>,
}

/// An attempt has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptEnd {
    /// The attempt number, from 1.
    pub number: u32,
    /// How long the attempt ran.
    pub duration: Duration,
    /// The failure's `error.type`, or `None` on success (and for a hedged
    /// copy that was cancelled: it did not fail).
    pub error: Option<ErrorType>,
    /// For a copy of a hedged call, how it ended; `None` for a retry's attempt.
    pub hedge: Option<HedgeOutcome>,
}

/// How one copy of a hedged call ended (`retryscope.hedge.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HedgeOutcome {
    /// Its answer was the call's: the first acceptable result.
    Won,
    /// It was dropped before it answered: another copy won, a fatal failure
    /// or the deadline ended the call, or the caller dropped it. Not a failure.
    Cancelled,
    /// It failed (a non-fatal failure, which let the next copy go, a fatal
    /// one, or its attempt timeout).
    Failed,
}

impl HedgeOutcome {
    /// The attribute value used in telemetry: `won`, `cancelled` or `failed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            HedgeOutcome::Won => "won",
            HedgeOutcome::Cancelled => "cancelled",
            HedgeOutcome::Failed => "failed",
        }
    }
}

impl std::fmt::Display for HedgeOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The engine will wait before the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// The attempt that will run after the wait.
    pub next_attempt: u32,
    /// How long the engine waits.
    pub delay: Duration,
    /// Where the delay came from.
    pub source: DelaySource,
    /// The failure that caused the retry.
    pub error: ErrorType,
}

/// A logical operation has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finish {
    /// How it ended.
    pub outcome: Outcome,
    /// Why the engine stopped, unless it succeeded or was cancelled.
    pub reason: Option<StopReason>,
    /// Attempts started.
    pub attempts: u32,
    /// Time from the start to the end, waits included.
    pub duration: Duration,
}

/// Observes nothing, at no cost. The default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoObserver;

impl Observer for NoObserver {
    type Operation = NoObserver;

    const TIMED: bool = false;
    const SILENT: bool = true;

    fn start(&self, _: &OperationInfo<'_>) -> NoObserver {
        NoObserver
    }
}

impl OperationObserver for NoObserver {
    type Attempt = ();

    fn attempt_started(&mut self, _: &AttemptStart) {}

    fn attempt_finished(&mut self, _: (), _: &AttemptEnd) {}

    fn waiting(&mut self, _: &Wait) {}

    fn finished(self, _: &Finish) {}
}

impl<O: Observer + ?Sized> Observer for &O {
    type Operation = O::Operation;

    const TIMED: bool = O::TIMED;
    const SILENT: bool = O::SILENT;

    fn start(&self, operation: &OperationInfo<'_>) -> Self::Operation {
        (**self).start(operation)
    }

    fn is_timed(&self) -> bool {
        (**self).is_timed()
    }
}

impl<O: Observer + ?Sized> Observer for std::sync::Arc<O> {
    type Operation = O::Operation;

    const TIMED: bool = O::TIMED;
    const SILENT: bool = O::SILENT;

    fn start(&self, operation: &OperationInfo<'_>) -> Self::Operation {
        (**self).start(operation)
    }

    fn is_timed(&self) -> bool {
        (**self).is_timed()
    }
}

/// Two observers side by side: both hear every event, `A` first.
///
/// ```
/// use retryscope::observe::NoObserver;
/// use retryscope::{Policy, Retryable};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let r = (|| async { Ok::<_, ()>(1) }).retry(Policy::interactive()).retry_any_error().observe((NoObserver, NoObserver)).await;
/// assert_eq!(r.unwrap(), 1);
/// # }
/// ```
impl<A: Observer, B: Observer> Observer for (A, B) {
    type Operation = (A::Operation, B::Operation);

    const TIMED: bool = A::TIMED || B::TIMED;
    const SILENT: bool = A::SILENT && B::SILENT;

    fn start(&self, operation: &OperationInfo<'_>) -> Self::Operation {
        (self.0.start(operation), self.1.start(operation))
    }

    fn is_timed(&self) -> bool {
        (A::TIMED && self.0.is_timed()) || (B::TIMED && self.1.is_timed())
    }
}

impl<A: OperationObserver, B: OperationObserver> OperationObserver for (A, B) {
    type Attempt = (A::Attempt, B::Attempt);

    fn attempt_started(&mut self, attempt: &AttemptStart) -> Self::Attempt {
        (self.0.attempt_started(attempt), self.1.attempt_started(attempt))
    }

    fn attempt_finished(&mut self, scope: Self::Attempt, attempt: &AttemptEnd) {
        self.0.attempt_finished(scope.0, attempt);
        self.1.attempt_finished(scope.1, attempt);
    }

    fn waiting(&mut self, wait: &Wait) {
        self.0.waiting(wait);
        self.1.waiting(wait);
    }

    fn held(&mut self, held: &Held) {
        self.0.held(held);
        self.1.held(held);
    }

    fn finished(self, finish: &Finish) {
        self.0.finished(finish);
        self.1.finished(finish);
    }
}

impl<A: AttemptScope, B: AttemptScope> AttemptScope for (A, B) {
    fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        self.0.in_scope(|| self.1.in_scope(f))
    }

    fn in_build_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        self.0.in_build_scope(|| self.1.in_build_scope(f))
    }
}

/// An optional observer: `None` observes nothing.
impl<O: Observer> Observer for Option<O> {
    type Operation = Option<O::Operation>;

    const TIMED: bool = O::TIMED;
    const SILENT: bool = O::SILENT;

    fn start(&self, operation: &OperationInfo<'_>) -> Self::Operation {
        self.as_ref().map(|o| o.start(operation))
    }

    fn is_timed(&self) -> bool {
        self.as_ref().is_some_and(O::is_timed)
    }
}

impl<O: OperationObserver> OperationObserver for Option<O> {
    type Attempt = Option<O::Attempt>;

    fn attempt_started(&mut self, attempt: &AttemptStart) -> Self::Attempt {
        self.as_mut().map(|o| o.attempt_started(attempt))
    }

    fn attempt_finished(&mut self, scope: Self::Attempt, attempt: &AttemptEnd) {
        if let (Some(o), Some(scope)) = (self.as_mut(), scope) {
            o.attempt_finished(scope, attempt);
        }
    }

    fn waiting(&mut self, wait: &Wait) {
        if let Some(o) = self.as_mut() {
            o.waiting(wait);
        }
    }

    fn held(&mut self, held: &Held) {
        if let Some(o) = self.as_mut() {
            o.held(held);
        }
    }

    fn finished(self, finish: &Finish) {
        if let Some(o) = self {
            o.finished(finish);
        }
    }
}

impl<A: AttemptScope> AttemptScope for Option<A> {
    fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        match self {
            Some(scope) => scope.in_scope(f),
            None => f(),
        }
    }

    fn in_build_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        match self {
            Some(scope) => scope.in_build_scope(f),
            None => f(),
        }
    }
}

/// Remembers why the engine stopped and after how many attempts: for callers
/// whose result carries no error to say so — an integration that hands back the
/// server's last response when retries ran out, say. Read it with
/// [`stopped`](Self::stopped) after the call.
///
/// `&StopSlot` is the observer of a call borrowed on the caller's stack;
/// `Arc<StopSlot>` of one that must own what it observes (a spawned or
/// `'static` future: clones share what they record). Pair it with another
/// observer as a tuple.
///
/// ```
/// use retryscope::observe::StopSlot;
/// use retryscope::{Policy, Retryable, StopReason};
///
/// let stop = StopSlot::default();
/// let _ = (|| Err::<(), _>("busy")).retry(Policy::interactive()).retry_any_error().observe(&stop).call_with(
///     &retryscope::clock::ManualClock::new(),
///     |_| {},
/// );
/// assert_eq!(stop.stopped(), Some((StopReason::AttemptsExhausted, 4)));
/// ```
#[derive(Debug, Default)]
pub struct StopSlot(std::sync::Mutex<Option<(StopReason, u32)>>);

impl StopSlot {
    /// Why the engine stopped and after how many attempts; `None` before the
    /// operation ended, or when it succeeded.
    pub fn stopped(&self) -> Option<(StopReason, u32)> {
        // A poisoned lock only means a panic while writing a `Copy` value:
        // whatever is there is whole.
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self, finish: &Finish) {
        let stopped = finish.reason.map(|reason| (reason, finish.attempts));
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = stopped;
    }
}

impl<'a> Observer for &'a StopSlot {
    type Operation = &'a StopSlot;

    const TIMED: bool = false;

    fn start(&self, _: &OperationInfo<'_>) -> &'a StopSlot {
        self
    }
}

impl OperationObserver for &StopSlot {
    type Attempt = ();

    fn attempt_started(&mut self, _: &AttemptStart) {}

    fn attempt_finished(&mut self, _: (), _: &AttemptEnd) {}

    fn waiting(&mut self, _: &Wait) {}

    fn finished(self, finish: &Finish) {
        self.record(finish);
    }
}

/// The owned form, for a call whose future must be `'static`:
///
/// ```
/// use retryscope::observe::StopSlot;
/// use retryscope::{Policy, Retryable, StopReason};
/// use std::sync::Arc;
///
/// let stop = Arc::new(StopSlot::default());
/// let _ = (|| Err::<(), _>("busy")).retry(Policy::interactive()).retry_any_error().observe(Arc::clone(&stop)).call_with(
///     &retryscope::clock::ManualClock::new(),
///     |_| {},
/// );
/// assert_eq!(stop.stopped(), Some((StopReason::AttemptsExhausted, 4)));
/// ```
impl Observer for std::sync::Arc<StopSlot> {
    type Operation = std::sync::Arc<StopSlot>;

    const TIMED: bool = false;

    fn start(&self, _: &OperationInfo<'_>) -> std::sync::Arc<StopSlot> {
        std::sync::Arc::clone(self)
    }
}

impl OperationObserver for std::sync::Arc<StopSlot> {
    type Attempt = ();

    fn attempt_started(&mut self, _: &AttemptStart) {}

    fn attempt_finished(&mut self, _: (), _: &AttemptEnd) {}

    fn waiting(&mut self, _: &Wait) {}

    fn finished(self, finish: &Finish) {
        self.record(finish);
    }
}
