//! What a slow-tail storm found, per hedging policy: the table, the JSON and
//! the target.

use crate::storm::rate_limited::report::percentile;
use serde::Serialize;

/// The percentile policy's target (issue 26): its p99 at least this many times
/// lower than without hedging …
pub const TARGET_P99_CUT: f64 = 5.0;
/// … for at most this much extra load (server requests per call − 1).
pub const TARGET_MAX_EXTRA_LOAD: f64 = 0.10;

/// Everything measured for one policy.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TailRun {
    /// The policy's name.
    pub policy: &'static str,
    /// Calls started.
    pub calls: u64,
    /// Copies the calls sent, the first ones included (counted by the
    /// operation factory, one per copy).
    pub copies: u64,
    /// Calls that ended without a 200.
    pub failed: u64,
    /// Latency of every finished call, from the moment it was due, in
    /// seconds, sorted.
    pub latencies_s: Vec<f64>,
    /// Requests the server received, per 100 ms slice of their arrival.
    pub server_received: Vec<u32>,
    /// Requests the server drew slow.
    pub server_slow: u64,
    /// Requests the server was still working on when their client closed the
    /// connection: the cancelled copies, as the server saw them.
    pub server_abandoned: u64,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TailSummary {
    /// The policy's name.
    pub policy: &'static str,
    /// Calls started.
    pub calls: u64,
    /// Latency percentiles of the finished calls, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Requests the server received.
    pub server_requests: u64,
    /// Server requests per call − 1: the load hedging added.
    pub extra_load: f64,
    /// Copies sent beyond the first, per call (the client's view of the extra
    /// load; the server's differs by the copies still in flight at the end).
    pub hedges_per_call: f64,
    /// Cancelled copies the server was still working on.
    pub cancelled_seen_by_server: u64,
    /// Calls that ended without a 200.
    pub failed: u64,
    /// The baseline's p99 divided by this one's: how many times the tail was
    /// cut (`None` without a baseline row, or for the baseline itself).
    pub p99_cut: Option<f64>,
}

impl TailRun {
    /// The report row for this run, without its `p99_cut` (see [`compare`]).
    pub fn summary(&self) -> TailSummary {
        let ms = |q: f64| percentile(self.latencies_s.clone(), q).map_or(0.0, |s| s * 1_000.0);
        let server_requests: u64 = self.server_received.iter().map(|&n| u64::from(n)).sum();
        let per_call = |n: u64| if self.calls > 0 { n as f64 / self.calls as f64 } else { 0.0 };
        TailSummary {
            policy: self.policy,
            calls: self.calls,
            p50_ms: ms(0.50),
            p99_ms: ms(0.99),
            p999_ms: ms(0.999),
            server_requests,
            extra_load: if self.calls > 0 { per_call(server_requests) - 1.0 } else { 0.0 },
            hedges_per_call: per_call(self.copies.saturating_sub(self.calls)),
            cancelled_seen_by_server: self.server_abandoned,
            failed: self.failed,
            p99_cut: None,
        }
    }
}

/// Fills every row's `p99_cut` against the row of the policy `none`.
pub fn compare(rows: &mut [TailSummary]) {
    let baseline = rows.iter().find(|r| r.policy == "none").map(|r| r.p99_ms);
    for row in rows {
        row.p99_cut = match baseline {
            Some(base) if row.policy != "none" && row.p99_ms > 0.0 => Some(base / row.p99_ms),
            _ => None,
        };
    }
}

/// Whether `row` meets the target: p99 cut at least [`TARGET_P99_CUT`] times
/// for at most [`TARGET_MAX_EXTRA_LOAD`] extra load, and no failed call.
pub fn meets_target(row: &TailSummary) -> bool {
    row.p99_cut.is_some_and(|cut| cut >= TARGET_P99_CUT)
        && row.extra_load <= TARGET_MAX_EXTRA_LOAD
        && row.failed == 0
}

/// The report as a text table.
pub fn table(rows: &[TailSummary]) -> String {
    let mut out = format!(
        "{:<11} {:>6} {:>9} {:>9} {:>9} {:>8} {:>10} {:>8} {:>10} {:>7}\n",
        "policy", "calls", "p50", "p99", "p99.9", "p99 cut", "extra load", "hedges", "cancelled", "failed"
    );
    for r in rows {
        let cut = r.p99_cut.map_or_else(|| "-".to_owned(), |c| format!("{c:.1}x"));
        out.push_str(&format!(
            "{:<11} {:>6} {:>6.1} ms {:>6.1} ms {:>6.1} ms {:>8} {:>9.1}% {:>7.1}% {:>10} {:>7}\n",
            r.policy,
            r.calls,
            r.p50_ms,
            r.p99_ms,
            r.p999_ms,
            cut,
            r.extra_load * 100.0,
            r.hedges_per_call * 100.0,
            r.cancelled_seen_by_server,
            r.failed
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(policy: &'static str, fast_ms: f64, slow_every: usize, received: u32, copies: u64) -> TailRun {
        // 1,000 calls: every `slow_every`-th takes a second, the others `fast_ms`.
        let mut latencies_s: Vec<f64> =
            (1..=1_000).map(|i| if i % slow_every == 0 { 1.0 } else { fast_ms / 1_000.0 }).collect();
        latencies_s.sort_by(f64::total_cmp);
        TailRun {
            policy,
            calls: 1_000,
            copies,
            failed: 0,
            latencies_s,
            server_received: vec![received / 2, received - received / 2],
            server_slow: 20,
            server_abandoned: u64::from(received) - 1_000,
        }
    }

    #[test]
    fn rows_compare_each_policys_tail_and_load_with_the_baseline() {
        // The baseline: 2 % at 1 s, so its p99 is 1 s.
        let none = run("none", 3.0, 50, 1_000, 1_000);
        // Hedged: no call above 10 ms, 6 % more requests.
        let percentile = TailRun {
            latencies_s: vec![0.003; 990].into_iter().chain([0.010; 10]).collect(),
            ..run("percentile", 3.0, 1_001, 1_060, 1_060)
        };
        let mut rows = vec![none.summary(), percentile.summary()];
        compare(&mut rows);
        assert_eq!(rows[0].p99_ms, 1_000.0);
        assert_eq!(rows[0].p50_ms, 3.0);
        assert_eq!(rows[0].p99_cut, None);
        assert_eq!(rows[0].extra_load, 0.0);
        assert!(!meets_target(&rows[0]));
        assert_eq!(rows[1].p99_ms, 3.0);
        assert_eq!(rows[1].p999_ms, 10.0);
        assert_eq!(rows[1].p99_cut, Some(1_000.0 / 3.0));
        assert!((rows[1].extra_load - 0.06).abs() < 1e-9);
        assert!((rows[1].hedges_per_call - 0.06).abs() < 1e-9);
        assert_eq!(rows[1].cancelled_seen_by_server, 60);
        assert!(meets_target(&rows[1]));
        // Over the load target: refused, whatever the tail.
        let mut heavy = rows[1].clone();
        heavy.extra_load = 0.11;
        assert!(!meets_target(&heavy));
        let table = table(&rows);
        assert!(
            table.contains("percentile") && table.contains("333.3x") && table.contains("6.0%"),
            "{table}"
        );
    }
}
