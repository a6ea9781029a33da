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
    retryscope_test_support::telemetry::with_default(subscriber, || {
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

/// A hedged call over OTLP/HTTP: its operation span, and one CLIENT span per
/// copy under it, marked as hedges and ended with their outcomes, as the
/// collector printed them; and the hedge counters.
#[test]
fn a_hedged_call_arrives_as_one_span_per_copy_under_its_operation_span() {
    let Some(binary) = rotel::binary() else { return };
    let collector = Collector::start(&binary, "hedge");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let _context = runtime.enter();
    let telemetry = OtlpConfig::default()
        .protocol(Protocol::HttpProtobuf)
        .endpoint(format!("http://{}", collector.http))
        .service_name("retryscope-otel-test")
        .build()
        .unwrap();
    let tracer = telemetry.tracer_provider().tracer_with_scope(scope());
    let subscriber = tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
    let observer = OtelObserver::from_meter(&telemetry.meter_provider().meter_with_scope(scope()));
    let _default = retryscope_test_support::telemetry::set_default(subscriber);
    runtime
        .block_on(tracing::Instrument::instrument(hedged_call(&observer), tracing::info_span!("checkout")));
    telemetry.shutdown().expect("the collector is up: everything is flushed");

    let output = collector
        .wait_for(&[
            "-> retryscope.hedge.outcome: Str(won)",
            "-> retryscope.hedge.outcome: Str(cancelled)",
            "-> Name: retryscope.hedges",
            "-> Name: retryscope.hedge.wins",
            "-> Unit: {hedge}",
        ])
        .unwrap_or_else(|missing| panic!("{missing}"));
    let spans = rotel::spans(&output);
    let operation = spans
        .iter()
        .find(|s| s.name == "get_item" && s.kind == "SPAN_KIND_INTERNAL")
        .unwrap_or_else(|| panic!("no operation span in {spans:#?}"));
    let checkout = spans.iter().find(|s| s.name == "checkout").expect("the caller's span");
    assert_eq!(operation.parent_id, checkout.id);
    assert_eq!(operation.attribute("retryscope.attempts"), Some("Int(2)"));
    let mut copies: Vec<_> = spans.iter().filter(|s| s.parent_id == operation.id).collect();
    copies.sort_by_key(|s| s.attribute("retryscope.attempt").map(str::to_owned));
    let summary: Vec<_> = copies
        .iter()
        .map(|s| {
            (
                s.kind.as_str(),
                s.attribute("retryscope.attempt"),
                s.attribute("retryscope.hedge"),
                s.attribute("retryscope.hedge.outcome"),
                s.attribute("error.type"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("SPAN_KIND_CLIENT", Some("Int(1)"), Some("Bool(true)"), Some("Str(cancelled)"), None),
            ("SPAN_KIND_CLIENT", Some("Int(2)"), Some("Bool(true)"), Some("Str(won)"), None),
        ]
    );
    save_fixture("hedge", &output);
}

/// The first copy stalls; the second, sent after 20 ms, answers in 5 ms.
async fn hedged_call(observer: &OtelObserver) {
    use retryscope::hedge::{HedgeDelay, HedgePolicy};
    let policy = HedgePolicy::builder().delay(HedgeDelay::Fixed(Duration::from_millis(20))).build().unwrap();
    let mut copies = 0;
    let answer = (|| {
        copies += 1;
        let took = if copies == 1 { Duration::from_secs(10) } else { Duration::from_millis(5) };
        async move {
            tokio::time::sleep(took).await;
            Ok::<_, std::io::Error>(copies)
        }
    })
    .hedge(policy.clone())
    .observe(observer.clone())
    .dependency("inventory")
    .operation("get_item")
    .await;
    assert_eq!(answer.unwrap(), 2);
}

/// Keeps what the collector printed, for the docs: the lead quotes one span and
/// one metric. Written next to the sources only when asked to.
fn save_fixture(tag: &str, output: &str) {
    if std::env::var_os("RETRYSCOPE_SAVE_FIXTURES").is_some() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/rotel-{tag}.txt"));
        std::fs::write(path, output).unwrap();
    }
}
