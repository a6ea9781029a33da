//! What a call is driven with, apart from the operation's types: its policy,
//! its names and its guards.

use crate::breaker::CircuitBreaker;
use crate::pace::Pacer;
use crate::policy::Policy;
use crate::shared::{MaybeShared, Shared};
use crate::throttle::Throttle;

/// Settings that do not depend on the operation's types. Borrowed handles cost
/// nothing; shared ones let the operation be `'static`.
#[derive(Clone)]
pub(crate) struct Setup<'a> {
    pub(crate) policy: Policy,
    pub(crate) dependency: Shared<'a, str>,
    pub(crate) operation: MaybeShared<'a, str>,
    pub(crate) throttle: MaybeShared<'a, dyn Throttle + 'a>,
    pub(crate) breaker: MaybeShared<'a, CircuitBreaker>,
    pub(crate) pacer: MaybeShared<'a, Pacer>,
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
            seed: None,
            hedged: false,
        }
    }
}
