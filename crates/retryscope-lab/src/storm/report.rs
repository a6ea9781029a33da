//! What a storm run found, per policy: the table, the JSON and the derived figures.

use crate::storm::metrics::Totals;
use crate::storm::server::SLICE;
use serde::Serialize;
use std::time::Duration;

/// Everything measured for one policy.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyRun {
    /// The policy's name.
    pub policy: &'static str,
    /// Final totals from the instrumentation.
    #[serde(skip)]
    pub totals: Totals,
    /// Requests the server received, per slice.
    pub server_received: Vec<u32>,
    /// Requests the server answered 200 while their caller still waited
    /// (goodput), per slice of their arrival.
    pub server_served: Vec<u32>,
    /// Logical requests the clients started, per slice.
    pub started: Vec<u32>,
    /// Of those, the ones that succeeded, per slice of their start.
    pub succeeded: Vec<u32>,
    /// Retries started per slice, from the instrumentation's counter.
    pub retries: Vec<u64>,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The policy's name.
    pub policy: &'static str,
    /// Logical requests started.
    pub requests: u64,
    /// Attempts made.
    pub attempts: u64,
    /// Retries per logical request.
    pub retry_ratio: f64,
    /// The busiest second's load on the server, as a multiple of the healthy load.
    pub peak_load: f64,
    /// Seconds from the end of the outage until the server served ≥ 95 % of what
    /// it received for a whole second; `None` if it never did.
    pub recovery_s: Option<f64>,
    /// Share of the logical requests started during the outage that succeeded
    /// (possible only by a retry after it).
    pub goodput_during: f64,
    /// Share of the logical requests started after the outage that succeeded.
    pub goodput_after: f64,
    /// Logical requests that ended without success.
    pub failed: u64,
}

/// The phases of a run, to interpret the server's counters.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    /// When the outage starts.
    pub outage_start: Duration,
    /// When it ends.
    pub outage_end: Duration,
}

const SLICES_PER_SECOND: usize = 10;

impl PolicyRun {
    /// The report row for this run.
    pub fn summary(&self, timeline: Timeline) -> Summary {
        let t = self.totals;
        let healthy = healthy_load(&self.server_received, timeline);
        let (start, end) = (slice_index(timeline.outage_start), slice_index(timeline.outage_end));
        let (outage, after) = (start..end, end..self.started.len());
        Summary {
            policy: self.policy,
            requests: t.requests,
            attempts: t.attempts,
            retry_ratio: if t.requests == 0 { 0.0 } else { t.retries as f64 / t.requests as f64 },
            peak_load: if healthy > 0.0 { peak_per_second(&self.server_received) / healthy } else { 0.0 },
            recovery_s: recovery(&self.server_received, &self.server_served, timeline),
            goodput_during: share(&self.succeeded, &self.started, outage),
            goodput_after: share(&self.succeeded, &self.started, after),
            failed: t.failed,
        }
    }
}

pub(crate) fn slice_index(at: Duration) -> usize {
    usize::try_from(at.as_millis() / SLICE.as_millis()).unwrap_or(usize::MAX)
}

/// Mean requests per second before the outage, skipping the first second while
/// clients ramp up.
pub(crate) fn healthy_load(received: &[u32], timeline: Timeline) -> f64 {
    let window = received.get(SLICES_PER_SECOND..slice_index(timeline.outage_start)).unwrap_or_default();
    if window.is_empty() {
        return 0.0;
    }
    window.iter().map(|&n| f64::from(n)).sum::<f64>() * SLICES_PER_SECOND as f64 / window.len() as f64
}

/// The largest number of requests received in any one-second window.
pub(crate) fn peak_per_second(received: &[u32]) -> f64 {
    received
        .windows(SLICES_PER_SECOND)
        .map(|w| w.iter().map(|&n| f64::from(n)).sum::<f64>())
        .fold(0.0, f64::max)
}

/// `part / whole` over the slices `range` (0 when nothing was in `whole`).
fn share(part: &[u32], whole: &[u32], range: std::ops::Range<usize>) -> f64 {
    let sum = |v: &[u32]| v.get(range.clone()).unwrap_or_default().iter().map(|&n| f64::from(n)).sum::<f64>();
    let total = sum(whole);
    if total > 0.0 { sum(part) / total } else { 0.0 }
}

/// Seconds after the outage until a whole second in which the server served at
/// least 95 % of what it received.
fn recovery(received: &[u32], served: &[u32], timeline: Timeline) -> Option<f64> {
    let end = slice_index(timeline.outage_end);
    let last = received.len().checked_sub(SLICES_PER_SECOND)?;
    (end..=last)
        .find(|&start| {
            let window = start..start + SLICES_PER_SECOND;
            let got: u32 = received[window.clone()].iter().sum();
            let ok: u32 = served[window].iter().sum();
            got > 0 && f64::from(ok) >= 0.95 * f64::from(got)
        })
        .map(|start| ((start - end) as f64) * SLICE.as_secs_f64())
}

/// The report as a text table.
pub fn table(rows: &[Summary]) -> String {
    let mut out = format!(
        "{:<12} {:>13} {:>16} {:>14} {:>11} {:>10} {:>9} {:>8}\n",
        "policy",
        "recovery (s)",
        "ok during outage",
        "ok after",
        "retry ratio",
        "peak load",
        "requests",
        "failed"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<12} {:>13} {:>15.0}% {:>13.0}% {:>11.2} {:>9.1}x {:>9} {:>8}\n",
            r.policy,
            recovery_text(r.recovery_s),
            r.goodput_during * 100.0,
            r.goodput_after * 100.0,
            r.retry_ratio,
            r.peak_load,
            r.requests,
            r.failed
        ));
    }
    out
}

/// A recovery time as the table and the chart show it.
pub(crate) fn recovery_text(recovery_s: Option<f64>) -> String {
    recovery_s.map_or_else(|| "never".to_owned(), |s| format!("{s:.1}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline() -> Timeline {
        Timeline { outage_start: Duration::from_secs(3), outage_end: Duration::from_secs(5) }
    }

    #[test]
    fn healthy_load_is_per_second_before_the_outage() {
        // 10 per slice = 100/s, then an outage spike.
        let mut received = vec![10; 30];
        received.extend([100; 20]);
        assert_eq!(healthy_load(&received, timeline()), 100.0);
        assert_eq!(peak_per_second(&received), 1_000.0);
    }

    #[test]
    fn recovery_is_the_first_healthy_second_after_the_outage() {
        let received = vec![10; 80];
        let mut served = vec![10; 30];
        served.extend([0; 20]); // outage 3 s..5 s
        served.extend([0; 5]); // still failing for 0.5 s after the outage
        served.extend([10; 25]);
        assert_eq!(recovery(&received, &served, timeline()), Some(0.5));
        assert_eq!(recovery(&received, &[0; 80], timeline()), None);
    }

    #[test]
    fn goodput_is_the_share_of_requests_started_in_a_window_that_succeeded() {
        let started = [10; 10];
        let succeeded = [10, 10, 5, 5, 0, 0, 0, 0, 0, 0];
        assert_eq!(share(&succeeded, &started, 0..2), 1.0);
        assert_eq!(share(&succeeded, &started, 2..4), 0.5);
        assert_eq!(share(&succeeded, &started, 4..10), 0.0);
        assert_eq!(share(&succeeded, &started, 20..30), 0.0, "a window past the run has nothing to share");
    }
}
