//! A guard: one concern that admits a call's attempts and hears how they
//! ended, plugged into a call as a value.
//!
//! The engine asks a [`Guard`] before each attempt may go and tells it how
//! each ended; the guard keeps whatever state it needs between the two. Every
//! guard a dependency has is one: its retry budget (any
//! [`Budget`](crate::budget::Budget)), its
//! [`CircuitBreaker`](crate::CircuitBreaker), its [`Pacer`](crate::pace::Pacer),
//! its [`ConcurrencyLimiter`](crate::overload::ConcurrencyLimiter), and any
//! further one — Envoy's [`InFlightBudget`](crate::budget::InFlightBudget), an
//! [`AdaptiveThrottle`](crate::overload::AdaptiveThrottle), your own. A new
//! concern — a hedge budget, a per-endpoint limit — is then one type
//! implementing this trait, handed to
//! [`Dependency::with_guard`](crate::dependency::Dependency::with_guard) and
//! put on calls with the dependency, with nothing else in the engine or the
//! integrations to change.
//!
//! The engine keeps these promises, whatever happens to the call (an error,
//! a refusal, the future dropped mid-wait):
//!
//! - [`call_started`](Guard::call_started) once per call, before its first
//!   admission; [`call_finished`](Guard::call_finished) once, after its last
//!   settlement.
//! - Every attempt the guard admitted ([`Admission::Go`] or
//!   [`Admission::Hold`]) is settled once ([`settle`](Guard::settle)) with its
//!   permit, with [`End::NotSent`] when it never went (the call's deadline,
//!   another guard's refusal, the call dropped while the retry waited).
//! - A retry is admitted when it is *planned*, at the failure, before its
//!   backoff: a refusal then costs the caller no wait, and the retry counts
//!   as the guard's from its plan to its end (as Envoy counts a retry from
//!   its scheduling). A first attempt and a hedge's further copy are
//!   admitted when they are due. Every admitted attempt is then asked once
//!   more as it is sent ([`send`](Guard::send)), and again after each hold.
//!
//! Guards compose as values: a pair of guards is a guard (both asked, in
//! order; a refusal by the second settles the first's admission as not
//! sent), as is `Option<G>`, `&G` and `Arc<G>`. A dependency's guards are one
//! such composition: the pacer, the concurrency limit, the breaker, the
//! further guards, the budget, asked in that order.
//!
//! ```
//! use retryscope::guard::{Admission, Attempt, End, Guard};
//! use retryscope::StopReason;
//! use std::sync::atomic::{AtomicU32, Ordering};
//!
//! /// Lets at most one retry of any call be planned or running at once.
//! #[derive(Default)]
//! struct OneRetry(AtomicU32);
//!
//! impl Guard for OneRetry {
//!     // Nothing kept per attempt.
//!     type Permit = ();
//!
//!     fn admit(&self, attempt: Attempt) -> Admission<()> {
//!         if attempt.is_first() {
//!             return Admission::Go(());
//!         }
//!         match self.0.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire) {
//!             Ok(_) => Admission::Go(()),
//!             Err(_) => Admission::Refuse(StopReason::BudgetExhausted),
//!         }
//!     }
//!
//!     fn settle(&self, attempt: Attempt, (): (), _end: End) {
//!         if !attempt.is_first() {
//!             self.0.store(0, Ordering::Release);
//!         }
//!     }
//! }
//!
//! let guard = OneRetry::default();
//! let retry = Attempt::retry(2);
//! assert_eq!(guard.admit(retry), Admission::Go(()));
//! assert_eq!(guard.admit(Attempt::retry(2)), Admission::Refuse(StopReason::BudgetExhausted));
//! guard.settle(retry, (), End::Failed);
//! assert_eq!(guard.admit(Attempt::retry(3)), Admission::Go(()));
//! ```

use crate::budget::RetryCause;
use crate::outcome::StopReason;
use crate::overload::Priority;
use crate::pace::HoldSource;
use std::sync::Arc;
use std::time::Duration;

/// Admits a call's attempts and hears how each ended. Shared across tasks
/// and threads: every method must be cheap and must not block.
///
/// An attempt is asked twice: when it is planned ([`admit`](Self::admit): a
/// retry at the failure, before its backoff; a first attempt or a hedge's
/// copy when it is due) and when it is about to be sent
/// ([`send`](Self::send): after its backoff and any hold). What the guard
/// keeps for one attempt between the two and until its end — a probe slot,
/// a slot of a limit, what a budget charged — is its [`Permit`](Self::Permit):
/// the engine holds it and hands it back at [`settle`](Self::settle).
pub trait Guard: Send + Sync {
    /// What an admitted attempt carries for this guard until it is settled:
    /// `()` for a guard that keeps nothing per attempt. Starts as its
    /// `Default` when an admission holds the attempt back.
    type Permit: Default + Send;

    /// A call begins: its first admission follows. Counts what the guard
    /// measures its share against (Envoy's "active requests").
    fn call_started(&self) {}

    /// Whether `attempt` may go, asked when it is planned. A refusal stops
    /// the call with the reason given (a retry's refusal keeps the last
    /// attempt's result, as a retry budget's does), or, for a hedge's
    /// further copy, sends no more copies. A hold, at a retry's plan, sends
    /// it that much later than its backoff ([`Attempt::wait`]); for an
    /// attempt due now, it is sent after the hold.
    fn admit(&self, attempt: Attempt) -> Admission<Self::Permit>;

    /// The admitted `attempt` is about to be sent: the last word on it, with
    /// its `permit` to fill in (a slot taken now). A hold asks again after
    /// it; a refusal settles the attempt as [`End::NotSent`]. By default it
    /// goes.
    fn send(&self, attempt: Attempt, permit: &mut Self::Permit) -> Admission {
        let _ = (attempt, permit);
        Admission::Go(())
    }

    /// An attempt this guard admitted is over: how it ended
    /// ([`Attempt::latency`]: how long it took), with its permit.
    fn settle(&self, attempt: Attempt, permit: Self::Permit, end: End);

    /// The call is over: every attempt it was admitted is settled.
    fn call_finished(&self) {}

    /// Reports the guard's figures now, each with the [`Gauge`] it is
    /// published as: what an integration's per-dependency registry reads at
    /// each metrics collection, so that a new guard's gauges need nothing
    /// but this method. Only those it has a value for now (every one it may
    /// report is listed by [`published`](Self::published)); none by default.
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        let _ = report;
    }

    /// Every gauge the guard may report through [`gauges`](Self::gauges),
    /// whether or not it has a value for it now: what a telemetry crate
    /// registers, once, when it sets a dependency's guards up (an adaptive
    /// throttle has no accept ratio before its first request, and its gauge
    /// must be registered all the same). By default, those `gauges` reports
    /// now — right for a guard that always reports every gauge.
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        self.gauges(&mut |published, _| gauge(published));
    }
}

/// A guard that keeps nothing per attempt, shared: how a dependency holds
/// its further guards ([`Dependency::with_guard`](crate::dependency::Dependency::with_guard)),
/// and what a registry's factory makes.
pub type SharedGuard = Arc<dyn Guard<Permit = ()>>;

/// A figure a guard publishes: its name in the telemetry contract
/// (`docs/telemetry.md`), what it means and its unit (UCUM, as OpenTelemetry
/// writes units). Labelled with the dependency by whoever publishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gauge {
    /// The instrument's name, `retryscope.…`.
    pub name: &'static str,
    /// Its description.
    pub description: &'static str,
    /// Its unit, e.g. `{retry}`.
    pub unit: &'static str,
    /// Which of several values is the worst: what one series shows for the
    /// dependencies past the label bound, which share the label `_OTHER`.
    pub worst: Worst,
}

/// Which value of a [`Gauge`] is the worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Worst {
    /// The highest (retries in flight, say).
    Highest,
    /// The lowest (an accept ratio, say).
    Lowest,
}

impl Gauge {
    /// The distinct gauges `guard` publishes ([`Guard::published`]), by
    /// name: what a telemetry crate registers for the guards a factory makes
    /// (each publishes the same ones), learned from one of them.
    pub fn of<G: Guard + ?Sized>(guard: &G) -> Vec<&'static Gauge> {
        let mut gauges: Vec<&'static Gauge> = Vec::new();
        guard.published(&mut |gauge| {
            if !gauges.iter().any(|known| known.name == gauge.name) {
                gauges.push(gauge);
            }
        });
        gauges
    }
}

/// An attempt, as a guard sees it: its number in the call, what it is (and
/// for a retry, why), the call's priority, a random draw for a guard that
/// admits by chance, and the times a guard paces by — the wait it is
/// planned after, what is left of the call's deadline, and once settled how
/// long it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    number: u32,
    kind: Kind,
    priority: Priority,
    /// Uniform over `u32`: [`draw`](Self::draw) in `[0, 1)`.
    draw: u32,
    // In nanoseconds, `NONE` for none (a call's every duration is at most a
    // day, `MAX_DURATION`): 8 bytes each where an `Option<Duration>` takes
    // 16, on the path of every call.
    wait: u64,
    remaining: u64,
    latency: u64,
}

/// No duration, in an [`Attempt`]'s nanoseconds.
const NONE: u64 = u64::MAX;

/// `duration` in nanoseconds, saturating below [`NONE`].
const fn nanos(duration: Duration) -> u64 {
    let nanos = duration.as_nanos();
    if nanos >= NONE as u128 { NONE - 1 } else { nanos as u64 }
}

/// An [`Attempt`]'s nanoseconds as a duration, if any.
const fn duration(nanos: u64) -> Option<Duration> {
    if nanos == NONE { None } else { Some(Duration::from_nanos(nanos)) }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    First,
    Retry(RetryCause),
    Hedge,
}

impl Attempt {
    /// A call's first attempt (or first hedged copy).
    pub const fn first() -> Self {
        Self::of(1, Kind::First)
    }

    /// Attempt `number` (from 2), sent after an earlier one failed
    /// transiently.
    pub const fn retry(number: u32) -> Self {
        Self::of(number, Kind::Retry(RetryCause::Transient))
    }

    /// Copy `number` (from 2) of a hedged call, sent while earlier copies
    /// are still in flight.
    pub const fn hedge(number: u32) -> Self {
        Self::of(number, Kind::Hedge)
    }

    /// At the default priority, with a draw of one half.
    const fn of(number: u32, kind: Kind) -> Self {
        Self {
            number,
            kind,
            priority: Priority::Critical,
            draw: u32::MAX / 2,
            wait: NONE,
            remaining: NONE,
            latency: 0,
        }
    }

    /// The same attempt of a call at `priority`, with `draw` (uniform over
    /// `u32`), as the engine hands it to a guard.
    pub const fn with(self, priority: Priority, draw: u32) -> Self {
        Self { priority, draw, ..self }
    }

    /// The same retry, after a failure of this kind.
    pub(crate) const fn because(self, cause: RetryCause) -> Self {
        match self.kind {
            Kind::Retry(_) => Self { kind: Kind::Retry(cause), ..self },
            _ => self,
        }
    }

    /// The same attempt, planned to go after `wait`.
    pub(crate) const fn after(self, wait: Duration) -> Self {
        Self { wait: nanos(wait), ..self }
    }

    /// The same attempt, held `hold` longer than planned (at a plan; an
    /// attempt due now is unchanged).
    pub(crate) fn lengthened(self, hold: Duration) -> Self {
        match self.wait() {
            Some(wait) => self.after(wait.saturating_add(hold)),
            None => self,
        }
    }

    /// The same attempt, with `remaining` left of the call's deadline.
    pub(crate) const fn within(self, remaining: Option<Duration>) -> Self {
        let remaining = match remaining {
            Some(remaining) => nanos(remaining),
            None => NONE,
        };
        Self { remaining, ..self }
    }

    /// The same attempt, which took `latency`.
    pub(crate) const fn took(self, latency: Duration) -> Self {
        Self { latency: nanos(latency), ..self }
    }

    /// The call's priority.
    pub const fn priority(self) -> Priority {
        self.priority
    }

    /// A uniform random number in `[0, 1)`, drawn for this admission: from
    /// the call's seed when it has one ([`Retry::seed`](crate::Retry::seed):
    /// a seeded call draws the same numbers every run), else from entropy.
    pub fn draw(self) -> f64 {
        f64::from(self.draw) / (f64::from(u32::MAX) + 1.0)
    }

    /// Its number in the call, from 1.
    pub const fn number(self) -> u32 {
        self.number
    }

    /// Whether it is the call's first attempt.
    pub const fn is_first(self) -> bool {
        matches!(self.kind, Kind::First)
    }

    /// Whether it is a retry, after a failure.
    pub const fn is_retry(self) -> bool {
        matches!(self.kind, Kind::Retry(_))
    }

    /// Whether it is a hedge's further copy.
    pub const fn is_hedge(self) -> bool {
        matches!(self.kind, Kind::Hedge)
    }

    /// Why it is sent, beyond the first: a retry's failure, or a hedge.
    /// What a retry budget prices it by.
    pub const fn cause(self) -> Option<RetryCause> {
        match self.kind {
            Kind::First => None,
            Kind::Retry(cause) => Some(cause),
            Kind::Hedge => Some(RetryCause::Hedge),
        }
    }

    /// At a retry's plan, the wait before it goes (its backoff, and any hold
    /// a guard asked before this one); `None` for an attempt admitted as it
    /// is due.
    pub const fn wait(self) -> Option<Duration> {
        duration(self.wait)
    }

    /// What will be left of the call's deadline when it goes, if the call
    /// has one.
    pub const fn remaining(self) -> Option<Duration> {
        duration(self.remaining)
    }

    /// At its settlement, how long it took from its send (zero if it never
    /// went, or if nothing in the call reads the clock).
    pub const fn latency(self) -> Duration {
        Duration::from_nanos(self.latency)
    }
}

/// Two guards that keep nothing per attempt, as one that keeps nothing: the
/// pair's rules ([`Guard for (A, B)`](Guard#impl-Guard-for-(A,+B))), for a
/// dependency given further guards one at a time.
pub(crate) struct Chained(pub(crate) SharedGuard, pub(crate) SharedGuard);

impl Chained {
    fn pair(&self) -> (&dyn Guard<Permit = ()>, &dyn Guard<Permit = ()>) {
        (&*self.0, &*self.1)
    }
}

impl Guard for Chained {
    type Permit = ();
    fn call_started(&self) {
        self.pair().call_started();
    }
    fn admit(&self, attempt: Attempt) -> Admission<()> {
        match self.pair().admit(attempt) {
            Admission::Go(_) => Admission::Go(()),
            Admission::Hold { wait, source, .. } => Admission::Hold { wait, source, permit: () },
            Admission::Refuse(reason) => Admission::Refuse(reason),
        }
    }
    fn send(&self, attempt: Attempt, (): &mut ()) -> Admission {
        self.pair().send(attempt, &mut ((), ()))
    }
    fn settle(&self, attempt: Attempt, (): (), end: End) {
        self.pair().settle(attempt, ((), ()), end);
    }
    fn call_finished(&self) {
        self.pair().call_finished();
    }
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        self.pair().gauges(report);
    }
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        self.pair().published(gauge);
    }
}

/// A guard's answer to an attempt. `P`: what an admitted attempt keeps
/// ([`Guard::Permit`]); `()` for the answer at its send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admission<P = ()> {
    /// It may go.
    Go(P),
    /// Not yet: at a retry's plan, it goes `wait` after its backoff; due
    /// now, it waits this long and is asked again at its send.
    Hold {
        /// How much longer it waits.
        wait: Duration,
        /// Why, when the call's observer should hear of it (a pace's hold);
        /// `None` for a wait nobody reports (a slot of a full limit).
        source: Option<HoldSource>,
        /// What it keeps meanwhile.
        permit: P,
    },
    /// It may not: the call stops (or sends no further copy) for this reason.
    Refuse(StopReason),
}

/// How an admitted attempt ended, as a guard hears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum End {
    /// It succeeded.
    Succeeded,
    /// The dependency answered with a permanent error (a healthy answer).
    Answered,
    /// It failed transiently.
    Failed,
    /// The dependency asked the client to slow down (or rolled back a
    /// conflicting transaction).
    Throttled,
    /// It was abandoned before it ended: a hedge's losing copy, the call
    /// dropped.
    Cancelled,
    /// It was admitted but never sent.
    NotSent,
}

impl End {
    /// Whether it says the dependency is healthy (`Some(true)`), failing
    /// (`Some(false)`), or nothing of either: what a budget and a breaker
    /// count. A request to slow down is a failure to a budget (the caller
    /// was not served) and nothing to a breaker (see [`Guard`] impls).
    pub(crate) const fn served(self) -> Option<bool> {
        match self {
            End::Succeeded => Some(true),
            End::Failed | End::Throttled => Some(false),
            End::Answered | End::Cancelled | End::NotSent => None,
        }
    }
}

impl<G: Guard + ?Sized> Guard for &G {
    type Permit = G::Permit;
    #[inline]
    fn call_started(&self) {
        (**self).call_started();
    }
    #[inline]
    fn admit(&self, attempt: Attempt) -> Admission<G::Permit> {
        (**self).admit(attempt)
    }
    #[inline]
    fn send(&self, attempt: Attempt, permit: &mut G::Permit) -> Admission {
        (**self).send(attempt, permit)
    }
    #[inline]
    fn settle(&self, attempt: Attempt, permit: G::Permit, end: End) {
        (**self).settle(attempt, permit, end);
    }
    #[inline]
    fn call_finished(&self) {
        (**self).call_finished();
    }
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        (**self).gauges(report);
    }
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        (**self).published(gauge);
    }
}

impl<G: Guard + ?Sized> Guard for Arc<G> {
    type Permit = G::Permit;
    fn call_started(&self) {
        (**self).call_started();
    }
    fn admit(&self, attempt: Attempt) -> Admission<G::Permit> {
        (**self).admit(attempt)
    }
    fn send(&self, attempt: Attempt, permit: &mut G::Permit) -> Admission {
        (**self).send(attempt, permit)
    }
    fn settle(&self, attempt: Attempt, permit: G::Permit, end: End) {
        (**self).settle(attempt, permit, end);
    }
    fn call_finished(&self) {
        (**self).call_finished();
    }
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        (**self).gauges(report);
    }
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        (**self).published(gauge);
    }
}

/// No guard: admits everything, keeps nothing. Inline, so that a call
/// without one of a dependency's guards pays one branch for it.
impl<G: Guard> Guard for Option<G> {
    type Permit = G::Permit;
    #[inline]
    fn call_started(&self) {
        if let Some(guard) = self {
            guard.call_started();
        }
    }
    #[inline]
    fn admit(&self, attempt: Attempt) -> Admission<G::Permit> {
        match self {
            Some(guard) => guard.admit(attempt),
            None => Admission::Go(G::Permit::default()),
        }
    }
    #[inline]
    fn send(&self, attempt: Attempt, permit: &mut G::Permit) -> Admission {
        match self {
            Some(guard) => guard.send(attempt, permit),
            None => Admission::Go(()),
        }
    }
    #[inline]
    fn settle(&self, attempt: Attempt, permit: G::Permit, end: End) {
        if let Some(guard) = self {
            guard.settle(attempt, permit, end);
        }
    }
    #[inline]
    fn call_finished(&self) {
        if let Some(guard) = self {
            guard.call_finished();
        }
    }
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        if let Some(guard) = self {
            guard.gauges(report);
        }
    }
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        if let Some(guard) = self {
            guard.published(gauge);
        }
    }
}

/// Both guards, the first asked first: a refusal by the second settles the
/// first's admission as not sent; a hold by the first at a retry's plan is
/// added to the wait the second is asked about; at the send, a hold by the
/// first asks the second nothing yet.
impl<A: Guard, B: Guard> Guard for (A, B) {
    type Permit = (A::Permit, B::Permit);
    #[inline]
    fn call_started(&self) {
        self.0.call_started();
        self.1.call_started();
    }
    #[inline]
    fn admit(&self, attempt: Attempt) -> Admission<Self::Permit> {
        let (first, held) = match self.0.admit(attempt) {
            Admission::Go(permit) => (permit, None),
            Admission::Hold { wait, source, permit } => (permit, Some((wait, source))),
            Admission::Refuse(reason) => return Admission::Refuse(reason),
        };
        // The second hears of the first's hold as part of the wait.
        let later = match held {
            Some((hold, _)) => attempt.lengthened(hold),
            None => attempt,
        };
        match (self.1.admit(later), held) {
            (Admission::Go(second), None) => Admission::Go((first, second)),
            (Admission::Go(second), Some((wait, source))) => {
                Admission::Hold { wait, source, permit: (first, second) }
            }
            (Admission::Hold { wait, source, permit }, held) => Admission::Hold {
                wait: wait + held.map_or(Duration::ZERO, |(hold, _)| hold),
                source: source.or(held.and_then(|(_, source)| source)),
                permit: (first, permit),
            },
            (Admission::Refuse(reason), _) => {
                // The first admitted an attempt that will not go: it must
                // hear so, or it would count it for ever.
                self.0.settle(attempt, first, End::NotSent);
                Admission::Refuse(reason)
            }
        }
    }
    #[inline]
    fn send(&self, attempt: Attempt, permit: &mut Self::Permit) -> Admission {
        match self.0.send(attempt, &mut permit.0) {
            Admission::Go(()) => self.1.send(attempt, &mut permit.1),
            not_yet => not_yet,
        }
    }
    #[inline]
    fn settle(&self, attempt: Attempt, permit: Self::Permit, end: End) {
        self.0.settle(attempt, permit.0, end);
        self.1.settle(attempt, permit.1, end);
    }
    #[inline]
    fn call_finished(&self) {
        self.0.call_finished();
        self.1.call_finished();
    }
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        self.0.gauges(report);
        self.1.gauges(report);
    }
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        self.0.published(gauge);
        self.1.published(gauge);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records what it heard; refuses retries when told to, holds them for
    /// `hold` at their plan.
    #[derive(Default)]
    struct Log {
        heard: Mutex<Vec<String>>,
        refuse: bool,
        hold: Option<Duration>,
    }

    impl Guard for Log {
        type Permit = ();
        fn admit(&self, attempt: Attempt) -> Admission<()> {
            let wait = attempt.wait().map_or(String::new(), |wait| format!(" after {wait:?}"));
            self.heard.lock().expect("not poisoned").push(format!("admit {}{wait}", attempt.number()));
            match (self.refuse && !attempt.is_first(), self.hold) {
                (true, _) => Admission::Refuse(StopReason::BudgetExhausted),
                (false, Some(wait)) => Admission::Hold { wait, source: None, permit: () },
                (false, None) => Admission::Go(()),
            }
        }
        fn settle(&self, attempt: Attempt, (): (), end: End) {
            self.heard.lock().expect("not poisoned").push(format!("settle {} {end:?}", attempt.number()));
        }
    }

    fn heard(log: &Log) -> Vec<String> {
        log.heard.lock().expect("not poisoned").clone()
    }

    #[test]
    fn a_pair_settles_the_first_admission_when_the_second_refuses() {
        let pair = (Log::default(), Log { refuse: true, ..Log::default() });
        assert_eq!(pair.admit(Attempt::first()), Admission::Go(((), ())));
        assert_eq!(pair.admit(Attempt::retry(2)), Admission::Refuse(StopReason::BudgetExhausted));
        assert_eq!(heard(&pair.0), ["admit 1", "admit 2", "settle 2 NotSent"]);
        assert_eq!(heard(&pair.1), ["admit 1", "admit 2"]);
    }

    #[test]
    fn a_pair_asks_the_second_about_the_wait_the_first_held_it_for() {
        let hold = Duration::from_millis(300);
        let pair = (Log { hold: Some(hold), ..Log::default() }, Log { hold: Some(hold), ..Log::default() });
        let retry = Attempt::retry(2).after(Duration::from_millis(100));
        let Admission::Hold { wait, .. } = pair.admit(retry) else { panic!("both hold") };
        assert_eq!(wait, Duration::from_millis(600), "the two holds add up");
        assert_eq!(heard(&pair.0), ["admit 2 after 100ms"]);
        assert_eq!(heard(&pair.1), ["admit 2 after 400ms"], "the second sees the first's hold");
    }

    #[test]
    fn no_guard_admits_everything() {
        let none: Option<Log> = None;
        assert_eq!(none.admit(Attempt::retry(2)), Admission::Go(()));
        assert_eq!(none.send(Attempt::retry(2), &mut ()), Admission::Go(()));
    }
}
