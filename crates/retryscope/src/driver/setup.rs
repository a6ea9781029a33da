//! What a call is driven with, apart from the operation's types: its policy,
//! its names and its guards.

use crate::dependency::DependencyRef;
use crate::guard::Attempt;
use crate::overload::Priority;
use crate::policy::Policy;
use crate::shared::MaybeShared;

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
}
