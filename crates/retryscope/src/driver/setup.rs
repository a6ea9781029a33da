//! What a call is driven with, apart from the operation's types: its policy,
//! its names and its guards.

use crate::budget::Budget;
use crate::dependency::DependencyRef;
use crate::guard::{Attempt, End, Guard};
use crate::overload::Priority;
use crate::policy::Policy;
use crate::shared::{MaybeShared, Shared};

/// Settings that do not depend on the operation's types. Borrowed handles cost
/// nothing; shared ones let the operation be `'static`.
#[derive(Clone)]
pub(crate) struct Setup<'a> {
    pub(crate) policy: Policy,
    /// The dependency's name and its guards, borrowed, asked as one
    /// [`Guard`](crate::guard::Guard) ([`DependencyRef::guards`]): told when
    /// the call starts and ends, asked as each attempt is planned and as it
    /// is sent, told how each ended. References: a call without guards
    /// drops nothing.
    pub(crate) dependency: DependencyRef<'a>,
    pub(crate) operation: MaybeShared<'a, str>,
    /// Which calls the throttle and the limit refuse first.
    pub(crate) priority: Priority,
    pub(crate) seed: Option<u64>,
    /// Whether the attempts overlap (a hedged call): what the observer hears.
    pub(crate) hedged: bool,
    /// The number, in the work it retries, of the call's first attempt: 1
    /// for a fresh call ([`Retry::resuming`](crate::Retry::resuming)).
    pub(crate) resumes: u32,
}

impl<'a> Setup<'a> {
    pub(crate) fn new(policy: Policy) -> Self {
        Self {
            policy,
            dependency: DependencyRef::from("unknown"),
            operation: MaybeShared::None,
            priority: Priority::Critical,
            seed: None,
            hedged: false,
            resumes: 1,
        }
    }

    /// The call's first attempt as its guards see it: a retry of the work
    /// it resumes, if it resumes one.
    pub(crate) fn first_attempt(&self) -> Attempt {
        if self.resumes > 1 { Attempt::retry(self.resumes) } else { Attempt::first() }
    }

    /// Whether a guard must hear of every attempt (a breaker, a concurrency
    /// limit, a further [`Guard`](crate::guard::Guard)): then no attempt may
    /// start quietly, booked only if it fails. A budget counts the request
    /// and a success alike, and a pacer paces the send, booked or not — but
    /// a resumed call's first attempt is a retry, which a budget charges.
    pub(crate) fn admits(&self) -> bool {
        let guards = &self.dependency;
        guards.breaker.is_some() || guards.limiter.is_some() || guards.guard.is_some() || self.resumes > 1
    }

    /// The setup as the async fast path keeps it ([`QuietSetup`]), if its
    /// first attempt may start quietly with no pacer to ask — no guard but a
    /// budget, not a resumed call — and it borrows its names.
    #[inline]
    pub(crate) fn quiet(&self) -> Option<QuietSetup<'a>> {
        let Shared::Borrowed(dependency) = self.dependency.name else { return None };
        let operation = match self.operation {
            MaybeShared::None => None,
            MaybeShared::Borrowed(operation) => Some(operation),
            MaybeShared::Owned(_) => return None,
        };
        if self.admits() || self.dependency.pacer.is_some() {
            return None;
        }
        Some(QuietSetup {
            policy: self.policy,
            budget: self.dependency.budget,
            dependency,
            operation,
            priority: self.priority,
            seed: self.seed,
            hedged: self.hedged,
        })
    }
}

/// A [`Setup`] with no guard but a budget and borrowed names: what a call
/// keeps until it needs its driver (see `future::Phase::Fresh`). `Copy`, so
/// it holds nothing to drop: a future that finishes on the fast path, as most
/// calls do, has no name to check for an `Arc` as it is dropped.
#[derive(Clone, Copy)]
pub(crate) struct QuietSetup<'a> {
    pub(crate) policy: Policy,
    budget: Option<&'a (dyn Budget + 'a)>,
    dependency: &'a str,
    operation: Option<&'a str>,
    priority: Priority,
    seed: Option<u64>,
    hedged: bool,
}

impl QuietSetup<'_> {
    /// A quiet call begins: only its budget, if it has one, hears it.
    #[inline(always)]
    pub(crate) fn call_started(&self) {
        if let Some(budget) = self.budget {
            budget.call_started();
        }
    }

    /// A quiet call's first attempt succeeded at once, and the call is over:
    /// its budget, if any, hears both.
    #[inline(always)]
    pub(crate) fn call_succeeded(&self, attempt: Attempt) {
        if let Some(budget) = self.budget {
            budget.settle(attempt, None, End::Succeeded);
            budget.call_finished();
        }
    }
}

impl<'a> From<QuietSetup<'a>> for Setup<'a> {
    #[inline]
    fn from(quiet: QuietSetup<'a>) -> Self {
        let QuietSetup { policy, budget, dependency, operation, priority, seed, hedged } = quiet;
        // The guards and the resumed attempt `Setup::quiet` found absent.
        let mut guards = DependencyRef::from(dependency);
        guards.budget = budget;
        Self {
            policy,
            dependency: guards,
            operation: operation.map_or(MaybeShared::None, MaybeShared::Borrowed),
            priority,
            seed,
            hedged,
            resumes: 1,
        }
    }
}
