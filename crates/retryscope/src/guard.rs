//! A guard: one concern that admits a call's attempts and hears how they
//! ended, plugged into a call as a value.
//!
//! The engine asks a [`Guard`] before each attempt may go and tells it how
//! each ended; the guard keeps whatever state it needs between the two. A
//! new concern — a cap on concurrent retries, a hedge budget, a per-endpoint
//! limit — is then one type implementing this trait, handed to
//! [`Dependency::with_guard`](crate::dependency::Dependency::with_guard) and
//! put on calls with the dependency, with nothing else in the
//! engine or the integrations to change.
//!
//! The engine keeps these promises, whatever happens to the call (an error,
//! a refusal, the future dropped mid-wait):
//!
//! - [`call_started`](Guard::call_started) once per call, before its first
//!   admission; [`call_finished`](Guard::call_finished) once, after its last
//!   settlement.
//! - Every attempt the guard admitted ([`Admission::Go`]) is settled once
//!   ([`settle`](Guard::settle)), with [`End::NotSent`] when it never went
//!   (the call's deadline, another guard's refusal, the call dropped while
//!   the retry waited).
//! - A retry is admitted when it is *planned*, at the failure, before its
//!   backoff: a refusal then costs the caller no wait, and the retry counts
//!   as the guard's from its plan to its end (as Envoy counts a retry from
//!   its scheduling). A hedge's further copy is admitted when it is due.
//!
//! Guards compose as values: a pair of guards is a guard (both asked, in
//! order; a refusal by the second settles the first's admission as not
//! sent), as is `Option<G>` and `Arc<G>`.
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
//!     fn admit(&self, attempt: Attempt) -> Admission {
//!         if attempt.is_first() {
//!             return Admission::Go;
//!         }
//!         match self.0.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire) {
//!             Ok(_) => Admission::Go,
//!             Err(_) => Admission::Refuse(StopReason::BudgetExhausted),
//!         }
//!     }
//!
//!     fn settle(&self, attempt: Attempt, _end: End) {
//!         if !attempt.is_first() {
//!             self.0.store(0, Ordering::Release);
//!         }
//!     }
//! }
//!
//! let guard = OneRetry::default();
//! let retry = Attempt::retry(2);
//! assert_eq!(guard.admit(retry), Admission::Go);
//! assert_eq!(guard.admit(Attempt::retry(2)), Admission::Refuse(StopReason::BudgetExhausted));
//! guard.settle(retry, End::Failed);
//! assert_eq!(guard.admit(Attempt::retry(3)), Admission::Go);
//! ```

use crate::outcome::StopReason;
use crate::overload::Priority;
use std::sync::Arc;

/// Admits a call's attempts and hears how each ended. Shared across tasks
/// and threads: every method must be cheap and must not block.
pub trait Guard: Send + Sync {
    /// A call begins: its first admission follows. Counts what the guard
    /// measures its share against (Envoy's "active requests").
    fn call_started(&self) {}

    /// Whether `attempt` may go. A refusal stops the call with the reason
    /// given (a retry's refusal keeps the last attempt's result, as a retry
    /// budget's does), or, for a hedge's further copy, sends no more copies.
    fn admit(&self, attempt: Attempt) -> Admission;

    /// An attempt this guard admitted is over: how it ended.
    fn settle(&self, attempt: Attempt, end: End);

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
    pub fn of(guard: &dyn Guard) -> Vec<&'static Gauge> {
        let mut gauges: Vec<&'static Gauge> = Vec::new();
        guard.published(&mut |gauge| {
            if !gauges.iter().any(|known| known.name == gauge.name) {
                gauges.push(gauge);
            }
        });
        gauges
    }
}

/// An attempt, as a guard sees it: its number in the call, what it is, the
/// call's priority, and a random draw for a guard that admits by chance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    number: u32,
    kind: Kind,
    priority: Priority,
    /// Uniform over `u32`: [`draw`](Self::draw) in `[0, 1)`.
    draw: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    First,
    Retry,
    Hedge,
}

impl Attempt {
    /// A call's first attempt (or first hedged copy).
    pub const fn first() -> Self {
        Self::of(1, Kind::First)
    }

    /// Attempt `number` (from 2), sent after an earlier one failed.
    pub const fn retry(number: u32) -> Self {
        Self::of(number, Kind::Retry)
    }

    /// Copy `number` (from 2) of a hedged call, sent while earlier copies
    /// are still in flight.
    pub const fn hedge(number: u32) -> Self {
        Self::of(number, Kind::Hedge)
    }

    /// At the default priority, with a draw of one half.
    const fn of(number: u32, kind: Kind) -> Self {
        Self { number, kind, priority: Priority::Critical, draw: u32::MAX / 2 }
    }

    /// The same attempt of a call at `priority`, with `draw` (uniform over
    /// `u32`), as the engine hands it to a guard.
    pub const fn with(self, priority: Priority, draw: u32) -> Self {
        Self { priority, draw, ..self }
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
        matches!(self.kind, Kind::Retry)
    }

    /// Whether it is a hedge's further copy.
    pub const fn is_hedge(self) -> bool {
        matches!(self.kind, Kind::Hedge)
    }
}

/// A guard's answer to an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admission {
    /// It may go.
    Go,
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

impl<G: Guard + ?Sized> Guard for Arc<G> {
    fn call_started(&self) {
        (**self).call_started();
    }
    fn admit(&self, attempt: Attempt) -> Admission {
        (**self).admit(attempt)
    }
    fn settle(&self, attempt: Attempt, end: End) {
        (**self).settle(attempt, end);
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

impl<G: Guard> Guard for Option<G> {
    fn call_started(&self) {
        if let Some(guard) = self {
            guard.call_started();
        }
    }
    fn admit(&self, attempt: Attempt) -> Admission {
        self.as_ref().map_or(Admission::Go, |guard| guard.admit(attempt))
    }
    fn settle(&self, attempt: Attempt, end: End) {
        if let Some(guard) = self {
            guard.settle(attempt, end);
        }
    }
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

impl<A: Guard, B: Guard> Guard for (A, B) {
    fn call_started(&self) {
        self.0.call_started();
        self.1.call_started();
    }
    fn admit(&self, attempt: Attempt) -> Admission {
        match self.0.admit(attempt) {
            Admission::Go => {}
            refused => return refused,
        }
        match self.1.admit(attempt) {
            Admission::Go => Admission::Go,
            refused => {
                // The first admitted an attempt that will not go: it must
                // hear so, or it would count it for ever.
                self.0.settle(attempt, End::NotSent);
                refused
            }
        }
    }
    fn settle(&self, attempt: Attempt, end: End) {
        self.0.settle(attempt, end);
        self.1.settle(attempt, end);
    }
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

    /// Records what it heard; refuses retries when told to.
    #[derive(Default)]
    struct Log {
        heard: Mutex<Vec<String>>,
        refuse: bool,
    }

    impl Guard for Log {
        fn admit(&self, attempt: Attempt) -> Admission {
            self.heard.lock().expect("not poisoned").push(format!("admit {}", attempt.number()));
            if self.refuse && !attempt.is_first() {
                Admission::Refuse(StopReason::BudgetExhausted)
            } else {
                Admission::Go
            }
        }
        fn settle(&self, attempt: Attempt, end: End) {
            self.heard.lock().expect("not poisoned").push(format!("settle {} {end:?}", attempt.number()));
        }
    }

    #[test]
    fn a_pair_settles_the_first_admission_when_the_second_refuses() {
        let pair = (Log::default(), Log { refuse: true, ..Log::default() });
        assert_eq!(pair.admit(Attempt::first()), Admission::Go);
        assert_eq!(pair.admit(Attempt::retry(2)), Admission::Refuse(StopReason::BudgetExhausted));
        assert_eq!(*pair.0.heard.lock().expect("not poisoned"), ["admit 1", "admit 2", "settle 2 NotSent"]);
        assert_eq!(*pair.1.heard.lock().expect("not poisoned"), ["admit 1", "admit 2"]);
    }

    #[test]
    fn no_guard_admits_everything() {
        let none: Option<Log> = None;
        assert_eq!(none.admit(Attempt::retry(2)), Admission::Go);
    }
}
