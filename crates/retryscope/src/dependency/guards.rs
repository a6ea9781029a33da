//! A dependency's guards asked as one [`Guard`] would be, in the order every
//! call asks them: the pacer (a retry's pace is known before anything spends
//! on it), the concurrency limit, the breaker, the further guards, the
//! budget last (it spends a token only on a retry everything else lets go).
//!
//! The rules are a pair's ([`Guard for (A, B)`](crate::guard::Guard)), written
//! flat for the five kinds a dependency has: each guard is asked through the
//! trait, and what each keeps for an attempt lives in one [`Permits`] the
//! driver holds in place. Nested pairs would rebuild the admission at every
//! level — on the path of every call, guarded or not.

use super::value::DependencyRef;
use crate::breaker::BreakerPermit;
use crate::budget::RetryCause;
use crate::guard::{Admission, Attempt, End, Guard};
use crate::outcome::StopReason;
use crate::overload::ConcurrencyLimiter;
use crate::pace::HoldSource;
use std::time::Duration;

/// What an attempt keeps for each of its dependency's guards.
#[derive(Default)]
pub(crate) struct Permits {
    pacer: bool,
    limiter: <ConcurrencyLimiter as Guard>::Permit,
    breaker: Option<BreakerPermit>,
    budget: Option<RetryCause>,
}

/// A hold the guards asked for: how long, and why when the observer should
/// hear of it.
pub(crate) type Hold = Option<(Duration, Option<HoldSource>)>;

/// How far an admission got: the guards before a refusal hear their
/// admission was never sent.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Pacer,
    Limiter,
    Breaker,
    Guard,
    Budget,
}

impl DependencyRef<'_> {
    /// Whether the dependency has any guard.
    #[inline(always)]
    pub(crate) fn is_guarded(&self) -> bool {
        self.pacer.is_some()
            || self.limiter.is_some()
            || self.breaker.is_some()
            || self.guard.is_some()
            || self.budget.is_some()
    }

    /// Whether a guard may read what is left of the call's deadline
    /// ([`Attempt::remaining`]): the pacer, the concurrency limit, a further
    /// guard. For the others the driver does not work it out.
    #[inline(always)]
    pub(crate) fn reads_remaining(&self) -> bool {
        self.pacer.is_some() || self.limiter.is_some() || self.guard.is_some()
    }

    /// A call begins ([`Guard::call_started`]).
    #[inline(always)]
    pub(crate) fn call_started(&self) {
        if let Some(guard) = self.guard {
            guard.call_started();
        }
        if let Some(budget) = self.budget {
            budget.call_started();
        }
    }

    /// Admits `attempt` ([`Guard::admit`]), filling in `permits`: `Ok` with
    /// the hold before it goes, if any (at a plan, a hold lengthens the wait
    /// the later guards are asked about); or the refusal, the guards that
    /// admitted it before then told it was never sent.
    #[inline(always)]
    pub(crate) fn admit(&self, attempt: Attempt, permits: &mut Permits) -> Result<Hold, StopReason> {
        let (mut attempt, mut hold) = (attempt, None);
        let refused = 'ask: {
            if let Some(pacer) = self.pacer
                && let Err(reason) = ask(pacer, &mut attempt, &mut permits.pacer, &mut hold)
            {
                break 'ask (Stage::Pacer, reason);
            }
            if let Some(limiter) = self.limiter
                && let Err(reason) = ask(limiter, &mut attempt, &mut permits.limiter, &mut hold)
            {
                break 'ask (Stage::Limiter, reason);
            }
            if let Some(breaker) = self.breaker
                && let Err(reason) = ask(breaker, &mut attempt, &mut permits.breaker, &mut hold)
            {
                break 'ask (Stage::Breaker, reason);
            }
            if let Some(guard) = self.guard
                && let Err(reason) = ask(guard, &mut attempt, &mut (), &mut hold)
            {
                break 'ask (Stage::Guard, reason);
            }
            if let Some(budget) = self.budget
                && let Err(reason) = ask(budget, &mut attempt, &mut permits.budget, &mut hold)
            {
                break 'ask (Stage::Budget, reason);
            }
            return Ok(hold);
        };
        self.refused(refused.0, attempt, std::mem::take(permits));
        Err(refused.1)
    }

    /// The guards before `stage`, which admitted `attempt`, hear it will not
    /// be sent. Out of line: refusals are off the path of a call that goes.
    #[cold]
    #[inline(never)]
    fn refused(&self, stage: Stage, attempt: Attempt, permits: Permits) {
        let Permits { pacer, limiter, breaker, budget: _ } = permits;
        if let Some(guard) = self.pacer.filter(|_| stage > Stage::Pacer) {
            guard.settle(attempt, pacer, End::NotSent);
        }
        if let Some(guard) = self.limiter.filter(|_| stage > Stage::Limiter) {
            guard.settle(attempt, limiter, End::NotSent);
        }
        if let Some(guard) = self.breaker.filter(|_| stage > Stage::Breaker) {
            guard.settle(attempt, breaker, End::NotSent);
        }
        if let Some(guard) = self.guard.filter(|_| stage > Stage::Guard) {
            guard.settle(attempt, (), End::NotSent);
        }
    }

    /// Whether the admitted `attempt` may be sent now ([`Guard::send`]): `Ok`
    /// with a hold (ask again after it), or a refusal (the caller settles
    /// the admission as never sent).
    #[inline(always)]
    pub(crate) fn send(&self, attempt: Attempt, permits: &mut Permits) -> Result<Hold, StopReason> {
        if let Some(pacer) = self.pacer
            && let Some(answer) = not_yet(pacer.send(attempt, &mut permits.pacer))
        {
            return answer;
        }
        if let Some(limiter) = self.limiter
            && let Some(answer) = not_yet(limiter.send(attempt, &mut permits.limiter))
        {
            return answer;
        }
        if let Some(breaker) = self.breaker
            && let Some(answer) = not_yet(breaker.send(attempt, &mut permits.breaker))
        {
            return answer;
        }
        if let Some(guard) = self.guard
            && let Some(answer) = not_yet(guard.send(attempt, &mut ()))
        {
            return answer;
        }
        if let Some(budget) = self.budget
            && let Some(answer) = not_yet(budget.send(attempt, &mut permits.budget))
        {
            return answer;
        }
        Ok(None)
    }

    /// The admitted `attempt` ended so ([`Guard::settle`]).
    #[inline(always)]
    pub(crate) fn settle(&self, attempt: Attempt, permits: Permits, end: End) {
        let Permits { pacer, limiter, breaker, budget } = permits;
        if let Some(guard) = self.pacer {
            guard.settle(attempt, pacer, end);
        }
        if let Some(guard) = self.limiter {
            guard.settle(attempt, limiter, end);
        }
        if let Some(guard) = self.breaker {
            guard.settle(attempt, breaker, end);
        }
        if let Some(guard) = self.guard {
            guard.settle(attempt, (), end);
        }
        if let Some(guard) = self.budget {
            guard.settle(attempt, budget, end);
        }
    }

    /// A quiet first attempt ended so ([`Guard::settle`]): one whose
    /// dependency has no guard but a pacer and a budget, neither of which
    /// keeps anything for a first attempt (the pacer's permit says only
    /// whether its schedule counted the attempt, which it did at its send).
    #[inline(always)]
    pub(crate) fn settle_quiet(&self, attempt: Attempt, end: End) {
        if let Some(guard) = self.pacer {
            guard.settle(attempt, true, end);
        }
        if let Some(guard) = self.budget {
            guard.settle(attempt, None, end);
        }
    }

    /// The call is over ([`Guard::call_finished`]).
    #[inline(always)]
    pub(crate) fn call_finished(&self) {
        if let Some(guard) = self.guard {
            guard.call_finished();
        }
        if let Some(budget) = self.budget {
            budget.call_finished();
        }
    }
}

/// Asks `guard` to admit `attempt` into `permit`; a hold is added to `hold`
/// and to the wait the later guards are asked about.
#[inline(always)]
fn ask<G: Guard + ?Sized>(
    guard: &G,
    attempt: &mut Attempt,
    permit: &mut G::Permit,
    hold: &mut Hold,
) -> Result<(), StopReason> {
    match guard.admit(*attempt) {
        Admission::Go(admitted) => *permit = admitted,
        Admission::Hold { wait, source, permit: admitted } => {
            *permit = admitted;
            *attempt = attempt.lengthened(wait);
            let (before, earlier) = hold.unwrap_or((Duration::ZERO, None));
            *hold = Some((before + wait, source.or(earlier)));
        }
        Admission::Refuse(reason) => return Err(reason),
    }
    Ok(())
}

/// A guard's answer at the send, unless it lets the attempt go: a hold
/// stops the asking until it is over, as a refusal does for good.
#[inline(always)]
fn not_yet(admission: Admission) -> Option<Result<Hold, StopReason>> {
    match admission {
        Admission::Go(()) => None,
        Admission::Hold { wait, source, .. } => Some(Ok(Some((wait, source)))),
        Admission::Refuse(reason) => Some(Err(reason)),
    }
}
