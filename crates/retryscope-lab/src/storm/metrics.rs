//! The storm's figures from the instrumentation's own metrics.
//!
//! The report does not count retries itself: it reads `retryscope.requests`,
//! `retryscope.retries`, `retryscope.attempt.duration` and
//! `retryscope.request.duration` through an in-process metric reader, the same
//! series the dashboards query. If the instrumentation were wrong, the report
//! would be wrong with it — which is the point.

use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, Temporality};
use retryscope_otel::names;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Cumulative totals of one operation's calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Logical requests started (`retryscope.requests`).
    pub requests: u64,
    /// Retries started (`retryscope.retries`).
    pub retries: u64,
    /// Attempts finished (`retryscope.attempt.duration` count).
    pub attempts: u64,
    /// Operations that ended without success: failure, exhausted or throttled.
    pub failed: u64,
    /// Operations that ended in success.
    pub succeeded: u64,
}

/// A server's incoming requests (`retryscope.server.requests`) by the attempt
/// their callers said they were.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IncomingTotals {
    /// Requests per `retryscope.attempt` bucket (`1`, `2`, `3`, `4+`, `unknown`).
    pub by_attempt: BTreeMap<String, u64>,
}

impl IncomingTotals {
    /// Requests in the bucket `bucket`.
    pub fn attempt(&self, bucket: &str) -> u64 {
        self.by_attempt.get(bucket).copied().unwrap_or(0)
    }

    /// Every incoming request.
    pub fn total(&self) -> u64 {
        self.by_attempt.values().sum()
    }

    /// Incoming requests their callers said were retries.
    pub fn retries(&self) -> u64 {
        ["2", "3", "4+"].iter().map(|b| self.attempt(b)).sum()
    }
}

/// One collection, kept for the report.
#[derive(Debug, Default)]
struct Snapshot {
    by_operation: HashMap<String, Totals>,
    incoming_by_route: HashMap<String, IncomingTotals>,
}

type Latest = Arc<Mutex<Snapshot>>;

/// The latest totals per `retryscope.operation`, and of incoming requests per
/// `http.route`, refreshed by a periodic reader.
#[derive(Debug, Clone, Default)]
pub struct InProcessReader {
    latest: Latest,
}

impl InProcessReader {
    /// A reader to add to the meter provider (collecting every `interval`), and
    /// the handle to read its results with.
    pub fn new(interval: Duration) -> (PeriodicReader<TotalsExporter>, Self) {
        let handle = Self::default();
        let exporter = TotalsExporter { latest: Arc::clone(&handle.latest) };
        (PeriodicReader::builder(exporter).with_interval(interval).build(), handle)
    }

    /// The latest totals of the operations named `operation`.
    pub fn totals(&self, operation: &str) -> Totals {
        let latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest.by_operation.get(operation).copied().unwrap_or_default()
    }

    /// The latest counts of the requests served on `route`.
    pub fn incoming(&self, route: &str) -> IncomingTotals {
        let latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest.incoming_by_route.get(route).cloned().unwrap_or_default()
    }
}

/// Receives each collection and keeps only the totals per operation.
#[derive(Debug)]
pub struct TotalsExporter {
    latest: Latest,
}

impl PushMetricExporter for TotalsExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let snapshot = Snapshot {
            by_operation: totals_by_operation(metrics),
            incoming_by_route: incoming_by_route(metrics),
        };
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = snapshot;
        Ok(())
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

fn totals_by_operation(metrics: &ResourceMetrics) -> HashMap<String, Totals> {
    let mut by_operation: HashMap<String, Totals> = HashMap::new();
    let mut add = |attributes: Vec<&KeyValue>, value: u64, field: fn(&mut Totals) -> &mut u64| {
        let operation = attribute(&attributes, names::OPERATION).unwrap_or_default();
        *field(by_operation.entry(operation).or_default()) += value;
    };
    for metric in metrics.scope_metrics().flat_map(|s| s.metrics()) {
        match (metric.name(), metric.data()) {
            (names::REQUESTS, AggregatedMetrics::U64(MetricData::Sum(sum))) => {
                for p in sum.data_points() {
                    add(p.attributes().collect(), p.value(), |t| &mut t.requests);
                }
            }
            (names::RETRIES, AggregatedMetrics::U64(MetricData::Sum(sum))) => {
                for p in sum.data_points() {
                    add(p.attributes().collect(), p.value(), |t| &mut t.retries);
                }
            }
            (names::ATTEMPT_DURATION, AggregatedMetrics::F64(MetricData::Histogram(h))) => {
                for p in h.data_points() {
                    add(p.attributes().collect(), p.count(), |t| &mut t.attempts);
                }
            }
            (names::REQUEST_DURATION, AggregatedMetrics::F64(MetricData::Histogram(h))) => {
                for p in h.data_points() {
                    let attributes: Vec<&KeyValue> = p.attributes().collect();
                    let outcome = attribute(&attributes, names::OUTCOME);
                    match outcome.as_deref() {
                        Some("success") => add(attributes, p.count(), |t| &mut t.succeeded),
                        Some("failure" | "exhausted" | "throttled") => {
                            add(attributes, p.count(), |t| &mut t.failed)
                        }
                        _ => {}
                    }
                }
            }
            // Calls refused before any attempt (an open breaker, the pacer) are
            // counted apart from the operations that made attempts: they failed
            // all the same.
            (names::REFUSED, AggregatedMetrics::U64(MetricData::Sum(sum))) => {
                for p in sum.data_points() {
                    let attributes: Vec<&KeyValue> = p.attributes().collect();
                    let outcome = attribute(&attributes, names::OUTCOME);
                    if matches!(outcome.as_deref(), Some("exhausted" | "throttled")) {
                        add(attributes, p.value(), |t| &mut t.failed);
                    }
                }
            }
            _ => {}
        }
    }
    by_operation
}

fn incoming_by_route(metrics: &ResourceMetrics) -> HashMap<String, IncomingTotals> {
    let mut by_route: HashMap<String, IncomingTotals> = HashMap::new();
    for metric in metrics.scope_metrics().flat_map(|s| s.metrics()) {
        if let (names::SERVER_REQUESTS, AggregatedMetrics::U64(MetricData::Sum(sum))) =
            (metric.name(), metric.data())
        {
            for p in sum.data_points() {
                let attributes: Vec<&KeyValue> = p.attributes().collect();
                let route = attribute(&attributes, names::HTTP_ROUTE).unwrap_or_default();
                let bucket = attribute(&attributes, names::ATTEMPT).unwrap_or_default();
                *by_route.entry(route).or_default().by_attempt.entry(bucket).or_default() += p.value();
            }
        }
    }
    by_route
}

fn attribute(attributes: &[&KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.as_str().into_owned())
}
