//! The policies the storm compares, from naive to fully guarded.

use retryscope::breaker::CircuitBreakerBuilder;
use retryscope::overload::{AdaptiveThrottle, AdaptiveThrottleBuilder, Aimd, ConcurrencyLimiter};
use retryscope::{CircuitBreaker, Jitter, Policy, PolicyError, RetryBudget};
use retryscope_reqwest::prelude::*;
use retryscope_reqwest::{RetryMiddleware, RetryMiddlewareBuilder};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How long every policy waits for one attempt; the server's goodput counts
/// only the answers given within it.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

/// One contender in the storm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StormPolicy {
    /// Immediate retries, bounded only for safety (10 attempts, 1 ms apart): what a
    /// hand-written retry loop does.
    Naive,
    /// Exponential backoff without jitter: clients that failed together retry together.
    Backoff,
    /// Exponential backoff with full jitter.
    FullJitter,
    /// Full jitter plus a retry budget per host (10 % of requests + 10/s).
    Budget,
    /// Full jitter, a budget and a circuit breaker per host, and a fallback
    /// (`degraded`) for every host: the calls that give up — the breaker
    /// open above all — are answered `503 degraded` by the client itself. A
    /// 503 on purpose: the storm's figures count it as not served, as the
    /// give-up it replaces was, and `retryscope_fallbacks_total` shows it.
    Breaker,
    /// Full jitter and the SRE book's client-side adaptive throttle per host,
    /// which rejects first attempts too, locally, as the host accepts fewer.
    Throttled,
    /// Full jitter and an adaptive concurrency limit per host (AIMD, Netflix's
    /// defaults): at most `limit` attempts in flight, the limit cut by a tenth
    /// at every failure and grown by one at every success.
    Limited,
}

impl StormPolicy {
    /// Every policy, in the order the report shows them.
    pub const ALL: [StormPolicy; 7] = [
        StormPolicy::Naive,
        StormPolicy::Backoff,
        StormPolicy::FullJitter,
        StormPolicy::Budget,
        StormPolicy::Breaker,
        StormPolicy::Throttled,
        StormPolicy::Limited,
    ];

    /// The name used on the command line, in reports and as `retryscope.operation`.
    pub const fn name(self) -> &'static str {
        match self {
            StormPolicy::Naive => "naive",
            StormPolicy::Backoff => "backoff",
            StormPolicy::FullJitter => "full-jitter",
            StormPolicy::Budget => "budget",
            StormPolicy::Breaker => "breaker",
            StormPolicy::Throttled => "throttled",
            StormPolicy::Limited => "limited",
        }
    }

    /// The engine policy.
    pub fn policy(self) -> Result<Policy, PolicyError> {
        let base = Policy::builder().attempt_timeout(ATTEMPT_TIMEOUT).deadline(Duration::from_secs(10));
        match self {
            StormPolicy::Naive => base
                .max_attempts(10)
                .base_delay(Duration::from_millis(1))
                .max_delay(Duration::from_millis(1))
                .jitter(Jitter::None)
                .build(),
            StormPolicy::Backoff => exponential(base).jitter(Jitter::None).build(),
            StormPolicy::FullJitter
            | StormPolicy::Budget
            | StormPolicy::Breaker
            | StormPolicy::Throttled
            | StormPolicy::Limited => exponential(base).jitter(Jitter::Full).build(),
        }
    }

    /// The middleware configured for this policy's guards.
    pub fn middleware(self) -> Result<RetryMiddlewareBuilder, String> {
        let builder = RetryMiddleware::builder(self.policy().map_err(|e| e.to_string())?);
        Ok(match self {
            StormPolicy::Naive | StormPolicy::Backoff | StormPolicy::FullJitter => {
                builder.no_budget().no_breaker()
            }
            StormPolicy::Budget => builder.budget_per_dependency(RetryBudget::default).no_breaker(),
            StormPolicy::Throttled => {
                // Checked once here, so the per-host factory below cannot fail.
                throttle().build().map_err(|e| e.to_string())?;
                builder
                    .no_budget()
                    .no_breaker()
                    .adaptive_throttle_per_dependency(|| throttle().build().unwrap_or_default())
            }
            StormPolicy::Limited => builder
                .no_budget()
                .no_breaker()
                .concurrency_limit_per_dependency(|| ConcurrencyLimiter::new(Aimd::default())),
            StormPolicy::Breaker => {
                let breaker = breaker();
                // Checked once here, so the per-host factory below cannot fail.
                breaker.clone().build().map_err(|e| e.to_string())?;
                builder
                    .budget_per_dependency(RetryBudget::default)
                    .breaker_per_dependency(move || breaker.clone().build().unwrap_or_default())
                    .fallback("degraded", degraded)
                    .default_fallback("degraded")
                    .map_err(|e| e.to_string())?
            }
        })
    }
}

/// The breaker policy's fallback: a `503 degraded` made by the client.
fn degraded(_: &retryscope_reqwest::FallbackContext<'_>) -> retryscope_reqwest::FallbackFuture {
    Box::pin(async {
        let mut response = http::Response::new(bytes::Bytes::from_static(b"degraded"));
        *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        Ok(response)
    })
}

/// A breaker sized for a storm of a few seconds: it judges the last 2 s and
/// probes again after 1 s (the defaults, 10 s and 5 s, outlast the whole run).
fn breaker() -> CircuitBreakerBuilder {
    CircuitBreaker::builder()
        .failure_ratio(0.5)
        .min_calls(20)
        .window(Duration::from_secs(2))
        .cool_down(Duration::from_secs(1))
        .half_open_probes(3)
}

/// The SRE book's throttle (K = 2) judging the last 2 s, sized for a storm of
/// a few seconds as the breaker is: its default two-minute window outlasts the
/// whole run, and a throttle counts its own rejections as requests, so a
/// window still full of the outage keeps rejecting long after it (see
/// `retryscope simulate metastable --throttle-window`).
fn throttle() -> AdaptiveThrottleBuilder {
    AdaptiveThrottle::builder().window(Duration::from_secs(2))
}

/// 6 attempts, 100 ms doubling to 2 s.
pub(crate) fn exponential(builder: retryscope::PolicyBuilder) -> retryscope::PolicyBuilder {
    builder.max_attempts(6).base_delay(Duration::from_millis(100)).max_delay(Duration::from_secs(2))
}

impl fmt::Display for StormPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for StormPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|p| p.name()).collect();
            format!("unknown policy {s:?}; expected one of {}", names.join(", "))
        })
    }
}
