//! In-memory OpenTelemetry SDK for tests: spans and metrics are captured in
//! memory, and the `tracing` bridge is installed for the current thread only.

#![allow(dead_code, unreachable_pub)]

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry::{Key, KeyValue};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use retryscope_otel::{OtelObserver, scope};
use std::collections::BTreeMap;
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::layer::SubscriberExt;

/// Attributes as sorted `key → value` strings: easy to compare whole sets.
pub type Attrs = BTreeMap<String, String>;

/// Builds an [`Attrs`] from pairs.
pub fn attrs(pairs: &[(&str, &str)]) -> Attrs {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

pub fn to_attrs<'a>(kvs: impl IntoIterator<Item = &'a KeyValue>) -> Attrs {
    kvs.into_iter().map(|kv| (kv.key.as_str().to_owned(), kv.value.as_str().into_owned())).collect()
}

/// One SDK pipeline, in memory, with the tracing bridge set for this thread.
pub struct Telemetry {
    pub spans: InMemorySpanExporter,
    pub metrics: InMemoryMetricExporter,
    pub tracer_provider: SdkTracerProvider,
    pub meter_provider: SdkMeterProvider,
    pub observer: OtelObserver,
    _subscriber: DefaultGuard,
}

impl Telemetry {
    pub fn new() -> Self {
        let spans = InMemorySpanExporter::default();
        let metrics = InMemoryMetricExporter::default();
        // The simple processor exports each span as it ends: no flush races.
        let tracer_provider = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
        let meter_provider =
            SdkMeterProvider::builder().with_reader(PeriodicReader::builder(metrics.clone()).build()).build();
        let tracer = tracer_provider.tracer("retryscope-otel-tests");
        let subscriber =
            tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
        let observer = OtelObserver::from_meter(&meter_provider.meter_with_scope(scope()));
        Self {
            spans,
            metrics,
            tracer_provider,
            meter_provider,
            observer,
            _subscriber: retryscope_test_support::telemetry::set_default(subscriber),
        }
    }

    /// Finished spans, in the order they ended.
    pub fn finished_spans(&self) -> Vec<SpanData> {
        self.spans.get_finished_spans().expect("finished spans")
    }

    /// The finished span named `name` (exactly one).
    pub fn span(&self, name: &str) -> SpanData {
        let mut found: Vec<_> = self.finished_spans().into_iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "spans named {name}: {found:#?}");
        found.remove(0)
    }

    /// The finished spans whose parent is `parent`.
    pub fn children(&self, parent: SpanId) -> Vec<SpanData> {
        self.finished_spans().into_iter().filter(|s| s.parent_span_id == parent).collect()
    }

    /// Collects now and returns the latest (cumulative) snapshot.
    pub fn collect(&self) -> ResourceMetrics {
        self.meter_provider.force_flush().expect("flush metrics");
        let mut all = self.metrics.get_finished_metrics().expect("finished metrics");
        all.pop().expect("at least one collection")
    }

    /// Runs `f` on the metric named `name`, if it has been recorded.
    pub fn with_metric<R>(&self, name: &str, f: impl FnOnce(&Metric) -> R) -> Option<R> {
        let snapshot = self.collect();
        snapshot.scope_metrics().flat_map(|s| s.metrics()).find(|m| m.name() == name).map(f)
    }

    /// Every metric name recorded, with its unit.
    pub fn units(&self) -> BTreeMap<String, String> {
        let snapshot = self.collect();
        snapshot
            .scope_metrics()
            .flat_map(|s| s.metrics())
            .map(|m| (m.name().to_owned(), m.unit().to_owned()))
            .collect()
    }

    /// The points of the u64 counter `name`: attributes → value.
    pub fn counter(&self, name: &str) -> BTreeMap<Attrs, u64> {
        self.with_metric(name, |metric| match metric.data() {
            AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                assert!(sum.is_monotonic(), "{name} is a counter");
                sum.data_points().map(|p| (to_attrs(p.attributes()), p.value())).collect()
            }
            other => panic!("{name} is not a u64 counter: {other:?}"),
        })
        .unwrap_or_default()
    }

    /// The points of the f64 histogram `name`: attributes → (count, sum).
    pub fn histogram(&self, name: &str) -> BTreeMap<Attrs, (u64, f64)> {
        self.with_metric(name, |metric| match metric.data() {
            AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                h.data_points().map(|p| (to_attrs(p.attributes()), (p.count(), p.sum()))).collect()
            }
            other => panic!("{name} is not an f64 histogram: {other:?}"),
        })
        .unwrap_or_default()
    }

    /// The bucket boundaries of every point of the histogram `name`.
    pub fn bounds(&self, name: &str) -> Vec<Vec<f64>> {
        self.with_metric(name, |metric| match metric.data() {
            AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                h.data_points().map(|p| p.bounds().collect()).collect()
            }
            other => panic!("{name} is not an f64 histogram: {other:?}"),
        })
        .unwrap_or_default()
    }
}

/// The value of the attribute `key` of a span, as a string.
pub fn span_attr(span: &SpanData, key: &str) -> Option<String> {
    let key = Key::new(key.to_owned());
    span.attributes.iter().find(|kv| kv.key == key).map(|kv| kv.value.as_str().into_owned())
}

/// A budget that never allows a retry.
pub struct Refuse;

impl retryscope::budget::Budget for Refuse {
    fn request_started(&self) {}
    fn attempt_finished(&self, _: bool) {}
    fn try_acquire_retry(&self, _cause: retryscope::budget::RetryCause) -> bool {
        false
    }
    fn available(&self) -> f64 {
        0.0
    }
}
