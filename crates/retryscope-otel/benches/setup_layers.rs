//! What the subscriber `init_otlp` installs costs per operation, before and
//! after it stopped paying for what nobody reads: one operation of three
//! attempts (two 503s), spans sampled into an SDK tracer provider that drops
//! them, the stderr log written to a sink.
//!
//! - `before`: tracing-opentelemetry's defaults (source locations, thread
//!   attributes, busy/idle times) and a fmt layer that sees INFO spans too
//!   (it formats each span's fields when the span opens);
//! - `after`: the layer `Telemetry::layer` returns (built here from the same
//!   settings, on an exporter that drops everything) and a fmt layer for events
//!   only, as `init_otlp` installs them.
//!
//! `cargo bench -p retryscope-otel --features otlp --bench setup_layers -- --warm-up-time 1 --measurement-time 3`

use criterion::{Criterion, criterion_group, criterion_main};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use retryscope::clock::ManualClock;
use retryscope::{ErrorType, Jitter, Policy, Retryable, Verdict};
use retryscope_otel::{OtelObserver, scope};
use std::hint::black_box;
use std::time::Duration;
use tracing_subscriber::filter::{FilterExt as _, filter_fn};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

const EXPORTER_CRATES: &str = "info,h2=off,hyper=off,hyper_util=off,tonic=off,tower=off,reqwest=off,opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off";

#[derive(Debug)]
struct DropSpans;

impl SpanExporter for DropSpans {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

fn operation(observer: &OtelObserver, clock: &ManualClock) -> u32 {
    let policy = Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_nanos(1))
        .jitter(Jitter::None)
        .no_deadline()
        .build();
    let mut calls = 0;
    (|| {
        calls += 1;
        if calls <= 2 { Err(503u16) } else { Ok(black_box(calls)) }
    })
    .retry(policy.expect("valid policy"))
    .classify(|r: &Result<u32, u16>| match r {
        Ok(_) => Verdict::Success,
        Err(code) => Verdict::retryable(ErrorType::Status(*code)),
    })
    .observe(observer)
    .dependency("db")
    .operation("query")
    .call_with(clock, |d| clock.advance(d))
    .unwrap_or(0)
}

fn setups(c: &mut Criterion) {
    let provider = SdkTracerProvider::builder().with_batch_exporter(DropSpans).build();
    let observer = OtelObserver::from_meter(&opentelemetry::global::meter_with_scope(scope()));
    let clock = ManualClock::new();
    let mut group = c.benchmark_group("init_otlp_subscriber");

    let before = tracing_subscriber::registry()
        .with(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer_with_scope(scope()))
                .with_filter(EnvFilter::new(EXPORTER_CRATES)),
        )
        .with(
            tracing_subscriber::fmt::layer().with_writer(std::io::sink).with_filter(EnvFilter::new("info")),
        );
    tracing::subscriber::with_default(before, || {
        group.bench_function("before", |b| b.iter(|| operation(&observer, &clock)));
    });

    let after = tracing_subscriber::registry()
        .with(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer_with_scope(scope()))
                .with_location(false)
                .with_threads(false)
                .with_tracked_inactivity(false)
                .with_filter(EnvFilter::new(format!("retryscope=info,{EXPORTER_CRATES}"))),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::sink)
                .with_filter(EnvFilter::new("info").and(filter_fn(|m| m.is_event()))),
        );
    tracing::subscriber::with_default(after, || {
        group.bench_function("after", |b| b.iter(|| operation(&observer, &clock)));
    });
    group.finish();
}

criterion_group!(benches, setups);
criterion_main!(benches);
