//! In-memory capture of retryscope's spans and metrics: an OpenTelemetry SDK
//! in the test's process, read back by the names of the telemetry contract
//! ([docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md),
//! the constants of `retryscope_otel::names`).
//!
//! [`Telemetry::install`] bridges this thread's `tracing` spans to an
//! in-memory span exporter and gives a [`Meter`](Telemetry::meter) to hand to
//! the integrations; then [`requests`](Telemetry::requests),
//! [`retries`](Telemetry::retries), [`faults_injected`](Telemetry::faults_injected),
//! [`attempt_spans`](Telemetry::attempt_spans) and the general
//! [`counter`](Telemetry::counter), [`histogram`](Telemetry::histogram) and
//! [`attr`] read what was recorded.
//!
//! ```
//! use retryscope::{Policy, Retryable};
//! use retryscope_otel::{OtelObserver, RetryMetrics};
//! use retryscope_testkit::telemetry::Telemetry;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let telemetry = Telemetry::install();
//! let mut calls = 0;
//! let answer = (|| {
//!     calls += 1;
//!     let outcome = if calls < 3 { Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset)) } else { Ok(calls) };
//!     async move { outcome }
//! })
//!     .retry(Policy::builder().base_delay(Duration::from_millis(10)).build().unwrap())
//!     .dependency("inventory")
//!     .observe(OtelObserver::new(RetryMetrics::new(&telemetry.meter)))
//!     .await;
//! assert_eq!(answer.unwrap(), 3);
//! assert_eq!((telemetry.requests("inventory"), telemetry.retries("inventory")), (1, 2));
//! assert_eq!(telemetry.attempt_spans("inventory").len(), 3);
//! # }
//! ```

use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use retryscope_otel::names;
use std::sync::OnceLock;
use tracing::Dispatch;
use tracing::subscriber::{DefaultGuard, NoSubscriber};
use tracing_subscriber::layer::SubscriberExt;

/// `tracing::subscriber::set_default`, safe beside tests that run without a
/// subscriber on other threads of the same binary.
///
/// While exactly one `Dispatch` exists in the process, tracing-core works out
/// a callsite's interest from the *registering thread's* default
/// (tokio-rs/tracing#3611). A sibling test with no subscriber that reaches a
/// span first then caches `Interest::never()` for the life of the process, and
/// this thread's subscriber never sees that span. A second dispatch kept alive
/// for the whole process sends every registration down the general path, which
/// asks each live dispatch: `never` from the idle one and `always` from a test's
/// combine to `sometimes`, so the span is decided per thread, as intended.
pub fn set_default<S>(subscriber: S) -> DefaultGuard
where
    S: tracing::Subscriber + Send + Sync + 'static,
{
    static IDLE: OnceLock<Dispatch> = OnceLock::new();
    IDLE.get_or_init(|| Dispatch::new(NoSubscriber::default()));
    tracing::subscriber::set_default(subscriber)
}

/// [`set_default`] for the duration of `f`.
pub fn with_default<S, T>(subscriber: S, f: impl FnOnce() -> T) -> T
where
    S: tracing::Subscriber + Send + Sync + 'static,
{
    let _guard = set_default(subscriber);
    f()
}

/// The in-memory pipeline of one test: spans of this thread, metrics of
/// [`meter`](Self::meter). Dropping it uninstalls the subscriber.
pub struct Telemetry {
    spans: InMemorySpanExporter,
    tracer_provider: SdkTracerProvider,
    metrics: InMemoryMetricExporter,
    meter_provider: SdkMeterProvider,
    /// The meter to give the integrations (`.meter(..)` on their builders,
    /// `OtelObserver::new`, `Faults::builder().meter(..)`).
    pub meter: Meter,
    _subscriber: DefaultGuard,
}

impl Telemetry {
    /// Installs a tracing subscriber bridged to an in-memory span exporter for
    /// this thread, and a meter backed by an in-memory metric exporter.
    pub fn install() -> Telemetry {
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        let spans = InMemorySpanExporter::default();
        let tracer_provider = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
        let layer = tracing_opentelemetry::layer().with_tracer(tracer_provider.tracer("test"));
        let subscriber = tracing_subscriber::registry().with(layer);
        let metrics = InMemoryMetricExporter::default();
        let meter_provider =
            SdkMeterProvider::builder().with_reader(PeriodicReader::builder(metrics.clone()).build()).build();
        let meter = meter_provider.meter("test");
        Telemetry {
            spans,
            tracer_provider,
            metrics,
            meter_provider,
            meter,
            _subscriber: set_default(subscriber),
        }
    }

    /// Every span finished so far, in the order they ended.
    pub fn spans(&self) -> Vec<SpanData> {
        self.tracer_provider.force_flush().expect("flush spans");
        self.spans.get_finished_spans().expect("finished spans")
    }

    fn latest(&self) -> ResourceMetrics {
        self.latest_if_any().expect("one collection")
    }

    /// The last collection, `None` while nothing was recorded (an observable
    /// gauge whose callback observed nothing yet).
    fn latest_if_any(&self) -> Option<ResourceMetrics> {
        self.meter_provider.force_flush().expect("flush metrics");
        self.metrics.get_finished_metrics().expect("metrics").pop()
    }

    /// Makes this meter provider the global one as well, for libraries that
    /// record through `opentelemetry::global::meter` (retryscope-jobs).
    pub fn install_global_meter(&self) {
        opentelemetry::global::set_meter_provider(self.meter_provider.clone());
    }

    /// The value of a `u64` gauge's point whose attributes include all of
    /// `with`, if the last collection has one.
    pub fn gauge_u64(&self, name: &str, with: &[(&str, &str)]) -> Option<u64> {
        let rm = self.latest_if_any()?;
        rm.scope_metrics().flat_map(|s| s.metrics()).filter(|m| m.name() == name).find_map(|metric| {
            match metric.data() {
                AggregatedMetrics::U64(MetricData::Gauge(g)) => {
                    g.data_points().find(|p| matches(p.attributes(), with)).map(|p| p.value())
                }
                _ => None,
            }
        })
    }

    /// The value of an `f64` gauge's point whose attributes include all of
    /// `with`, if the last collection has one (a guard's gauges:
    /// `retryscope::guard::Guard::gauges`).
    pub fn gauge_f64(&self, name: &str, with: &[(&str, &str)]) -> Option<f64> {
        let rm = self.latest_if_any()?;
        rm.scope_metrics().flat_map(|s| s.metrics()).filter(|m| m.name() == name).find_map(|metric| {
            match metric.data() {
                AggregatedMetrics::F64(MetricData::Gauge(g)) => {
                    g.data_points().find(|p| matches(p.attributes(), with)).map(|p| p.value())
                }
                _ => None,
            }
        })
    }

    /// `retryscope.requests` of `dependency`: logical operations started.
    pub fn requests(&self, dependency: &str) -> u64 {
        self.counter(names::REQUESTS, &[(names::DEPENDENCY, dependency)])
    }

    /// `retryscope.retries` of `dependency`: retries started (attempts after
    /// the first).
    pub fn retries(&self, dependency: &str) -> u64 {
        self.counter(names::RETRIES, &[(names::DEPENDENCY, dependency)])
    }

    /// `retryscope.faults.injected` of `dependency` with
    /// `retryscope.fault.kind` = `kind` (`status`, `reset`, … as
    /// `FaultKind::label` names them), or of every kind when `kind` is `None`.
    pub fn faults_injected(&self, dependency: &str, kind: Option<&str>) -> u64 {
        match kind {
            Some(kind) => self.counter(
                names::FAULTS_INJECTED,
                &[(names::DEPENDENCY, dependency), (names::FAULT_KIND, kind)],
            ),
            None => self.counter(names::FAULTS_INJECTED, &[(names::DEPENDENCY, dependency)]),
        }
    }

    /// The attempt spans of `dependency` (those carrying `retryscope.attempt`
    /// and `retryscope.dependency` = `dependency`), in the order they ended.
    pub fn attempt_spans(&self, dependency: &str) -> Vec<SpanData> {
        self.spans()
            .into_iter()
            .filter(|s| {
                attr(s, names::ATTEMPT).is_some() && attr(s, names::DEPENDENCY).as_deref() == Some(dependency)
            })
            .collect()
    }

    /// The attempt spans of `dependency` marked `retryscope.fault.injected`:
    /// their fault kinds, in order.
    pub fn fault_marks(&self, dependency: &str) -> Vec<String> {
        self.attempt_spans(dependency).iter().filter_map(|s| attr(s, names::FAULT_INJECTED)).collect()
    }

    /// Sum of a counter's points whose attributes include all of `with`.
    pub fn counter(&self, name: &str, with: &[(&str, &str)]) -> u64 {
        let rm = self.latest();
        let mut total = 0;
        for metric in rm.scope_metrics().flat_map(|s| s.metrics()).filter(|m| m.name() == name) {
            if let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() {
                total += sum
                    .data_points()
                    .filter(|p| matches(p.attributes(), with))
                    .map(|p| p.value())
                    .sum::<u64>();
            }
        }
        total
    }

    /// Count of a histogram's recordings whose attributes include all of `with`.
    pub fn histogram_count(&self, name: &str, with: &[(&str, &str)]) -> u64 {
        let rm = self.latest();
        let mut total = 0;
        for metric in rm.scope_metrics().flat_map(|s| s.metrics()).filter(|m| m.name() == name) {
            if let AggregatedMetrics::F64(MetricData::Histogram(h)) = metric.data() {
                total +=
                    h.data_points().filter(|p| matches(p.attributes(), with)).map(|p| p.count()).sum::<u64>();
            }
        }
        total
    }
}

fn matches<'a>(attributes: impl Iterator<Item = &'a KeyValue>, with: &[(&str, &str)]) -> bool {
    let attributes: Vec<&KeyValue> = attributes.collect();
    with.iter().all(|(k, v)| attributes.iter().any(|kv| kv.key.as_str() == *k && value_str(&kv.value) == *v))
}

/// An attribute value as text (integers included), for comparisons.
pub fn value_str(value: &Value) -> String {
    value.as_str().into_owned()
}

/// A span attribute's value as text.
pub fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| value_str(&kv.value))
}

/// "Hedging × operation spans" (docs/guide/where-features-meet.md) with a
/// layer below the retry layer that starts a span named `below` when it is
/// called, for a two-copy hedged call made inside a span named `caller`, whose
/// first copy stalled and whose second answered: each copy's CLIENT span is a
/// child of the one operation span (not the caller's), has the one `below`
/// span under it, and named itself in the `traceparent` the server `seen`
/// from that copy (told apart by the `retry-attempt` header only the second
/// copy carries). Panics with what differs.
pub fn assert_hedged_copies_own_their_spans(spans: &[SpanData], seen: &[crate::Seen]) {
    use opentelemetry::trace::SpanKind;
    let caller = spans.iter().find(|s| s.name == "caller").expect("caller span").span_context.span_id();
    let attempts: Vec<_> = spans.iter().filter(|s| s.span_kind == SpanKind::Client).collect();
    let below: Vec<_> = spans.iter().filter(|s| s.name == "below").collect();
    assert_eq!((attempts.len(), below.len()), (2, 2), "two copies, each with its span below");
    let operation = attempts[0].parent_span_id;
    assert!(attempts.iter().all(|a| a.parent_span_id == operation) && operation != caller);
    for below in &below {
        let parent = below.parent_span_id;
        assert!(![caller, operation].contains(&parent), "{parent} is the caller's or the operation's span");
    }
    assert_eq!(seen[0].headers.get("retry-attempt"), None, "the first copy is the one that stalled");
    for (n, outcome) in [("1", "cancelled"), ("2", "won")] {
        let attempt = attempts.iter().find(|a| attr(a, "retryscope.attempt").as_deref() == Some(n));
        let attempt = attempt.unwrap_or_else(|| panic!("copy {n}'s attempt span in {attempts:#?}"));
        assert_eq!(attr(attempt, "retryscope.hedge").as_deref(), Some("true"), "copy {n}");
        assert_eq!(attr(attempt, "retryscope.hedge.outcome").as_deref(), Some(outcome), "copy {n}");
        let id = attempt.span_context.span_id();
        let under = below.iter().filter(|b| b.parent_span_id == id).count();
        assert_eq!(under, 1, "copy {n}: one span below, a child of its own attempt span");
        let sent = seen.iter().find(|s| s.headers.get("retry-attempt").map_or("1", String::as_str) == n);
        let traceparent = sent.and_then(|s| s.headers.get("traceparent")).map(String::as_str);
        let own = format!("00-{}-{id}-01", attempt.span_context.trace_id());
        assert_eq!(traceparent, Some(own.as_str()), "copy {n} names its own attempt span on the wire");
    }
}

impl Telemetry {
    /// The distinct values of attribute `key` over every point of metric `name`,
    /// whatever its kind, and how many points (series) the metric has.
    pub fn series(&self, name: &str, key: &str) -> (std::collections::BTreeSet<String>, usize) {
        let rm = self.latest();
        let mut values = std::collections::BTreeSet::new();
        let mut points = 0;
        let mut note = |attributes: Vec<&KeyValue>| {
            points += 1;
            if let Some(kv) = attributes.iter().find(|kv| kv.key.as_str() == key) {
                values.insert(value_str(&kv.value));
            }
        };
        for metric in rm.scope_metrics().flat_map(|s| s.metrics()).filter(|m| m.name() == name) {
            match metric.data() {
                AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                    sum.data_points().for_each(|p| note(p.attributes().collect()))
                }
                AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                    h.data_points().for_each(|p| note(p.attributes().collect()))
                }
                AggregatedMetrics::F64(MetricData::Gauge(g)) => {
                    g.data_points().for_each(|p| note(p.attributes().collect()))
                }
                AggregatedMetrics::I64(MetricData::Gauge(g)) => {
                    g.data_points().for_each(|p| note(p.attributes().collect()))
                }
                AggregatedMetrics::U64(MetricData::Gauge(g)) => {
                    g.data_points().for_each(|p| note(p.attributes().collect()))
                }
                other => panic!("{name}: unexpected kind {other:?}"),
            }
        }
        (values, points)
    }
}

/// One point of a histogram (f64 or u64), with what describes it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HistogramPoint {
    /// The instrument's unit (`s`).
    pub unit: String,
    /// The point's attributes, values as text.
    pub attributes: std::collections::BTreeMap<String, String>,
    /// How many values were recorded.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
    /// The bucket boundaries.
    pub bounds: Vec<f64>,
}

impl Telemetry {
    /// Every point of histogram `name`, whichever number type it records.
    pub fn histogram(&self, name: &str) -> Vec<HistogramPoint> {
        let rm = self.latest();
        let mut points = Vec::new();
        for metric in rm.scope_metrics().flat_map(|s| s.metrics()).filter(|m| m.name() == name) {
            let attributes = |attrs: Vec<&KeyValue>| {
                attrs.iter().map(|kv| (kv.key.as_str().to_owned(), value_str(&kv.value))).collect()
            };
            match metric.data() {
                AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                    points.extend(h.data_points().map(|p| HistogramPoint {
                        unit: metric.unit().to_owned(),
                        attributes: attributes(p.attributes().collect()),
                        count: p.count(),
                        sum: p.sum(),
                        bounds: p.bounds().collect(),
                    }))
                }
                AggregatedMetrics::U64(MetricData::Histogram(h)) => {
                    points.extend(h.data_points().map(|p| HistogramPoint {
                        unit: metric.unit().to_owned(),
                        attributes: attributes(p.attributes().collect()),
                        count: p.count(),
                        sum: p.sum() as f64,
                        bounds: p.bounds().collect(),
                    }))
                }
                other => panic!("{name}: not a histogram: {other:?}"),
            }
        }
        points
    }

    /// The unit of metric `name`, if it was recorded.
    pub fn unit(&self, name: &str) -> Option<String> {
        let rm = self.latest();
        rm.scope_metrics().flat_map(|s| s.metrics()).find(|m| m.name() == name).map(|m| m.unit().to_owned())
    }
}
