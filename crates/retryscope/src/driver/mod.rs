//! The engine's decisions, shared by the async and the blocking front ends.
//!
//! The driver owns no future and never sleeps: it is told the time, starts and
//! ends attempts, and answers what to do next. That keeps every rule (deadline,
//! hints, budget, breaker, attempt limit) in one place and testable without a
//! runtime.
//!
//! Most calls succeed at once, so the driver does as little as it can until an
//! attempt fails: it reads the clock only when something uses the time, and
//! when nothing observes or guards the operation beyond a budget (a silent
//! observer, no breaker) it starts the first attempt *quietly* — the budget
//! counts the request, nothing else is recorded — and books that attempt only
//! if it fails. Booked late, it is indistinguishable from one booked first:
//! nobody could have seen the difference. The async front end goes further:
//! without a pacer either, it runs that first attempt before building a driver
//! at all, and hands over ([`Driver::resume_quiet`]) only if the attempt fails
//! or is not ready at once.
//!
//! A hedged call is the same driver with overlapping attempts ([`hedge`]):
//! every copy is admitted, settled and reported by the functions a retry's
//! attempt goes through, and the call finishes once, here.

mod admission;
mod attempt;
mod end;
pub(crate) mod hedge;
mod quiet;
mod setup;

pub(crate) use attempt::{Flight, Scope};
pub(crate) use setup::{QuietSetup, Setup};

use crate::budget::RetryCause;
use crate::clock::Clock;
use crate::dependency::Permits;
use crate::guard::{Attempt, End};
use crate::observe::{
    AttemptEnd, AttemptScope, AttemptStart, Finish, HedgeOutcome, Observer, OperationInfo, OperationObserver,
    Wait,
};
use crate::outcome::{Outcome, StopReason};
use crate::pace::{Held, HoldSource, Pacer};
use crate::random::JitterRng;
use crate::verdict::{DelaySource, ErrorType, Hint, Verdict};
use crate::wait::{Curve, next_wait};
use attempt::end_of;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What the front end must do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// The attempt succeeded: hand its result back.
    Done,
    /// Stop and hand back the last result wrapped with this reason.
    Stop(StopReason),
    /// Wait this long, then start another attempt.
    Wait(Duration),
    /// Wait this long, then stop: the budget refused the retry, and the
    /// policy waits out its backoff first
    /// ([`Policy::waits_out_refusal`](crate::Policy::waits_out_refusal)).
    /// The front end waits as for [`Next::Wait`]; the driver stops at the
    /// next [`pace`](Driver::pace) or [`start_attempt`](Driver::start_attempt).
    StopAfter(Duration),
}

/// An attempt the driver let start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started {
    /// Its time limit, if it has one.
    pub(crate) limit: Option<Duration>,
    /// `Some(start)` when it started quietly, without the bookkeeping (see
    /// [`Driver::start_attempt`]): the front end must then hand its result to
    /// [`settle`](crate::retry::settle) with this instant.
    pub(crate) quiet: Option<Instant>,
}

pub(crate) struct Driver<'a, O: Observer> {
    setup: Setup<'a>,
    clock: &'a dyn Clock,
    /// Whether anything needs the time: a deadline, a timeout or the observer.
    timed: bool,
    /// Whether the observer uses durations: a `TIMED` one that is there
    /// ([`Observer::is_timed`]). Without it an attempt that succeeds ends at
    /// its start for the observer, and no duration is worked out for it.
    observed: bool,
    /// Whether the first attempt may start without the bookkeeping: a silent
    /// observer and no breaker (see [`begin_quietly`](Self::begin_quietly)).
    quiet: bool,
    observer: O,
    operation: Option<O::Operation>,
    // The running attempt, if one is: its observer scope and when it
    // started. Fields of their own rather than one `Option` of a struct, so
    // that starting an attempt drops nothing.
    scope: Option<<O::Operation as OperationObserver>::Attempt>,
    attempt_started: Option<Instant>,
    started: Option<Instant>,
    attempts: u32,
    last_error: Option<ErrorType>,
    /// Whether the operation stops, the budget having refused its retry, once
    /// the wait now running is over ([`Next::StopAfter`]): a flag, not the
    /// reason, which is always [`StopReason::BudgetExhausted`] (the driver is
    /// kept small: every call holds one).
    refused: bool,
    /// Where the backoff curve stands: the retries it counted (a gRPC pushback
    /// restarts it) and the delay before the previous one.
    curve: Curve,
    rng: Option<JitterRng>,
    /// The attempt the dependency's guards admitted and have not heard the
    /// end of, with what they keep for it: a retry planned (admitted at its
    /// plan, before its wait), an attempt cleared to go, or the running one.
    admitted: Option<(Attempt, Permits)>,
    /// Whether the guards have let the admitted attempt be sent now
    /// ([`Guard::send`]): then starting it asks nothing more.
    cleared: bool,
}

impl<'a, O: Observer> Driver<'a, O> {
    // Inlined into the future it is built in, so that it is written there
    // rather than returned and copied.
    #[inline(always)]
    pub(crate) fn new(setup: Setup<'a>, observer: O, clock: &'a dyn Clock) -> Self {
        let observed = O::TIMED && observer.is_timed();
        // A concurrency limit learns from round trips: it needs the time.
        let timed = observed || setup.policy.is_timed() || setup.dependency.limiter.is_some();
        Self {
            curve: Curve::START,
            timed,
            observed,
            quiet: O::SILENT && !setup.admits(),
            setup,
            clock,
            observer,
            operation: None,
            scope: None,
            attempt_started: None,
            started: None,
            attempts: 0,
            last_error: None,
            refused: false,
            rng: None,
            admitted: None,
            cleared: false,
        }
    }

    /// The current time, from the front end's clock. When nothing needs the
    /// time (no deadline, no timeout, an observer that ignores durations), a
    /// fixed instant stands for it: reading a clock costs more than the rest of
    /// an attempt that succeeds at once, and nothing would look at the result.
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        if self.timed { self.clock.now() } else { untimed_instant() }
    }

    /// Whether the observer uses durations ([`Observer::is_timed`]): known
    /// at compile time for an observer that never does (`TIMED` false), so
    /// that its calls pay nothing for the question.
    #[inline]
    pub(crate) fn observed(&self) -> bool {
        O::TIMED && self.observed
    }

    /// Whether [`now`](Self::now) reads the clock every time.
    pub(crate) fn timed(&self) -> bool {
        self.timed
    }

    /// Whether the front end must ask [`pace`](Self::pace) before each
    /// attempt: the dependency has a guard that may hold an attempt as it is
    /// sent (a pacer, a concurrency limit, a further guard). A branch on the
    /// path of every call, the pacing itself off it.
    #[inline]
    pub(crate) fn paced(&self) -> bool {
        let guards = &self.setup.dependency;
        guards.pacer.is_some() || guards.limiter.is_some() || guards.guard.is_some()
    }

    /// The dependency's pacer, if it has one: it learns what each answer
    /// says about pace ([`Classify::pace`](crate::classify::Classify::pace)).
    #[inline]
    pub(crate) fn pacer(&self) -> Option<&'a Pacer> {
        self.setup.dependency.pacer
    }

    /// What is left of the deadline at `now`, if there is one.
    fn remaining(&self, now: Instant) -> Option<Duration> {
        let deadline = self.setup.policy.deadline()?;
        match self.started {
            // Nothing has elapsed at the instant the operation began (a first
            // attempt's admission): no arithmetic on instants (~55 instructions).
            Some(started) if started != now => {
                Some(deadline.saturating_sub(now.saturating_duration_since(started)))
            }
            _ => Some(deadline),
        }
    }

    /// The operation starts at `now`, unless it has: the guards hear of it
    /// (the budget counts one request), whether the first attempt starts
    /// quietly or booked.
    #[inline]
    fn count_request(&mut self, now: Instant) {
        if self.started.is_none() {
            self.setup.dependency.call_started();
            self.started = Some(now);
        }
    }

    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The `error.type` of the last failed attempt, if any failed.
    pub(crate) fn last_error(&self) -> Option<ErrorType> {
        self.last_error
    }

    /// Starts the next attempt with all its bookkeeping, or says why none may
    /// start. On success returns the attempt's time limit, if any.
    #[inline(never)]
    fn begin_attempt(&mut self, now: Instant) -> Result<Option<Duration>, StopReason> {
        if std::mem::take(&mut self.refused) {
            return Err(self.stop(now, StopReason::BudgetExhausted));
        }
        // A paced call's guards cleared it in `pace`; an unpaced call's have
        // no hold to give.
        if !std::mem::take(&mut self.cleared)
            && let Err(reason) = self.clear(now)
        {
            return Err(self.stop(now, reason));
        }
        let attempt_timeout = self.setup.policy.attempt_timeout();
        let (scope, limit) = match self.admit(now, self.last_error, attempt_timeout) {
            Ok(admitted) => admitted,
            Err(reason) => {
                self.withdraw();
                return Err(self.stop(now, reason));
            }
        };
        self.scope = scope;
        self.attempt_started = Some(now);
        Ok(limit)
    }

    /// Starts the attempt the guards cleared at `now`, the one start of every
    /// attempt, a retry's or a hedge's copy: the deadline may refuse it, the
    /// observer hears it start (as a retry of `retry_of`). Returns the
    /// observer's scope of the attempt and its time limit (`attempt_timeout`
    /// cut to what is left of the deadline); a refusal does not stop the
    /// operation. The guards' admission stays the driver's, for the caller to
    /// move into the flight.
    #[inline]
    fn admit(
        &mut self,
        now: Instant,
        retry_of: Option<ErrorType>,
        attempt_timeout: Option<Duration>,
    ) -> Result<(Option<Scope<O>>, Option<Duration>), StopReason> {
        self.observe_operation();
        let remaining = match self.started {
            // The first attempt has the whole deadline: no arithmetic on instants.
            None => {
                self.count_request(now);
                self.setup.policy.deadline()
            }
            // Opened at this very instant (a paced call's first attempt,
            // cleared at once): the whole deadline, no arithmetic either.
            Some(started) if started == now => self.setup.policy.deadline(),
            Some(started) => {
                let remaining = self
                    .setup
                    .policy
                    .deadline()
                    .map(|d| d.saturating_sub(now.saturating_duration_since(started)));
                if remaining == Some(Duration::ZERO) {
                    return Err(StopReason::DeadlineExceeded);
                }
                remaining
            }
        };
        self.attempts += 1;
        let limit = attempt_limit(attempt_timeout, remaining);
        let start = AttemptStart { number: self.attempts, retry_of, hedge: self.setup.hedged, limit };
        // Only the observer's scope goes back: the attempt's number and start
        // are the driver's already (a whole `Flight` here cost a copy of it).
        let scope = self.operation.as_mut().map(|operation| operation.attempt_started(&start));
        Ok((scope, limit))
    }

    /// The observer hears of the operation before its first attempt starts,
    /// is held or is refused (a quiet operation's first attempt may already
    /// have run).
    fn observe_operation(&mut self) {
        if self.operation.is_none() {
            self.operation = Some(self.observer.start(&OperationInfo {
                dependency: &self.setup.dependency.name,
                operation: self.setup.operation.as_deref(),
                max_attempts: self.setup.policy.max_attempts(),
                hedged: self.setup.hedged,
                priority: self.setup.priority,
            }));
        }
    }

    /// The operation has begun at `now` even if no attempt is sent yet (the
    /// pacer holds or refuses it): observed, its request counted, its
    /// deadline running.
    fn open(&mut self, now: Instant) {
        self.observe_operation();
        if self.started.is_none() {
            self.count_request(now);
        }
    }

    /// An attempt's time limit when `remaining` is left of the deadline. The
    /// attempt may not outlive the deadline: that is what makes the deadline
    /// a promise even when the operation itself hangs.
    fn attempt_limit(&self, remaining: Option<Duration>) -> Option<Duration> {
        attempt_limit(self.setup.policy.attempt_timeout(), remaining)
    }

    /// Runs `f`, the call that builds the current attempt's future, as its
    /// scope says (see [`AttemptScope::in_build_scope`]).
    pub(crate) fn in_build_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.scope {
            Some(scope) => scope.in_build_scope(f),
            None => f(),
        }
    }

    /// Runs `f` inside the current attempt's scope.
    pub(crate) fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.scope {
            Some(scope) => scope.in_scope(f),
            None => f(),
        }
    }
}

impl<O: Observer> Drop for Driver<'_, O> {
    fn drop(&mut self) {
        // Dropped before the operation ended (a cancelled future, a panic in a
        // blocking operation): the observer still hears how it ended, once.
        if self.operation.is_some() {
            let now = self.now();
            self.cancel(now);
        }
    }
}

/// The instant that stands for "now" when nothing needs the time.
#[inline]
pub(crate) fn untimed_instant() -> Instant {
    static UNTIMED: OnceLock<Instant> = OnceLock::new();
    *UNTIMED.get_or_init(Instant::now)
}

fn new_rng(seed: Option<u64>) -> JitterRng {
    seed.map_or_else(JitterRng::from_entropy, JitterRng::seeded)
}

/// An attempt's time limit: its `timeout` cut to the `remaining` deadline.
#[inline]
fn attempt_limit(timeout: Option<Duration>, remaining: Option<Duration>) -> Option<Duration> {
    match (timeout, remaining) {
        (Some(t), Some(r)) => Some(t.min(r)),
        (t, r) => t.or(r),
    }
}
