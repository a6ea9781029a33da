//! The pacing policies the rate-limited storm compares: one retry policy, three
//! ways of honouring what the server says about its quota.

use crate::storm::policies::{ATTEMPT_TIMEOUT, exponential};
use retryscope::{Jitter, Pacer, Policy, PolicyError};
use retryscope_reqwest::prelude::*;
use retryscope_reqwest::{RetryMiddleware, RetryMiddlewareBuilder};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One contender in the rate-limited storm. All three share the retry policy
/// of the other storms' `full-jitter` (6 attempts, 100 ms doubling to 2 s,
/// full jitter, 2 s per attempt) with the storm's `--deadline`, and the
/// middleware's default retry budget and breaker (which counts no 429): they
/// differ only in their pacer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RatePolicy {
    /// No pacer (`no_pacer()`): every call on its own, a 429's `Retry-After`
    /// honoured by the call that got it, for its own retry.
    PerCall,
    /// The default middleware: a [`Pacer::new`] per dependency, fed by every
    /// response (`Retry-After` gates, `RateLimit` quota spacing).
    Pacer,
    /// `pacer_per_dependency(Pacer::adaptive)`: the same, plus the AWS SDKs'
    /// adaptive send-rate limiter.
    Adaptive,
}

impl RatePolicy {
    /// Every policy, in the order the report shows them.
    pub const ALL: [RatePolicy; 3] = [RatePolicy::PerCall, RatePolicy::Pacer, RatePolicy::Adaptive];

    /// The name used on the command line, in reports and as `retryscope.operation`.
    pub const fn name(self) -> &'static str {
        match self {
            RatePolicy::PerCall => "per-call",
            RatePolicy::Pacer => "pacer",
            RatePolicy::Adaptive => "adaptive",
        }
    }

    /// The engine policy: calls bounded by `deadline`, attempts and waits together.
    pub fn policy(self, deadline: Duration) -> Result<Policy, PolicyError> {
        let base = Policy::builder().attempt_timeout(ATTEMPT_TIMEOUT).deadline(deadline);
        exponential(base).jitter(Jitter::Full).build()
    }

    /// The middleware for this policy, with calls bounded by `deadline`, and
    /// its pacer, if it has one, to watch the pace in force.
    ///
    /// The storm calls one dependency, so the pacer the middleware keeps for
    /// it is this one: the factory hands out clones, which share one state.
    pub fn middleware(
        self,
        deadline: Duration,
    ) -> Result<(RetryMiddlewareBuilder, Option<Pacer>), PolicyError> {
        let builder = RetryMiddleware::builder(self.policy(deadline)?);
        let pacer = match self {
            RatePolicy::PerCall => return Ok((builder.no_pacer(), None)),
            RatePolicy::Pacer => Pacer::new(),
            RatePolicy::Adaptive => Pacer::adaptive(),
        };
        let shared = pacer.clone();
        Ok((builder.pacer_per_dependency(move || shared.clone()), Some(pacer)))
    }
}

impl fmt::Display for RatePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for RatePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|p| p.name()).collect();
            format!("unknown policy {s:?}; expected one of {}", names.join(", "))
        })
    }
}
