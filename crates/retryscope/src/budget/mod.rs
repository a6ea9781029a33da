//! Retry budgets: fleet-level caps on how many retries may start.
//!
//! Three [`Budget`] implementations, and a
//! [`Guard`](crate::guard::Guard) ([`InFlightBudget`], Envoy's: retries in
//! flight at most a share of the calls in progress):
//!
//! - [`RetryBudget`](crate::RetryBudget) caps retries to a fraction of recent requests plus a small
//!   floor, over a sliding window (Finagle / linkerd style). This is the default
//!   the design calls for: 10 % of requests plus 10 retries per second over 10 s.
//! - [`RetryQuota`] is the AWS SDKs' retry quota: each retry priced by its
//!   cause, a successful retry refunded.
//! - [`TokenBucket`](crate::TokenBucket) is gRPC's retry throttling (gRFC A6): failures drain a
//!   bucket, successes refill it, and retries stop while it is half empty or
//!   worse.
//!
//! Both are cheap to clone (clones share state), `Send + Sync`, and lock-free:
//! every operation is a few atomic loads and compare-exchanges, never a lock.

use std::fmt;
use std::time::Duration;

use crate::setting::SettingValue;

/// Fixed-point scale: budgets count in thousandths of a token so that
/// fractional deposits (`ratio` per request) stay integral inside atomics.
const MILLI: u64 = 1_000;

/// The shortest window a [`RetryBudget`] accepts.
pub(crate) const MIN_WINDOW: Duration = Duration::from_secs(1);
/// The longest window a [`RetryBudget`] accepts.
pub(crate) const MAX_WINDOW: Duration = Duration::from_secs(3_600);
/// The largest `min_per_second` a [`RetryBudget`] accepts.
pub(crate) const MAX_MIN_PER_SECOND: u32 = 1_000_000;
/// The largest `max_tokens` a [`TokenBucket`](crate::TokenBucket) accepts (gRPC's own limit).
pub const MAX_TOKENS: u32 = 1_000;

/// What a budget setting accepts, in a refusal's message: the retry budget's
/// `ratio` in `0..=1`, `min_per_second` at most 1,000,000, `window` within 1 s
/// to 1 h; the token bucket's `max_tokens` within `1..=`[`MAX_TOKENS`] and
/// `token_ratio` at least 0.001; the retry quota's and the in-flight budget's
/// as their builders say.
pub(crate) fn describe(
    setting: &'static str,
    value: SettingValue,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    // What each setting accepts, from the constants that bound it.
    match setting {
        "ratio" => write!(f, "retry budget ratio must be within 0..=1"),
        "min_per_second" => write!(f, "retry budget min_per_second must be at most {MAX_MIN_PER_SECOND}"),
        "window" => write!(f, "retry budget window must be within {MIN_WINDOW:?}..={MAX_WINDOW:?}"),
        "max_tokens" => write!(f, "token bucket max_tokens must be within 1..={MAX_TOKENS}"),
        "token_ratio" => write!(f, "token bucket token_ratio must be a finite number of at least 0.001"),
        "capacity" => write!(f, "retry quota capacity must be within 1..={MAX_QUOTA}"),
        "retry_cost" | "timeout_cost" | "throttled_cost" => {
            write!(f, "retry quota {setting} must be within 1..=the quota's capacity")
        }
        "success_increment" => {
            write!(f, "retry quota success_increment must be at most the quota's capacity")
        }
        "share" => write!(f, "in-flight budget share must be within 0.001..=1"),
        "min" => write!(f, "in-flight budget min must be at most {}", in_flight::InFlightBudget::MAX_MIN),
        _ => write!(f, "{setting} must be in range"),
    }?;
    write!(f, ", got {value}")
}

/// Converts a ratio already known to lie in `0..=1` to thousandths, rounding
/// to nearest so that e.g. `0.1` is exactly 100 whatever its binary error.
fn to_milli(ratio: f64) -> u64 {
    // In range by the callers' validation, so the cast cannot truncate.
    (ratio * MILLI as f64).round() as u64
}

mod contract;
mod guard;
mod in_flight;
// `RetryBudget` and `TokenBucket` have one public path, the crate root's.
pub(crate) mod retry_budget;
mod retry_quota;
mod share;
#[cfg(test)]
mod tests;
pub(crate) mod token_bucket;

pub use contract::{Budget, RetryCause};
#[cfg(test)]
pub(crate) use guard::AVAILABLE;
pub use in_flight::InFlightBudget;
pub use retry_budget::RetryBudgetBuilder;
use retry_quota::MAX_QUOTA;
pub use retry_quota::{RetryQuota, RetryQuotaBuilder};
pub use share::{BudgetShare, SharedBudget};
pub use token_bucket::TokenBucketBuilder;
