//! An attempt as a guard sees it: its number, what it is and why, the
//! call's priority, a draw, and the times a guard paces by.

use crate::budget::RetryCause;
use crate::overload::Priority;
use std::time::Duration;

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

    /// At its settlement, how long it took from its send. Zero if it never
    /// went, if nothing in the call reads the clock, or if it is a retried
    /// call's attempt that succeeded while neither a concurrency limit nor an
    /// observer that times durations
    /// ([`Observer::is_timed`](crate::observe::Observer::is_timed)) is on the
    /// call: only those make the engine read such a success's end (a hedge's
    /// copies are timed whenever the call is).
    pub const fn latency(self) -> Duration {
        Duration::from_nanos(self.latency)
    }
}
