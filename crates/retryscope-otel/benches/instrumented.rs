//! Cost per operation of the instrumentation, against the uninstrumented engine
//! and against a hand-written baseline making the same OpenTelemetry calls.
//!
//! The blocking API with a manual clock needs no runtime, so the numbers are the
//! engine plus telemetry and nothing else; one async case shows the future's
//! path. Spans go through tracing-opentelemetry into an SDK tracer provider with
//! a batch processor and an exporter that drops everything; metrics go into an
//! SDK meter provider whose periodic reader does not fire during the run.
//!
//! `cargo bench -p retryscope-otel -- --warm-up-time 1 --measurement-time 3`

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter};
use retryscope::clock::ManualClock;
use retryscope::observe::NoObserver;
use retryscope::{ErrorType, Jitter, Policy, Retryable, Verdict};
use retryscope_otel::{OtelObserver, names, scope};
use std::hint::black_box;
use std::time::Duration;
use tracing::field::Empty;
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

struct Sdk {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
}

impl Sdk {
    fn new(sampled: bool) -> Self {
        let sampler = if sampled { Sampler::AlwaysOn } else { Sampler::AlwaysOff };
        let tracer_provider =
            SdkTracerProvider::builder().with_batch_exporter(DropSpans).with_sampler(sampler).build();
        let reader = PeriodicReader::builder(InMemoryMetricExporter::default())
            .with_interval(Duration::from_secs(3_600))
            .build();
        let meter_provider = SdkMeterProvider::builder().with_reader(reader).build();
        Self { tracer_provider, meter_provider }
    }

    fn meter(&self) -> Meter {
        self.meter_provider.meter_with_scope(scope())
    }

    /// Installs the tracing bridge on this thread until the guard drops.
    fn subscribe(&self) -> tracing::subscriber::DefaultGuard {
        let tracer = self.tracer_provider.tracer_with_scope(scope());
        let subscriber =
            tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
        tracing::subscriber::set_default(subscriber)
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

fn classify(result: &Result<u32, u16>) -> Verdict {
    match result {
        Ok(_) => Verdict::Success,
        Err(code) => Verdict::retryable(ErrorType::Status(*code)),
    }
}

/// One operation through the engine: fails `failures` times with 503, then succeeds.
fn engine<O: retryscope::observe::Observer>(observer: O, clock: &ManualClock, failures: u32) -> u32 {
    let mut calls = 0;
    (|| {
        calls += 1;
        if calls <= failures { Err(503u16) } else { Ok(black_box(calls)) }
    })
    .retry(policy())
    .classify(classify)
    .observe(observer)
    .dependency("db")
    .call_with(clock, |d| clock.advance(d))
    .unwrap_or(0)
}

/// `retryscope.dependency = "db"`: static strings, no allocation.
fn dep() -> KeyValue {
    KeyValue::new(names::DEPENDENCY, "db")
}

/// The same instruments, created by hand.
struct Raw {
    requests: Counter<u64>,
    retries: Counter<u64>,
    attempt_duration: Histogram<f64>,
    request_duration: Histogram<f64>,
    backoff_delay: Histogram<f64>,
}

impl Raw {
    fn new(meter: &Meter) -> Self {
        let histogram = |name: &'static str| {
            meter.f64_histogram(name).with_unit("s").with_boundaries(names::DURATION_BUCKETS.to_vec()).build()
        };
        Self {
            requests: meter.u64_counter(names::REQUESTS).with_unit("{request}").build(),
            retries: meter.u64_counter(names::RETRIES).with_unit("{retry}").build(),
            attempt_duration: histogram(names::ATTEMPT_DURATION),
            request_duration: histogram(names::REQUEST_DURATION),
            backoff_delay: histogram(names::BACKOFF_DELAY),
        }
    }

    /// The spans, events and metric records the observer makes for one operation,
    /// written by hand with static attributes and no engine.
    fn operation(&self, clock: &ManualClock, failures: u32) -> u32 {
        let started = clock.elapsed();
        self.requests.add(1, &[dep()]);
        // The observer's default shape: no operation span, the attempts under
        // the caller's span, each retry's event on the attempt that failed.
        let caller = tracing::Span::current();
        let mut attempt = 1;
        loop {
            if attempt > 1 {
                self.retries.add(1, &[dep(), KeyValue::new(names::RETRY_REASON, "503")]);
            }
            let span = tracing::info_span!(
                target: "retryscope", parent: &caller, "retryscope.attempt",
                otel.name = "db", otel.kind = "client", retryscope.attempt = i64::from(attempt),
                retryscope.dependency = "db", retryscope.operation = Option::<&str>::None,
                "error.type" = Empty, otel.status_code = Empty,
            );
            let began = clock.elapsed();
            let failed = span.in_scope(|| black_box(attempt) <= failures);
            let took = (clock.elapsed() - began).as_secs_f64();
            let number = KeyValue::new(names::ATTEMPT, i64::from(attempt));
            if !failed {
                self.attempt_duration.record(took, &[dep(), number]);
                drop(span);
                break;
            }
            self.attempt_duration.record(took, &[dep(), number, KeyValue::new(names::ERROR_TYPE, "503")]);
            span.record("error.type", "503");
            span.record("otel.status_code", "ERROR");
            let delay = Duration::from_nanos(1 << (attempt - 1));
            self.backoff_delay
                .record(delay.as_secs_f64(), &[dep(), KeyValue::new(names::DELAY_SOURCE, "policy")]);
            tracing::event!(
                target: "retryscope", parent: &span, tracing::Level::INFO,
                retryscope.dependency = "db", retryscope.operation = Option::<&str>::None,
                retryscope.attempt = i64::from(attempt + 1), retryscope.max_attempts = 3i64,
                retryscope.retry.reason = "503", delay_ms = 0i64, retryscope.delay.source = "policy",
                message = names::BACKOFF_EVENT,
            );
            drop(span);
            clock.advance(delay);
            attempt += 1;
        }
        let total = (clock.elapsed() - started).as_secs_f64();
        let attrs = [
            dep(),
            KeyValue::new(names::OUTCOME, "success"),
            KeyValue::new(names::ATTEMPTS, i64::from(attempt)),
        ];
        self.request_duration.record(total, &attrs);
        attempt
    }
}

fn blocking(c: &mut Criterion) {
    for (case, failures) in [("success_at_once", 0), ("success_on_attempt_3", 2)] {
        let mut group = c.benchmark_group(case);
        let clock = ManualClock::new();
        group.bench_function("uninstrumented", |b| b.iter(|| engine(NoObserver, &clock, failures)));
        for sampled in [true, false] {
            let label = if sampled { "sampled" } else { "not_sampled" };
            let sdk = Sdk::new(sampled);
            let _subscriber = sdk.subscribe();
            let observer = OtelObserver::from_meter(&sdk.meter());
            group.bench_function(BenchmarkId::new("instrumented", label), |b| {
                b.iter(|| engine(&observer, &clock, failures))
            });
            let raw = Raw::new(&sdk.meter());
            group.bench_function(BenchmarkId::new("raw_sdk_baseline", label), |b| {
                b.iter(|| raw.operation(&clock, failures))
            });
        }
        group.finish();
    }
}

fn asynchronous(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    let mut group = c.benchmark_group("async_success_at_once");
    let run = |observer: Option<&OtelObserver>| {
        runtime.block_on(async {
            let op = || async { Ok::<u32, u16>(black_box(1)) };
            match observer {
                Some(o) => op.retry(policy()).classify(classify).observe(o).dependency("db").await,
                None => op.retry(policy()).classify(classify).dependency("db").await,
            }
        })
    };
    group.bench_function("uninstrumented", |b| b.iter(|| run(None)));
    let sdk = Sdk::new(true);
    let _subscriber = sdk.subscribe();
    let observer = OtelObserver::from_meter(&sdk.meter());
    group.bench_function(BenchmarkId::new("instrumented", "sampled"), |b| b.iter(|| run(Some(&observer))));
    group.finish();
}

criterion_group!(benches, blocking, asynchronous);
criterion_main!(benches);
