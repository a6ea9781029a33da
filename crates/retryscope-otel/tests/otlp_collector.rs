//! Over the wire: spans and metrics exported over OTLP/gRPC and OTLP/HTTP reach a
//! real collector (rotel, started by the test, printing what it receives).
//!
//! Runs when `RETRYSCOPE_ROTEL` names the `rotel-agent` binary (CI sets it);
//! otherwise each test says it was skipped and passes.

#![cfg(feature = "otlp")]
// Helpers outside `#[test]` functions unwrap too: a failure there is a failed test.
#![allow(clippy::unwrap_used)]

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use retryscope::clock::ManualClock;
use retryscope::{ErrorType, Jitter, Policy, Retryable, Verdict};
use retryscope_otel::{OtelObserver, OtlpConfig, Protocol, scope};
use rotel::Collector;
use std::path::PathBuf;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;

use retryscope_test_support::rotel;

#[cfg(feature = "otlp-grpc")]
#[test]
fn spans_and_metrics_arrive_over_grpc() {
    run(Protocol::Grpc);
}

#[test]
fn spans_and_metrics_arrive_over_http() {
    run(Protocol::HttpProtobuf);
}

fn run(protocol: Protocol) {
    let Some(binary) = rotel::binary() else { return };
    let (tag, grpc) = match protocol {
        Protocol::Grpc => ("grpc", true),
        Protocol::HttpProtobuf => ("http", false),
        other => panic!("no collector port for {other:?}"),
    };
    let collector = Collector::start(&binary, tag);
    let endpoint = format!("http://{}", if grpc { collector.grpc } else { collector.http });
    // Tonic's channel runs on this runtime; the SDK exports from its own threads.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let _context = runtime.enter();
    let telemetry = OtlpConfig::default()
        .protocol(protocol)
        .endpoint(endpoint)
        .service_name("retryscope-otel-test")
        .build()
        .unwrap();

    let tracer = telemetry.tracer_provider().tracer_with_scope(scope());
    let subscriber = tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
    let observer = OtelObserver::from_meter(&telemetry.meter_provider().meter_with_scope(scope()));
    tracing::subscriber::with_default(subscriber, || {
        tracing::info_span!("checkout").in_scope(|| succeed_on_the_third_attempt(&observer));
    });

    telemetry.shutdown().expect("the collector is up: everything is flushed");
    let output = collector
        .wait_for(&[
            // rotel's detailed debug log, one line per field.
            // The attempts, named after the operation, under the caller's span.
            "Name           : reserve",
            "Kind           : SPAN_KIND_CLIENT",
            "-> retryscope.attempt: Int(3)",
            "-> retryscope.dependency: Str(inventory)",
            "-> retryscope.operation: Str(reserve)",
            "-> error.type: Str(503)",
            "Name           : checkout",
            // The failed attempts' events.
            "-> Name: retryscope.backoff",
            "-> Name: retryscope.retries",
            "-> retryscope.retry.reason: Str(503)",
            "-> Name: retryscope.attempt.duration",
            "-> Name: retryscope.request.duration",
            "-> Unit: {retry}",
        ])
        .unwrap_or_else(|missing| panic!("{missing}"));
    save_fixture(tag, &output);
}

/// Two 503s, then success: three attempt spans (no operation span), two retries.
fn succeed_on_the_third_attempt(observer: &OtelObserver) {
    let policy = Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(100))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let clock = ManualClock::new();
    let mut calls = 0;
    let result = (|| {
        calls += 1;
        if calls < 3 { Err(503u16) } else { Ok(calls) }
    })
    .retry(policy)
    .classify(|r: &Result<u32, u16>| match r {
        Ok(_) => Verdict::Success,
        Err(code) => Verdict::retryable(ErrorType::Status(*code)),
    })
    .observe(observer.clone())
    .dependency("inventory")
    .operation("reserve")
    .call_with(&clock, |d| clock.advance(d));
    assert_eq!(result.unwrap(), 3);
}

/// Keeps what the collector printed, for the docs: the lead quotes one span and
/// one metric. Written next to the sources only when asked to.
fn save_fixture(tag: &str, output: &str) {
    if std::env::var_os("RETRYSCOPE_SAVE_FIXTURES").is_some() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/rotel-{tag}.txt"));
        std::fs::write(path, output).unwrap();
    }
}
