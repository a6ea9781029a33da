//! Failed span exports reported while the program runs, not only by
//! [`Telemetry::shutdown`](super::Telemetry::shutdown): one log line when
//! exports start failing and one when they work again (never one per batch, so
//! a collector that stays down costs one line), and a counter of the spans lost
//! meanwhile.
//!
//! The batch span processor drops a batch whose export failed; nothing else in
//! the SDK says so (its own logs need a feature we do not enable, and would
//! say it once per batch). Spans the processor drops *before* an export, when
//! its queue is full, are not counted here.

use crate::names::TARGET;
use opentelemetry::metrics::{Counter, Meter};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The counter of spans whose export failed (Prometheus:
/// `retryscope_telemetry_spans_lost_total`; docs/telemetry.md).
pub(crate) const SPANS_LOST: &str = "retryscope.telemetry.spans.lost";

/// A span exporter that reports its inner exporter's failures as they happen.
#[derive(Debug)]
pub(crate) struct ReportingExporter<E> {
    inner: E,
    /// Where the spans go, named in the log lines.
    endpoint: String,
    /// Whether the last export failed: a line is logged only when this flips.
    failing: AtomicBool,
    /// Spans lost since exports started failing, for the line that says they work again.
    lost_while_failing: AtomicU64,
    lost: Counter<u64>,
}

impl<E> ReportingExporter<E> {
    pub(crate) fn new(inner: E, endpoint: &str, meter: &Meter) -> Self {
        let lost = meter
            .u64_counter(SPANS_LOST)
            .with_unit("{span}")
            .with_description("Spans dropped because their export to the collector failed")
            .build();
        ReportingExporter {
            inner,
            endpoint: endpoint.to_owned(),
            failing: AtomicBool::new(false),
            lost_while_failing: AtomicU64::new(0),
            lost,
        }
    }

    /// Counts what a failed export lost and logs the transitions.
    fn record(&self, result: &OTelSdkResult, spans: u64) {
        // The SDK never runs two exports of one exporter at once, so the
        // orderings only need to make each export see the previous one's.
        match result {
            Ok(()) => {
                if self.failing.swap(false, Ordering::AcqRel) {
                    let lost = self.lost_while_failing.swap(0, Ordering::AcqRel);
                    tracing::info!(
                        target: TARGET,
                        endpoint = %self.endpoint,
                        lost_spans = lost,
                        "telemetry: span exports work again; {lost} spans were lost while they failed"
                    );
                }
            }
            Err(error) => {
                self.lost.add(spans, &[]);
                self.lost_while_failing.fetch_add(spans, Ordering::AcqRel);
                if !self.failing.swap(true, Ordering::AcqRel) {
                    tracing::warn!(
                        target: TARGET,
                        endpoint = %self.endpoint,
                        error = %error,
                        "telemetry: span exports are failing; spans are lost (counted in {SPANS_LOST}) until they work again"
                    );
                }
            }
        }
    }
}

impl<E: SpanExporter> SpanExporter for ReportingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = u64::try_from(batch.len()).unwrap_or(u64::MAX);
        let result = self.inner.export(batch).await;
        self.record(&result, spans);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
