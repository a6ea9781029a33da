//! What a layered storm found, per policy and per service: the table, the JSON
//! and the derived figures.

use crate::storm::metrics::Totals;
use crate::storm::report::{Timeline, healthy_load, peak_per_second, slice_index};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// What one service saw during one policy's run, from its own counters.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceRun {
    /// `service-1` (the top) to `service-N` (the bottom).
    pub service: String,
    /// Requests it received, per slice.
    pub received: Vec<u32>,
    /// Requests it answered 200, per slice.
    pub served: Vec<u32>,
    /// Requests it received by `retryscope.attempt` bucket, as it read them.
    pub attempts: BTreeMap<&'static str, u64>,
    /// Its calls to the next service, from its middleware's telemetry; `None`
    /// at the bottom, which calls nothing.
    #[serde(skip)]
    pub outgoing: Option<Totals>,
}

/// Everything measured for one policy.
#[derive(Debug, Clone, Serialize)]
pub struct LayeredRun {
    /// The policy's name.
    pub policy: &'static str,
    /// The services, top first.
    pub services: Vec<ServiceRun>,
}

/// One row of the report: one service under one policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerSummary {
    /// The policy's name.
    pub policy: &'static str,
    /// The service's name.
    pub service: String,
    /// Requests it received.
    pub received: u64,
    /// Requests it received per user request (per request the top received).
    pub per_user_request: f64,
    /// The same during the outage, once retries have built up (its first half
    /// second skipped); `None` when the top received nothing then.
    pub per_user_request_in_outage: Option<f64>,
    /// Its busiest second, as a multiple of its healthy load.
    pub peak_load: f64,
    /// The share of the requests it received that were retries of its caller.
    pub retried_share: f64,
    /// Retries per request it made to the next service (`retryscope.retries` /
    /// `retryscope.requests` of its middleware); `None` at the bottom.
    pub retry_ratio: Option<f64>,
    /// Requests it answered with anything but 200.
    pub failed: u64,
}

/// How long retries take to build up at the start of an outage: the figures
/// "in the outage" skip it, so that they show the steady amplification.
const BUILD_UP: Duration = Duration::from_millis(500);

impl LayeredRun {
    /// The report rows for this run, top first.
    pub fn summary(&self, timeline: Timeline) -> Vec<LayerSummary> {
        let outage = outage_window(timeline);
        let top = self.services.first();
        let user_requests = top.map_or(0, |s| sum(&s.received, ..));
        let user_requests_in_outage = top.map_or(0, |s| sum(&s.received, outage.clone()));
        self.services
            .iter()
            .map(|s| {
                let received = sum(&s.received, ..);
                let healthy = healthy_load(&s.received, timeline);
                let retried: u64 = ["2", "3", "4+"].iter().filter_map(|b| s.attempts.get(b)).sum();
                let seen: u64 = s.attempts.values().sum();
                LayerSummary {
                    policy: self.policy,
                    service: s.service.clone(),
                    received,
                    per_user_request: ratio(received, user_requests).unwrap_or(0.0),
                    per_user_request_in_outage: ratio(
                        sum(&s.received, outage.clone()),
                        user_requests_in_outage,
                    ),
                    peak_load: if healthy > 0.0 { peak_per_second(&s.received) / healthy } else { 0.0 },
                    retried_share: ratio(retried, seen).unwrap_or(0.0),
                    retry_ratio: s.outgoing.map(|t| ratio(t.retries, t.requests).unwrap_or(0.0)),
                    failed: received.saturating_sub(sum(&s.served, ..)),
                }
            })
            .collect()
    }
}

/// The outage's slices once retries have built up; the whole outage when it is
/// too short for that.
fn outage_window(timeline: Timeline) -> std::ops::Range<usize> {
    let (start, end) = (slice_index(timeline.outage_start), slice_index(timeline.outage_end));
    let settled = slice_index(timeline.outage_start + BUILD_UP);
    if settled < end { settled..end } else { start..end }
}

fn sum(slices: &[u32], range: impl std::slice::SliceIndex<[u32], Output = [u32]>) -> u64 {
    slices.get(range).unwrap_or_default().iter().map(|&n| u64::from(n)).sum()
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// The report as a text table.
pub fn table(rows: &[LayerSummary]) -> String {
    let mut out = format!(
        "{:<10} {:<10} {:>9} {:>9} {:>10} {:>9} {:>11} {:>11} {:>7}\n",
        "policy",
        "service",
        "received",
        "per user",
        "in outage",
        "peak load",
        "retried in",
        "retry ratio",
        "failed"
    );
    for r in rows {
        let in_outage = r.per_user_request_in_outage.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        let retry_ratio = r.retry_ratio.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        out.push_str(&format!(
            "{:<10} {:<10} {:>9} {:>9.2} {:>10} {:>8.1}x {:>10.0}% {:>11} {:>7}\n",
            r.policy,
            r.service,
            r.received,
            r.per_user_request,
            in_outage,
            r.peak_load,
            r.retried_share * 100.0,
            retry_ratio,
            r.failed
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, per_slice_healthy: u32, per_slice_outage: u32, retried: u64) -> ServiceRun {
        // 3 s healthy, 2 s outage (3 s..5 s), 1 s after.
        let mut received = vec![per_slice_healthy; 30];
        received.extend([per_slice_outage; 20]);
        received.extend([per_slice_healthy; 10]);
        let served =
            received.iter().enumerate().map(|(i, &n)| if (30..50).contains(&i) { 0 } else { n }).collect();
        let first = received.iter().map(|&n| u64::from(n)).sum::<u64>() - retried;
        let attempts = BTreeMap::from([("1", first), ("4+", retried)]);
        ServiceRun { service: name.into(), received, served, attempts, outgoing: None }
    }

    #[test]
    fn rows_compare_every_service_with_the_user_requests_at_the_top() {
        let timeline = Timeline { outage_start: Duration::from_secs(3), outage_end: Duration::from_secs(5) };
        let mut top = service("service-1", 10, 10, 0);
        top.outgoing = Some(Totals { requests: 600, retries: 300, ..Totals::default() });
        let bottom = service("service-2", 10, 40, 600);
        let rows = LayeredRun { policy: "per-layer", services: vec![top, bottom] }.summary(timeline);
        assert_eq!(rows[0].per_user_request, 1.0);
        assert_eq!(rows[0].retry_ratio, Some(0.5));
        assert_eq!(rows[1].received, 40 * 10 + 40 * 20);
        assert_eq!(rows[1].per_user_request, 1_200.0 / 600.0);
        assert_eq!(rows[1].per_user_request_in_outage, Some(4.0));
        assert_eq!(rows[1].peak_load, 4.0);
        assert_eq!(rows[1].retried_share, 0.5);
        assert_eq!(rows[1].retry_ratio, None);
        assert_eq!(rows[1].failed, 40 * 20);
        let table = table(&rows);
        assert!(table.contains("service-2") && table.contains("4.0x"), "{table}");
    }
}
