//! What a rate-limited storm found, per policy: the figures, the table and
//! the target.

use crate::storm::server::SLICE;
use retryscope::RetryError;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The target the pacer is held to: at most this many attempts in 1,000
/// answered 429…
pub const TARGET_429_PER_1000: f64 = 10.0;
/// … and at least this share of the quota served.
pub const TARGET_GOODPUT_SHARE: f64 = 0.95;

/// Why a call failed, as its caller saw it.
pub mod reason {
    /// The pacer refused to send it: its wait would not fit in its deadline
    /// ([`StopReason::RateLimited`](retryscope::StopReason::RateLimited)).
    pub const RATE_LIMITED: &str = retryscope_otel::names::STOP_RATE_LIMITED;
    /// The server's 429 handed back: retries ran out on it, the budget
    /// refused the retry, or the next wait would cross the deadline.
    pub const ANSWERED_429: &str = "429";
    /// Another status handed back.
    pub const OTHER_STATUS: &str = "other_status";
    /// A transport error the engine passed through.
    pub const TRANSPORT: &str = "transport";
    /// Still in flight when the run's drain ran out.
    pub const UNFINISHED: &str = "unfinished";
}

/// Everything measured for one policy.
#[derive(Debug, Clone, Serialize)]
pub struct RateRun {
    /// The policy's name.
    pub policy: &'static str,
    /// Attempts the server received, per slice.
    pub server_received: Vec<u32>,
    /// Of those, the ones answered 200, per slice.
    pub server_served: Vec<u32>,
    /// Logical requests the clients started.
    pub calls: u64,
    /// Of those, the ones that ended in a 200.
    pub succeeded: u64,
    /// The others, by [`reason`].
    pub failed_by_reason: BTreeMap<&'static str, u64>,
    /// Latency of each finished call in seconds, from when it was due to be
    /// sent until its answer was read (time held by a pacer included).
    #[serde(skip)]
    pub latencies_ok: Vec<f64>,
    /// The same for the calls that failed.
    #[serde(skip)]
    pub latencies_failed: Vec<f64>,
    /// The pace the policy's pacer had in force at the end of each slice, in
    /// requests per second (`Pacer::allowed_rate`: 0 behind a gate, the
    /// quota's spacing, or the adaptive limiter's rate, whichever is lower);
    /// `null` where nothing was in force; empty without a pacer.
    pub allowed_rate: Vec<Option<f64>>,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateSummary {
    /// The policy's name.
    pub policy: &'static str,
    /// Attempts the server received.
    pub attempts: u64,
    /// Of those, the ones answered 429.
    pub answered_429: u64,
    /// 429s per 1,000 attempts.
    pub per_1000_429: f64,
    /// 200s per second over the whole quota windows of the load.
    pub goodput_per_s: f64,
    /// `goodput_per_s` as a share of the quota.
    pub goodput_share: f64,
    /// Logical requests started.
    pub calls: u64,
    /// Of those, the ones that ended in a 200.
    pub succeeded: u64,
    /// The others.
    pub failed: u64,
    /// `failed / calls`.
    pub failed_share: f64,
    /// The failed calls by reason.
    pub failed_by_reason: BTreeMap<&'static str, u64>,
    /// 99th percentile of the successful calls' latency, in seconds.
    pub p99_ok_s: Option<f64>,
    /// 99th percentile of every finished call's latency, in seconds.
    pub p99_all_s: Option<f64>,
    /// Median of the successful calls' latency, in seconds.
    pub p50_ok_s: Option<f64>,
    /// Whether the run met the pacer's target (≤ 1 % 429s, ≥ 95 % of the quota).
    pub meets_target: bool,
}

/// The failure reason of a call's result (`Ok` is the status of an answer
/// read to the end); `None` for a success.
pub fn failure_reason(
    result: &Result<reqwest::StatusCode, reqwest_middleware::Error>,
) -> Option<&'static str> {
    match result {
        Ok(status) if status.is_success() => None,
        Ok(status) if status.as_u16() == 429 => Some(reason::ANSWERED_429),
        Ok(_) => Some(reason::OTHER_STATUS),
        Err(reqwest_middleware::Error::Middleware(error)) => {
            match error.downcast_ref::<RetryError<reqwest_middleware::Error>>() {
                Some(gave_up) => Some(retryscope_otel::stop_reason_str(gave_up.reason())),
                None => Some(reason::TRANSPORT),
            }
        }
        Err(reqwest_middleware::Error::Reqwest(_)) => Some(reason::TRANSPORT),
    }
}

impl RateRun {
    /// The report row for this run, whose load lasted `load`, against a
    /// quota of `quota_per_s` in windows of `window`.
    pub fn summary(&self, load: Duration, window: Duration, quota_per_s: f64) -> RateSummary {
        let attempts: u64 = self.server_received.iter().map(|&n| u64::from(n)).sum();
        let served: u64 = self.server_served.iter().map(|&n| u64::from(n)).sum();
        let answered_429 = attempts - served.min(attempts);
        let (goodput_per_s, goodput_share) = goodput(&self.server_served, load, window, quota_per_s);
        let failed: u64 = self.failed_by_reason.values().sum();
        let per_1000_429 = ratio(answered_429, attempts) * 1_000.0;
        let mut all = self.latencies_ok.clone();
        all.extend(&self.latencies_failed);
        RateSummary {
            policy: self.policy,
            attempts,
            answered_429,
            per_1000_429,
            goodput_per_s,
            goodput_share,
            calls: self.calls,
            succeeded: self.succeeded,
            failed,
            failed_share: ratio(failed, self.calls),
            failed_by_reason: self.failed_by_reason.clone(),
            p99_ok_s: percentile(self.latencies_ok.clone(), 0.99),
            p99_all_s: percentile(all, 0.99),
            p50_ok_s: percentile(self.latencies_ok.clone(), 0.5),
            meets_target: per_1000_429 <= TARGET_429_PER_1000 && goodput_share >= TARGET_GOODPUT_SHARE,
        }
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

/// 200s per second over the whole quota windows within `load`, and that as a
/// share of the quota. The windows start with the server, as the load does.
pub(crate) fn goodput(served: &[u32], load: Duration, window: Duration, quota_per_s: f64) -> (f64, f64) {
    let windows = (load.as_nanos() / window.as_nanos().max(1)) as u32;
    let span = window * windows;
    let slices = usize::try_from(span.as_millis() / SLICE.as_millis()).unwrap_or(usize::MAX);
    let ok: u64 = served.iter().take(slices).map(|&n| u64::from(n)).sum();
    if span.is_zero() || quota_per_s <= 0.0 {
        return (0.0, 0.0);
    }
    let per_s = ok as f64 / span.as_secs_f64();
    (per_s, per_s / quota_per_s)
}

/// The nearest-rank `q` quantile of `values`.
pub(crate) fn percentile(mut values: Vec<f64>, q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values.get(rank - 1).copied()
}

/// The report as a text table.
pub fn table(rows: &[RateSummary]) -> String {
    let mut out = format!(
        "{:<10} {:>12} {:>11} {:>9} {:>9} {:>10} {:>7} {:>14}  {}\n",
        "policy",
        "429s / 1000",
        "goodput/s",
        "of quota",
        "p99 ok",
        "p99 all",
        "calls",
        "failed",
        "failed by reason"
    );
    for r in rows {
        let reasons: Vec<String> = r.failed_by_reason.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!(
            "{:<10} {:>12.1} {:>11.1} {:>8.1}% {:>9} {:>10} {:>7} {:>14}  {}\n",
            r.policy,
            r.per_1000_429,
            r.goodput_per_s,
            r.goodput_share * 100.0,
            seconds(r.p99_ok_s),
            seconds(r.p99_all_s),
            r.calls,
            format!("{} ({:.1}%)", r.failed, r.failed_share * 100.0),
            if reasons.is_empty() { "-".to_owned() } else { reasons.join(", ") },
        ));
    }
    out
}

fn seconds(s: Option<f64>) -> String {
    s.map_or_else(|| "-".to_owned(), |s| format!("{s:.2} s"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentile_is_the_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(values.clone(), 0.99), Some(99.0));
        assert_eq!(percentile(values, 0.5), Some(50.0));
        assert_eq!(percentile(vec![3.0], 0.99), Some(3.0));
        assert_eq!(percentile(Vec::new(), 0.99), None);
    }

    #[test]
    fn goodput_counts_the_whole_windows_of_the_load_only() {
        // 20 per slice = 200/s for 2.5 s, then the drain serves more.
        let mut served = vec![20; 25];
        served.extend([50; 10]);
        let (per_s, share) = goodput(&served, Duration::from_secs_f64(2.5), Duration::from_secs(1), 200.0);
        assert_eq!((per_s, share), (200.0, 1.0));
        let (per_s, _) = goodput(&served, Duration::from_secs(4), Duration::from_secs(2), 100.0);
        assert_eq!(per_s, (25.0 * 20.0 + 10.0 * 50.0) / 4.0, "two whole 2-s windows: every slice");
        let (per_s, _) = goodput(&served, Duration::from_secs(3), Duration::from_secs(2), 100.0);
        assert_eq!(per_s, 20.0 * 20.0 / 2.0, "one whole 2-s window in 3 s");
    }

    #[test]
    fn a_summary_counts_429s_per_1000_attempts_and_checks_the_target() {
        let run = RateRun {
            policy: "pacer",
            server_received: vec![20; 10],
            server_served: vec![19; 10],
            calls: 200,
            succeeded: 190,
            failed_by_reason: BTreeMap::from([(reason::RATE_LIMITED, 10)]),
            latencies_ok: vec![0.1; 190],
            latencies_failed: vec![0.0; 10],
            allowed_rate: Vec::new(),
        };
        let row = run.summary(Duration::from_secs(1), Duration::from_secs(1), 200.0);
        assert_eq!((row.attempts, row.answered_429), (200, 10));
        assert_eq!(row.per_1000_429, 50.0);
        assert_eq!(row.goodput_share, 0.95);
        assert_eq!(row.failed_share, 0.05);
        assert!(!row.meets_target, "5 % answered 429 is above the target");
    }
}
