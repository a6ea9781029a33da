//! One attempt in flight and what its end says about the dependency: the
//! pieces a retry's attempt and a hedge's copy share.

use crate::dependency::Permits;
use crate::guard::{Attempt, End};
use crate::observe::{AttemptScope, Observer, OperationObserver};
use crate::verdict::Verdict;
use std::time::Instant;

/// How an attempt that ended with `verdict` ended, as the guards hear it:
/// what it says about the dependency.
#[inline]
pub(super) fn end_of(verdict: Verdict) -> End {
    match verdict {
        Verdict::Success => End::Succeeded,
        // A 404 is a healthy server answering.
        Verdict::Permanent { .. } => End::Answered,
        // A rate limit is no outage, nor is a database conflict
        // (`40001`, `40P01`): the breaker hears nothing; a retry budget
        // counts it as the failure it is for the caller.
        Verdict::Retryable { error, .. } if error.is_throttling() || error.is_conflict() => End::Throttled,
        Verdict::Retryable { .. } | Verdict::Unrepeatable { .. } | Verdict::RetriedElsewhere { .. } => {
            End::Failed
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
