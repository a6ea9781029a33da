//! A collector that is down must never hold up instrumented calls: with the
//! exporter pointed at a closed port, 10,000 operations complete and shutdown
//! returns (with an error) in bounded time.

#![cfg(feature = "otlp")]
// Helpers outside `#[test]` functions unwrap too: a failure there is a failed test.
#![allow(clippy::unwrap_used)]

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use retryscope::clock::ManualClock;
use retryscope::{ErrorType, Jitter, Policy, Retryable, Verdict};
use retryscope_otel::{OtelObserver, OtlpConfig, Protocol, Telemetry, scope};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;

const OPERATIONS: u32 = 10_000;
/// A hang guard, not a performance target.
const HANG_GUARD: Duration = Duration::from_secs(30);

#[cfg(feature = "otlp-grpc")]
#[test]
fn a_dead_grpc_collector_never_blocks_calls() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let _context = runtime.enter();
    run(Protocol::Grpc);
}

#[test]
fn a_dead_http_collector_never_blocks_calls() {
    run(Protocol::HttpProtobuf);
}

fn run(protocol: Protocol) {
    // Bound and released: nothing listens there any more.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let telemetry = OtlpConfig::default()
        .protocol(protocol)
        .endpoint(format!("http://{closed}"))
        .metric_interval(Duration::from_millis(100))
        .build()
        .unwrap();

    let started = Instant::now();
    call_many(&telemetry);
    let elapsed = started.elapsed();
    assert!(elapsed < HANG_GUARD, "{OPERATIONS} operations took {elapsed:?}");

    // Shutdown may fail (nothing received the last batch) but must return.
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let result = telemetry.shutdown();
        let _ = done.send(result);
    });
    let result = finished.recv_timeout(HANG_GUARD).expect("shutdown returned");
    println!("{OPERATIONS} operations in {elapsed:?}; shutdown: {result:?}");
}

/// Every operation fails once and succeeds on its second attempt: two attempt
/// spans, one wait, one retry each.
fn call_many(telemetry: &Telemetry) {
    let tracer = telemetry.tracer_provider().tracer_with_scope(scope());
    let subscriber = tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
    let observer = OtelObserver::from_meter(&telemetry.meter_provider().meter_with_scope(scope()));
    let policy = Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(1))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let clock = ManualClock::new();
    retryscope_test_support::telemetry::with_default(subscriber, || {
        for _ in 0..OPERATIONS {
            let mut calls = 0;
            let result = (|| {
                calls += 1;
                if calls < 2 { Err(503u16) } else { Ok(()) }
            })
            .retry(policy)
            .classify(|r: &Result<(), u16>| match r {
                Ok(()) => Verdict::Success,
                Err(code) => Verdict::retryable(ErrorType::Status(*code)),
            })
            .observe(observer.clone())
            .dependency("down")
            .call_with(&clock, |d| clock.advance(d));
            assert!(result.is_ok());
        }
    });
}
