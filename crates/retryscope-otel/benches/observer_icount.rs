//! Instructions per call of `OtelObserver` with the SDK, for callgrind: runs
//! `CALLS` blocking calls (after a warm-up) inside one function,
//! `measured_calls`, so that callgrind can count that function alone.
//!
//! Spans go through tracing-opentelemetry into an SDK tracer provider (sampled,
//! batch processor, an exporter that drops everything); metrics into an SDK
//! meter provider whose reader does not fire during the run; each attempt
//! injects its context with the W3C propagator, as the integrations do.
//!
//! ```text
//! cargo bench -p retryscope-otel --bench observer_icount --no-run
//! valgrind --tool=callgrind --toggle-collect='*measured_calls*' \
//!     target/release/deps/observer_icount-* success caller 2000
//! ```
//! Arguments: `success` | `retry` (one 503, then success), `caller` | `root`
//! (inside a caller's span or not), the number of calls, and `bare` for the
//! engine without the observer or `operation_spans` for the observer with
//! [`OtelObserver::with_operation_spans`]. Divide the `Ir` total by the number of calls
//! (200 warm-up calls run first, outside `measured_calls`).

use opentelemetry::global;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::propagation::TextMapCompositePropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use retryscope::clock::ManualClock;
use retryscope::observe::{NoObserver, Observer};
use retryscope::{ErrorType, Jitter, Policy, Retryable, Verdict};
use retryscope_otel::{OtelObserver, scope};
use std::hint::black_box;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;

/// Exports nothing: the cost measured is the SDK's, not a transport's.
#[derive(Debug)]
struct DropSpans;

impl SpanExporter for DropSpans {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_nanos(1))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid policy")
}

/// One call: fails `failures` times with 503, then succeeds; every attempt
/// injects its trace context into a header map, as an HTTP integration does.
fn call<O: Observer>(observer: O, clock: &ManualClock, failures: u32) -> u32 {
    let mut calls = 0;
    (|| {
        calls += 1;
        let mut headers = http::HeaderMap::new();
        retryscope_otel::inject_context(&mut headers);
        black_box(&headers);
        if calls <= failures { Err(503u16) } else { Ok(calls) }
    })
    .retry(policy())
    .classify(|result: &Result<u32, u16>| match result {
        Ok(_) => Verdict::Success,
        Err(code) => Verdict::retryable(ErrorType::Status(*code)),
    })
    .observe(observer)
    .dependency("db")
    .call_with(clock, |d| clock.advance(d))
    .unwrap_or(0)
}

/// The calls callgrind counts (`--toggle-collect='*measured_calls*'`); with
/// `observer` `None`, the engine alone, for the observer's share.
#[inline(never)]
fn measured_calls(observer: Option<&OtelObserver>, clock: &ManualClock, failures: u32, calls: u32) -> u32 {
    match observer {
        Some(observer) => (0..calls).map(|_| call(observer, clock, failures)).sum(),
        None => (0..calls).map(|_| call(NoObserver, clock, failures)).sum(),
    }
}

/// The same calls, not counted: caches, interned names and the SDK's
/// attribute maps warm up.
#[inline(never)]
fn warm_up(observer: Option<&OtelObserver>, clock: &ManualClock, failures: u32) -> u32 {
    match observer {
        Some(observer) => (0..200).map(|_| call(observer, clock, failures)).sum(),
        None => (0..200).map(|_| call(NoObserver, clock, failures)).sum(),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let failures = match args.first().map(String::as_str) {
        Some("retry") => 1,
        _ => 0,
    };
    let caller = args.get(1).map(String::as_str) != Some("root");
    let calls = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(2_000);
    let variant = args.get(3).map(String::as_str);
    let bare = variant == Some("bare");

    let tracer_provider = SdkTracerProvider::builder().with_batch_exporter(DropSpans).build();
    let reader = PeriodicReader::builder(InMemoryMetricExporter::default())
        .with_interval(Duration::from_secs(3_600))
        .build();
    let meter_provider = SdkMeterProvider::builder().with_reader(reader).build();
    // What `init_otlp` installs.
    global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ]));
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(tracer_provider.tracer_with_scope(scope())));
    let _guard = tracing::subscriber::set_default(subscriber);

    let observer = OtelObserver::from_meter(&meter_provider.meter_with_scope(scope()));
    let observer =
        if variant == Some("operation_spans") { observer.with_operation_spans() } else { observer };
    let clock = ManualClock::new();
    let caller_span = if caller { tracing::info_span!("caller") } else { tracing::Span::none() };
    let entered = caller_span.enter();
    let observer = (!bare).then_some(&observer);
    black_box(warm_up(observer, &clock, failures));
    let total = measured_calls(observer, &clock, failures, calls);
    println!("{calls} calls, {failures} failure(s) each, caller span: {caller}, checksum {total}");
    drop(entered);
    drop(caller_span);
    let _ = tracer_provider.shutdown();
    let _ = meter_provider.shutdown();
}
