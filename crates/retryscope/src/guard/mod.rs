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

mod attempt;
mod compose;

pub use attempt::Attempt;
pub(crate) use compose::Chained;

use crate::outcome::StopReason;
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
    /// The type of number it is exported as. Its values are reported as
    /// `f64` whatever the kind: a guard's integer figures (a breaker's state,
    /// a limit, slots in flight) are far below 2^53, so an `f64` holds each
    /// exactly and the exporter converts it back without loss.
    pub kind: GaugeKind,
}

/// The type of number a [`Gauge`] is exported as: part of the telemetry
/// contract (an exporter's instrument type), so a guard says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GaugeKind {
    /// A floating-point value (a budget's retries available, a rate, a ratio).
    F64,
    /// A signed integer (a breaker's state: 0, 1 or 2).
    I64,
    /// An unsigned integer (a concurrency limit, the attempts holding its slots).
    U64,
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
    /// The distinct gauges `publish` names, by name, in the order first
    /// named: what a dependency publishes ([`Dependency::published`](crate::dependency::Dependency::published)).
    pub(crate) fn distinct(publish: impl FnOnce(&mut dyn FnMut(&'static Gauge))) -> Vec<&'static Gauge> {
        let mut gauges: Vec<&'static Gauge> = Vec::new();
        publish(&mut |gauge| {
            if !gauges.iter().any(|known| known.name == gauge.name) {
                gauges.push(gauge);
            }
        });
        gauges
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
