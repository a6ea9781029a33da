//! One attempt in flight and what its end says about the dependency: the
//! pieces a retry's attempt and a hedge's copy share.

use crate::dependency::Permits;
use crate::guard::{Attempt, End};
use crate::observe::{AttemptScope, Observer, OperationObserver};
use crate::verdict::Verdict;
use std::time::Instant;

/// What an attempt's end says about the dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// It succeeded.
    Healthy,
    /// It answered with a permanent error: healthy, but no success to reward.
    Answered,
    /// It asked the client to slow down (429, `RESOURCE_EXHAUSTED`): a rate
    /// limit, not an outage; or it rolled back a conflicting transaction
    /// (`40001`, `40P01`), which is no outage either. The breaker hears
    /// nothing; a retry budget counts it as the failure it is for the caller.
    Throttling,
    /// It failed transiently.
    Unhealthy,
    /// Nobody knows: the attempt was abandoned.
    Unknown,
}

impl Health {
    /// What an attempt that ended with `verdict` says about the dependency.
    #[inline]
    pub(super) fn of(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Success => Health::Healthy,
            // A 404 is a healthy server answering.
            Verdict::Permanent { .. } => Health::Answered,
            // A database conflict is a healthy server answering too.
            Verdict::Retryable { error, .. } if error.is_throttling() || error.is_conflict() => {
                Health::Throttling
            }
            Verdict::Retryable { .. } | Verdict::Unrepeatable { .. } | Verdict::RetriedElsewhere { .. } => {
                Health::Unhealthy
            }
        }
    }
}

/// The observer's scope of one attempt of an operation observed by an `O`.
pub(crate) type Scope<O> = <<O as Observer>::Operation as OperationObserver>::Attempt;

/// One attempt in flight, as the driver admitted it: what settling it needs.
pub(crate) struct Flight<A> {
    pub(super) number: u32,
    pub(super) started: Option<Instant>,
    pub(super) scope: Option<A>,
    /// The attempt as the dependency's guards admitted it, and what they
    /// keep for it (a breaker's permit, a limit's slot, what the budget
    /// charged): settled with them.
    pub(super) admitted: Option<(Attempt, Permits)>,
}

impl Health {
    /// How an attempt that ended so ended, as a guard hears it.
    pub(super) fn end(self) -> End {
        match self {
            Health::Healthy => End::Succeeded,
            Health::Answered => End::Answered,
            Health::Throttling => End::Throttled,
            Health::Unhealthy => End::Failed,
            Health::Unknown => End::Cancelled,
        }
    }
}

impl<A: AttemptScope> Flight<A> {
    /// Runs `f`, the call that builds this attempt's future, as its scope says.
    pub(crate) fn in_build_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.scope {
            Some(scope) => scope.in_build_scope(f),
            None => f(),
        }
    }

    /// Runs `f` inside this attempt's scope.
    pub(crate) fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.scope {
            Some(scope) => scope.in_scope(f),
            None => f(),
        }
    }
}
