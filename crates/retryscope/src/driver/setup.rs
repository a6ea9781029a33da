//! What a call is driven with, apart from the operation's types: its policy,
//! its names and its guards.

use crate::dependency::DependencyRef;
use crate::overload::Priority;
use crate::policy::Policy;
use crate::shared::MaybeShared;

/// Settings that do not depend on the operation's types. Borrowed handles cost
/// nothing; shared ones let the operation be `'static`.
#[derive(Clone)]
pub(crate) struct Setup<'a> {
    pub(crate) policy: Policy,
    /// The dependency's name and its guards, borrowed: the budget, the
    /// breaker, the pacer, the concurrency limit (a slot is taken when the
    /// attempt is about to be sent, see `Driver::pace`, and given back when
    /// it ends) and the call's further [`Guard`](crate::guard::Guard)s (told
    /// when the call starts and ends, asked before each attempt, told how
    /// each ended). References: a call without guards drops nothing.
    pub(crate) dependency: DependencyRef<'a>,
    pub(crate) operation: MaybeShared<'a, str>,
    /// Which calls the throttle and the limit refuse first.
    pub(crate) priority: Priority,
    pub(crate) seed: Option<u64>,
    /// Whether the attempts overlap (a hedged call): what the observer hears.
    pub(crate) hedged: bool,
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
        }
    }

    /// Whether a guard asks about every attempt before it starts (a breaker,
    /// a concurrency limit, a [`Guard`](crate::guard::Guard)): then no
    /// attempt may start quietly.
    pub(crate) fn admits(&self) -> bool {
        let guards = &self.dependency;
        guards.breaker.is_some() || guards.limiter.is_some() || guards.guard.is_some()
    }
}
