//! The call recipe: what every integration does between the caller's request
//! and its answer, written once. An integration brings what only it knows —
//! how to send one attempt, how to read its answer, and the shape of what
//! its caller gets — and walks these steps in order:
//!
//! 1. [`Drive::http`] (or, for gRPC, its service config): retried or hedged,
//!    under which policy and priority, within the caller's timeout;
//! 2. [`Ending::begin`]: the layer above (if any), the outcome slot a
//!    fallback needs, the clock a fallback's remaining time is read from;
//! 3. [`Drive::run`]: the attempts, under the dependency's guards;
//! 4. [`Ending::after`]: the layer above is told how the call ended, and the
//!    fallback to run, if one answers;
//! 5. [`Ending::settle`]: the outcome recorded once, with or without the
//!    fallback.

use crate::configured::CallConfig;
use crate::fallback::{Chosen, Fallbacks};
use crate::options::RetryOptions;
use http::{HeaderMap, Method};
use retryscope::classify::{Classify, TransientErrors};
use retryscope::dependency::Dependency;
use retryscope::hedge::{HedgeFuture, HedgePolicy};
use retryscope::observe::{NoObserver, Observer};
use retryscope::overload::Priority;
use retryscope::{Policy, Retry, RetryError, RetryFuture, Retryable, Shared, StopReason, TokioSleeper};
use retryscope_otel::{OutcomeSlot, Upstream};
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// How a call's attempts run: retried one after another under a policy, or
/// hedged (copies overlap, the first acceptable answer wins); and at which
/// priority.
#[derive(Debug, Clone)]
pub struct Drive {
    how: How,
    priority: Priority,
}

#[derive(Debug, Clone)]
enum How {
    Retry(Policy),
    Hedge(HedgePolicy),
}

impl Drive {
    /// Retried under `policy`.
    pub fn retry(policy: Policy, priority: Priority) -> Self {
        Self { how: How::Retry(policy), priority }
    }

    /// Hedged under `policy`.
    pub fn hedge(policy: HedgePolicy, priority: Priority) -> Self {
        Self { how: How::Hedge(policy), priority }
    }

    /// An HTTP call's drive, decided here and nowhere else. With a file
    /// (`configured`), the file's policy, hedging and priority (the
    /// request's own policy or priority over them); without, the request's
    /// policy else `policy`, and the dependency's own hedging policy (its
    /// percentile delay learns from that server alone) unless the request
    /// brings a policy. Hedged only with an idempotent method
    /// (`may_hedge`: a keyed POST is retried, not
    /// hedged) and a body that can be sent again (every copy needs it).
    /// Either way within the caller's `timeout`, which bounds the whole
    /// call: attempts and waits together.
    #[inline]
    pub fn http(
        policy: &Policy,
        configured: Option<&CallConfig>,
        guards: &Dependency,
        options: &RetryOptions,
        method: &Method,
        replayable: bool,
        timeout: Option<Duration>,
    ) -> Self {
        let (policy, hedge, priority) = match configured {
            // The request's own policy, read once: it wins over the file's
            // and hedges nothing.
            Some(c) => match options.policy_override() {
                None => (c.settings().policy(), c.settings().hedge_policy(), c.priority(options)),
                Some(_) => (c.policy(options), None, c.priority(options)),
            },
            // Copied only here: a configured call never reads the
            // builder's policy (a hundred-odd bytes).
            None => (
                options.policy_override().unwrap_or(*policy),
                guards.hedge().filter(|_| options.policy_override().is_none()).cloned(),
                options.priority_class(),
            ),
        };
        match hedge.filter(|_| replayable && crate::safety::may_hedge(method)) {
            Some(hedge) => match timeout {
                Some(timeout) => Self::hedge(hedge.with_deadline_within(timeout), priority),
                None => Self::hedge(hedge, priority),
            },
            None => {
                Self::retry(timeout.map_or(policy, |timeout| policy.with_deadline_within(timeout)), priority)
            }
        }
    }

    /// Whether the copies overlap.
    pub fn is_hedged(&self) -> bool {
        matches!(self.how, How::Hedge(_))
    }

    /// The whole call's deadline, if it has one.
    pub fn deadline(&self) -> Option<Duration> {
        match &self.how {
            How::Retry(policy) => policy.deadline(),
            How::Hedge(policy) => policy.deadline(),
        }
    }

    /// Runs the call's attempts (`attempt` makes each; a hedge's copies
    /// overlap), judged by `classifier` and reported to `observer`, under
    /// the dependency's `guards`, as `operation` if named.
    ///
    /// Not an `async fn`: its future would hold its arguments beside the
    /// engine's future made of them (some 700 bytes, copied with every move
    /// of the call's future).
    // Inlined into the call's future so that the engine's future is built
    // where it is awaited: returned by a call, it was copied twice more and
    // the whole call cost ~350 instructions more (BENCHMARKS.md, eighth round).
    #[inline(always)]
    pub fn run<'g, F, Fut, T, E, C, O>(
        self,
        guards: &'g Dependency,
        attempt: F,
        classifier: C,
        observer: O,
        operation: Option<impl Into<Shared<'g, str>>>,
    ) -> Running<'g, F, Fut, C, O>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        C: Classify<T, E>,
        O: Observer,
    {
        match self.how {
            How::Hedge(policy) => {
                let hedge =
                    configure(attempt.hedge(policy), self.priority, guards, classifier, observer, operation);
                Running { how: Runs::Hedged { future: Box::pin(hedge.into_future()) } }
            }
            How::Retry(policy) => {
                let retry =
                    configure(attempt.retry(policy), self.priority, guards, classifier, observer, operation);
                Running { how: Runs::Retried { future: retry.into_future() } }
            }
        }
    }
}

/// The setters every call has, retried or hedged (`M`, the builder's mode),
/// written once for both.
// Always inlined, as the engine's setters are: each step moves the whole
// builder, and out of line every call would copy it once more.
#[inline(always)]
fn configure<'g, F, C, O, M>(
    call: Retry<'g, F, TransientErrors, NoObserver, (), M>,
    priority: Priority,
    guards: &'g Dependency,
    classifier: C,
    observer: O,
    operation: Option<impl Into<Shared<'g, str>>>,
) -> Retry<'g, F, C, O, (), M>
where
    O: Observer,
{
    let call = call.priority(priority).with_classifier(classifier).observe(observer).dependency(guards);
    match operation {
        Some(operation) => call.operation(operation),
        None => call,
    }
}

pin_project_lite::pin_project! {
    /// A call's attempts, running: [`Drive::run`]'s future.
    pub struct Running<'g, F, Fut, C, O>
    where
        Fut: Future,
        O: Observer,
    {
        #[pin]
        how: Runs<'g, F, Fut, C, O>,
    }
}

pin_project_lite::pin_project! {
    #[project = RunsProj]
    enum Runs<'g, F, Fut, C, O>
    where
        Fut: Future,
        O: Observer,
    {
        Retried { #[pin] future: RetryFuture<'g, F, Fut, C, O, (), TokioSleeper> },
        // Boxed: a hedge's future is a third larger than a retry's, and every
        // call's future (and each move of it) would otherwise be as large as
        // a hedged one's.
        Hedged { future: Pin<Box<HedgeFuture<'g, F, Fut, C, O, TokioSleeper>>> },
    }
}

impl<F, Fut, T, E, C, O> Future for Running<'_, F, Fut, C, O>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Classify<T, E>,
    O: Observer,
{
    type Output = Result<T, RetryError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().how.project() {
            RunsProj::Retried { future } => future.poll(cx),
            RunsProj::Hedged { future } => future.as_mut().poll(cx),
        }
    }
}

/// How a call ends, after its attempts: the layer above is told (so that
/// the server this call runs in tells its own caller not to retry), a
/// fallback may answer, and the outcome is recorded once.
#[derive(Debug)]
pub struct Ending {
    upstream: Option<Upstream>,
    /// Holds the call's outcome back until it is known whether a fallback
    /// answered: only a client with fallbacks has one (an allocation).
    slot: Option<OutcomeSlot>,
    /// When the call began and its deadline, for a fallback's remaining
    /// time: a client without fallbacks takes no clock reading.
    began: Option<(tokio::time::Instant, Option<Duration>)>,
}

impl Ending {
    /// Before the first attempt: `fallbacks` says whether the client has any;
    /// `deadline` is the whole call's ([`Drive::deadline`]).
    pub fn begin(fallbacks: bool, deadline: Option<Duration>) -> Self {
        Self {
            upstream: Upstream::current(),
            slot: fallbacks.then(OutcomeSlot::new),
            began: fallbacks.then(|| (tokio::time::Instant::now(), deadline)),
        }
    }

    /// The request this call is made for, where it runs inside a served
    /// request (`Upstream::scope`).
    pub fn upstream(&self) -> Option<&Upstream> {
        self.upstream.as_ref()
    }

    /// The slot to give the call's observer
    /// ([`with_outcome_slot`](retryscope_otel::OtelObserver::with_outcome_slot)).
    pub fn outcome_slot(&self) -> Option<OutcomeSlot> {
        self.slot.clone()
    }

    /// After the attempts: tells the layer above how the call ended
    /// (`stop`, and the answer's `headers` if one came), and returns the
    /// fallback `dependency` runs, if one answers, with the time left of
    /// the call's deadline.
    pub fn after<'f>(
        &self,
        fallbacks: Option<&'f Fallbacks>,
        dependency: &str,
        configured: Option<&CallConfig>,
        stop: Option<(StopReason, u32)>,
        headers: Option<&HeaderMap>,
    ) -> Option<(Chosen<'f>, Option<Duration>)> {
        if let Some(upstream) = &self.upstream {
            upstream.client_finished(stop, headers);
        }
        let (began, deadline) = self.began?;
        let chosen = fallbacks?.choose(dependency, stop, configured)?;
        Some((chosen, crate::fallback::remaining(deadline, began)))
    }

    /// Records the call's outcome: the fallback's if it `served`, else the
    /// engine's.
    pub fn settle(self, served: bool) {
        if let Some(slot) = &self.slot {
            slot.settle(served);
        }
    }
}
