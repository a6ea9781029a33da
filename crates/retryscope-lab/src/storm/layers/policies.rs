//! The policies the layered storm compares: every service retrying, retrying
//! at one layer, and a retry budget at every layer.

use retryscope::{Jitter, Policy, PolicyError, RetryBudget};
use retryscope_reqwest::prelude::*;
use retryscope_reqwest::{RetryMiddleware, RetryMiddlewareBuilder};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Attempts each service makes per call it serves, counting the first.
pub const ATTEMPTS: u32 = 4;

/// How every service of the chain retries its calls to the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerPolicy {
    /// Every service retries: 4 attempts, backoff with full jitter, no budget
    /// and no breaker — the default of most stacks.
    PerLayer,
    /// The same, with
    /// [`retry_at_one_layer`](RetryMiddlewareBuilder::retry_at_one_layer) at
    /// every service.
    OneLayer,
    /// The same as `per-layer`, with the default retry budget per dependency
    /// at every service.
    Budget,
}

impl LayerPolicy {
    /// Every policy, in the order the report shows them.
    pub const ALL: [LayerPolicy; 3] = [LayerPolicy::PerLayer, LayerPolicy::OneLayer, LayerPolicy::Budget];

    /// The name used on the command line and in reports.
    pub const fn name(self) -> &'static str {
        match self {
            LayerPolicy::PerLayer => "per-layer",
            LayerPolicy::OneLayer => "one-layer",
            LayerPolicy::Budget => "budget",
        }
    }

    /// The engine policy every service uses: 4 attempts, 25 ms doubling to
    /// 250 ms with full jitter. Short waits keep a user request's whole tree of
    /// retries well inside one attempt timeout of the service above.
    pub fn policy(self) -> Result<Policy, PolicyError> {
        Policy::builder()
            .max_attempts(ATTEMPTS)
            .base_delay(Duration::from_millis(25))
            .max_delay(Duration::from_millis(250))
            .jitter(Jitter::Full)
            .attempt_timeout(Duration::from_secs(2))
            .deadline(Duration::from_secs(10))
            .build()
    }

    /// The middleware of a service under this policy.
    pub fn middleware(self) -> Result<RetryMiddlewareBuilder, PolicyError> {
        let builder = RetryMiddleware::builder(self.policy()?).no_breaker();
        Ok(match self {
            LayerPolicy::PerLayer => builder.no_budget(),
            LayerPolicy::OneLayer => builder.no_budget().retry_at_one_layer(),
            LayerPolicy::Budget => builder.budget_per_dependency(RetryBudget::default),
        })
    }
}

impl fmt::Display for LayerPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LayerPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|p| p.name()).collect();
            format!("unknown layered policy {s:?}; expected one of {}", names.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_builds_and_parses_back() {
        for policy in LayerPolicy::ALL {
            assert!(policy.middleware().is_ok(), "{policy}");
            assert_eq!(policy.name().parse::<LayerPolicy>(), Ok(policy));
        }
        assert!("naive".parse::<LayerPolicy>().is_err_and(|e| e.contains("per-layer")));
    }
}
