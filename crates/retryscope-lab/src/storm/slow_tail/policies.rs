//! The hedging policies the slow-tail storm compares: none, a fixed delay, and
//! a delay read from the dependency's recent latencies.

use retryscope::SettingError;
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Copies a hedged call may send, the first included: one hedge, as tower's
/// `hedge` middleware sends. With a 2 % tail, a second hedge would be slow
/// too only 0.04 % of the time; it would add load for almost nothing.
pub const COPIES: u32 = 2;

/// Each copy is cut after this: longer than a slow answer, so that no policy
/// turns the tail into failures.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

/// The whole call is cut after this.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// The default quantile of the percentile policy (`--hedge-quantile`).
pub const QUANTILE: f64 = 0.95;

/// The percentile policy reads its delay from windows this long: a run of the
/// storm lasts seconds, and the default 10-s window would never complete.
pub const WINDOW: Duration = Duration::from_secs(1);

/// One contender in the slow-tail storm. Every one goes through the same
/// engine (`.hedge(policy)`) with its own retry budget (the default: 10 % of
/// requests, at least 10 per second), the same attempt timeout and deadline;
/// they differ only in when a hedge goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HedgingPolicy {
    /// One copy per call (`max_copies(1)`): the baseline.
    None,
    /// A hedge after a fixed delay (`--hedge-delay-ms`).
    Fixed,
    /// A hedge after a percentile (p95 by default) of the latencies of the
    /// last complete 1-s window of successful copies
    /// (`HedgeDelay::percentile(0.95)`), the fixed delay until a window with
    /// at least 20 latencies has completed.
    Percentile,
}

impl HedgingPolicy {
    /// Every policy, in the order the report shows them.
    pub const ALL: [HedgingPolicy; 3] =
        [HedgingPolicy::None, HedgingPolicy::Fixed, HedgingPolicy::Percentile];

    /// The name used on the command line, in reports and as `retryscope.operation`.
    pub const fn name(self) -> &'static str {
        match self {
            HedgingPolicy::None => "none",
            HedgingPolicy::Fixed => "fixed",
            HedgingPolicy::Percentile => "percentile",
        }
    }

    /// The engine's policy, hedging after `fixed` (the fixed policy's delay,
    /// and the percentile policy's until it has latencies to read) or the
    /// `quantile` of the recent latencies.
    pub fn policy(self, fixed: Duration, quantile: f64) -> Result<HedgePolicy, SettingError> {
        let builder = HedgePolicy::builder().attempt_timeout(ATTEMPT_TIMEOUT).deadline(DEADLINE);
        match self {
            HedgingPolicy::None => builder.max_copies(1).delay(HedgeDelay::Fixed(fixed)),
            HedgingPolicy::Fixed => builder.max_copies(COPIES).delay(HedgeDelay::Fixed(fixed)),
            HedgingPolicy::Percentile => builder
                .max_copies(COPIES)
                .delay(HedgeDelay::percentile(quantile).fallback(fixed).window(WINDOW)),
        }
        .build()
    }
}

impl fmt::Display for HedgingPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HedgingPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|p| p.name()).collect();
            format!("unknown policy {s:?}; expected one of {}", names.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_builds_and_only_the_baseline_sends_a_single_copy() {
        for policy in HedgingPolicy::ALL {
            let built =
                policy.policy(Duration::from_millis(50), QUANTILE).expect("the storm's policies build");
            assert_eq!(built.max_copies(), if policy == HedgingPolicy::None { 1 } else { COPIES });
            assert_eq!(built.attempt_timeout(), Some(ATTEMPT_TIMEOUT));
            assert_eq!(policy.name().parse::<HedgingPolicy>(), Ok(policy));
        }
        assert!("tower".parse::<HedgingPolicy>().is_err());
    }
}
