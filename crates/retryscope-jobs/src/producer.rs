//! Enqueuing jobs: a job key per job, sent as the broker's de-duplication id
//! so that a producer's retry of a publish stores the job once.

use crate::broker::{Broker, BrokerError, Outgoing, Published};
use crate::dead::TRACEPARENT;
use crate::meta::JobMeta;
use bytes::Bytes;
use opentelemetry::trace::TraceContextExt;
use retryscope_otel::tracing_opentelemetry::OpenTelemetrySpanExt;

/// Publishes jobs to a [`Broker`].
#[derive(Debug, Clone)]
pub struct Producer<B> {
    broker: B,
}

impl<B: Broker> Producer<B> {
    /// A producer on `broker`.
    pub fn new(broker: B) -> Self {
        Self { broker }
    }

    /// Enqueues a job under `key` (an order id, an event id) and waits until
    /// the broker stored it; the current span's context travels in a
    /// `traceparent` header, so the worker's spans link to it. A second
    /// enqueue of the same key within the broker's de-duplication window
    /// (JetStream's `duplicate_window`) is stored once:
    /// [`Published::duplicate`] says so.
    ///
    /// # Errors
    ///
    /// The broker's, when it did not store the job.
    pub async fn enqueue(
        &self,
        subject: &str,
        key: &str,
        payload: impl Into<Bytes>,
    ) -> Result<Published, BrokerError> {
        let meta = JobMeta::first(Some(key.to_owned()));
        // Only the key: the attempt headers are the worker's to write.
        let mut headers: Vec<(String, String)> = meta
            .to_headers()
            .into_iter()
            .filter(|(name, _)| *name == crate::meta::KEY_HEADER)
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        if let Some(traceparent) = current_traceparent() {
            headers.push((TRACEPARENT.to_owned(), traceparent));
        }
        self.broker
            .publish(Outgoing {
                subject: subject.to_owned(),
                payload: payload.into(),
                headers,
                dedup_id: Some(key.to_owned()),
            })
            .await
    }
}

fn current_traceparent() -> Option<String> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let sc = span.span_context();
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}
