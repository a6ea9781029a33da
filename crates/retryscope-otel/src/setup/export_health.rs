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
//!
//! The same state tells [`Telemetry::shutdown`](super::Telemetry::shutdown)
//! what the last flush lost ([`SpanLoss`]): the batch processor's shutdown
//! reports success even when its final export failed, so without it a
//! collector that is down would cost the last spans without a word.

use crate::names::{SPANS_LOST, TARGET, UNIT_SPAN};
use opentelemetry::metrics::{Counter, Meter};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// What failed span exports have lost and not yet made good: shared by the
/// exporter, which writes it, and the telemetry, whose shutdown reads it.
#[derive(Debug, Default)]
pub(crate) struct SpanLoss {
    /// Whether the last export failed: a line is logged only when this flips.
    failing: AtomicBool,
    /// Spans lost since exports started failing, for the line that says they
    /// work again and for the shutdown's error.
    lost_while_failing: AtomicU64,
    /// The last failed export's error, the shutdown error's source.
    last_error: Mutex<Option<String>>,
}

impl SpanLoss {
    /// When the last export failed: the spans lost since exports began
    /// failing, and that export's error. `None` when it succeeded (or none ran).
    pub(crate) fn unresolved(&self) -> Option<(u64, OTelSdkError)> {
        if !self.failing.load(Ordering::Acquire) {
            return None;
        }
        let lost = self.lost_while_failing.load(Ordering::Acquire);
        let error = self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let error = error.unwrap_or_else(|| "the span export failed".to_owned());
        Some((lost, OTelSdkError::InternalFailure(error)))
    }
}

/// A span exporter that reports its inner exporter's failures as they happen.
#[derive(Debug)]
pub(crate) struct ReportingExporter<E> {
    inner: E,
    /// Where the spans go, named in the log lines.
    endpoint: String,
    loss: Arc<SpanLoss>,
    lost: Counter<u64>,
}

impl<E> ReportingExporter<E> {
    pub(crate) fn new(inner: E, endpoint: &str, meter: &Meter, loss: Arc<SpanLoss>) -> Self {
        let lost = meter
            .u64_counter(SPANS_LOST)
            .with_unit(UNIT_SPAN)
            .with_description("Spans dropped because their export to the collector failed")
            .build();
        ReportingExporter { inner, endpoint: endpoint.to_owned(), loss, lost }
    }

    /// Counts what a failed export lost and logs the transitions.
    fn record(&self, result: &OTelSdkResult, spans: u64) {
        // The SDK never runs two exports of one exporter at once, so the
        // orderings only need to make each export see the previous one's.
        let loss = &*self.loss;
        match result {
            Ok(()) => {
                if loss.failing.swap(false, Ordering::AcqRel) {
                    let lost = loss.lost_while_failing.swap(0, Ordering::AcqRel);
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
                loss.lost_while_failing.fetch_add(spans, Ordering::AcqRel);
                // The message alone: the shutdown error wraps it in an
                // `InternalFailure` again, which would repeat its prefix.
                let message = match error {
                    OTelSdkError::InternalFailure(message) => message.clone(),
                    other => other.to_string(),
                };
                *loss.last_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(message);
                if !loss.failing.swap(true, Ordering::AcqRel) {
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
