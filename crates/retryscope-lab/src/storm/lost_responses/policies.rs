//! The client policies the lost-responses storm compares: no retry, a POST
//! retried blindly, and a POST retried with an idempotency key against a
//! server that honours it.

use retryscope::classify::HttpClassifier;
use retryscope::{Jitter, Policy, PolicyError};
use retryscope_reqwest::prelude::*;
use retryscope_reqwest::{RetryMiddleware, RetryMiddlewareBuilder, RetryOptions};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Attempts a retrying policy makes per operation, counting the first: with
/// 30 % of responses lost, all ten are lost for one operation in 170,000.
pub const ATTEMPTS: u32 = 10;

/// How the clients of the lost-responses storm send their POSTs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostPolicy {
    /// One attempt: a lost response is a failed operation, though the server
    /// did the work.
    NoRetry,
    /// Every POST marked [`idempotent`](RetryOptions::idempotent) and
    /// no key: what "just retry it" does to an operation that is not idempotent.
    RetryWithoutKeys,
    /// [`idempotency_keys`](retryscope_reqwest::prelude::WithHttpSettings::idempotency_keys) on the
    /// client, and the server behind `retryscope_idempotency::IdempotencyLayer`
    /// with a `MemoryStore`; a 409 (the first attempt still running) is retried.
    RetryWithKeys,
}

impl LostPolicy {
    /// Every policy, in the order the report shows them.
    pub const ALL: [LostPolicy; 3] =
        [LostPolicy::NoRetry, LostPolicy::RetryWithoutKeys, LostPolicy::RetryWithKeys];

    /// The name used on the command line, in reports and as `retryscope.operation`.
    pub const fn name(self) -> &'static str {
        match self {
            LostPolicy::NoRetry => "no-retry",
            LostPolicy::RetryWithoutKeys => "retry-no-keys",
            LostPolicy::RetryWithKeys => "retry-keys",
        }
    }

    /// Whether the server runs behind the idempotency layer for this policy.
    pub const fn keyed_server(self) -> bool {
        matches!(self, LostPolicy::RetryWithKeys)
    }

    /// The engine policy: one attempt, or [`ATTEMPTS`] with 10 ms doubling to
    /// 100 ms, full jitter, 2 s per attempt and 20 s per operation.
    pub fn policy(self) -> Result<Policy, PolicyError> {
        let attempts = match self {
            LostPolicy::NoRetry => 1,
            LostPolicy::RetryWithoutKeys | LostPolicy::RetryWithKeys => ATTEMPTS,
        };
        Policy::builder()
            .max_attempts(attempts)
            .base_delay(Duration::from_millis(10))
            .max_delay(Duration::from_millis(100))
            .jitter(Jitter::Full)
            .attempt_timeout(Duration::from_secs(2))
            .deadline(Duration::from_secs(20))
            .build()
    }

    /// The middleware for this policy. No budget and no breaker: here every
    /// failure is one lost response of a healthy server, and the subject is
    /// what a retry runs twice, not how a fleet backs off an outage (the
    /// default budget would refuse most of these retries).
    pub fn middleware(self) -> Result<RetryMiddlewareBuilder, PolicyError> {
        let builder = RetryMiddleware::builder(self.policy()?).no_budget().no_breaker();
        Ok(match self {
            LostPolicy::NoRetry | LostPolicy::RetryWithoutKeys => builder,
            // The draft's 409: the first attempt with this key is still running.
            LostPolicy::RetryWithKeys => {
                builder.idempotency_keys().classifier(HttpClassifier::new().retry_status(409))
            }
        })
    }

    /// What each request of this policy carries in its extensions.
    pub fn options(self) -> Option<RetryOptions> {
        match self {
            LostPolicy::RetryWithoutKeys => Some(RetryOptions::new().idempotent()),
            LostPolicy::NoRetry | LostPolicy::RetryWithKeys => None,
        }
    }
}

impl fmt::Display for LostPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LostPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|p| p.name()).collect();
            format!("unknown lost-responses policy {s:?}; expected one of {}", names.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_builds_and_parses_back() {
        for policy in LostPolicy::ALL {
            assert!(policy.middleware().is_ok(), "{policy}");
            assert_eq!(policy.name().parse::<LostPolicy>(), Ok(policy));
        }
        assert!("naive".parse::<LostPolicy>().is_err_and(|e| e.contains("retry-keys")));
        assert_eq!(LostPolicy::NoRetry.policy().map(|p| p.max_attempts()), Ok(1));
    }
}
