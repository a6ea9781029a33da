//! What a call is driven with, apart from the operation's types: its policy,
//! its names and its guards.

use crate::breaker::CircuitBreaker;
use crate::budget::Budget;
use crate::guard::Guard;
use crate::overload::{ConcurrencyLimiter, Priority};
use crate::pace::Pacer;
use crate::policy::Policy;
use crate::shared::{MaybeShared, Shared};

/// Settings that do not depend on the operation's types. Borrowed handles cost
/// nothing; shared ones let the operation be `'static`.
#[derive(Clone)]
pub(crate) struct Setup<'a> {
    pub(crate) policy: Policy,
    pub(crate) dependency: Shared<'a, str>,
    pub(crate) operation: MaybeShared<'a, str>,
    pub(crate) throttle: MaybeShared<'a, dyn Budget + 'a>,
    pub(crate) breaker: MaybeShared<'a, CircuitBreaker>,
    pub(crate) pacer: MaybeShared<'a, Pacer>,
    /// The client-side adaptive throttle, asked in the admission as the
    /// breaker is.
    /// The adaptive concurrency limit: a slot is taken when the attempt is
    /// about to be sent (see `Driver::pace`) and given back when it ends.
    pub(crate) limiter: MaybeShared<'a, ConcurrencyLimiter>,
    /// The call's guard (see [`guard`](crate::guard)): told when the call
    /// starts and ends, asked before each attempt, told how each ended.
    pub(crate) guard: MaybeShared<'a, dyn Guard + 'a>,
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
            dependency: Shared::Borrowed("unknown"),
            operation: MaybeShared::None,
            throttle: MaybeShared::None,
            breaker: MaybeShared::None,
            pacer: MaybeShared::None,
            limiter: MaybeShared::None,
            guard: MaybeShared::None,
            priority: Priority::Critical,
            seed: None,
            hedged: false,
        }
    }

    /// Whether a guard asks about every attempt before it starts (a breaker,
    /// an adaptive throttle, a concurrency limit, a [`Guard`]): then no
    /// attempt may start quietly.
    pub(crate) fn admits(&self) -> bool {
        self.breaker.is_some() || self.limiter.is_some() || self.guard.is_some()
    }
}
