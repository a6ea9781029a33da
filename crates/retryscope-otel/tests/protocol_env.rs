//! The protocol variables, as a user's shell sets them, honoured per signal:
//! `OTEL_EXPORTER_OTLP_PROTOCOL=http/json` for everything, overridden for
//! traces by `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc` with its own
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`. Against a real collector (rotel, which
//! takes OTLP/HTTP JSON): spans arrive over gRPC, metrics over HTTP as JSON.
//! Then the same variables with the endpoint given in code, to a fake collector
//! that records what it is sent: the metrics really are `application/json`.
//!
//! A test binary of its own with a plain `main`: it sets the process
//! environment before any thread starts.

#![allow(clippy::unwrap_used)]

use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use retryscope::clock::ManualClock;
use retryscope::{ErrorType, Jitter, Policy, Retryable, Verdict};
use retryscope_otel::{OtelObserver, OtlpConfig, Telemetry};
use retryscope_test_support::rotel;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt as _;

fn main() {
    let Some(binary) = rotel::binary() else { return };
    let collector = rotel::Collector::start(&binary, "protocol-env");
    // SAFETY: no other thread of this process exists yet, so nothing reads the
    // environment while it changes.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{}", collector.http));
        std::env::set_var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc");
        std::env::set_var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", format!("http://{}", collector.grpc));
        std::env::set_var("OTEL_SERVICE_NAME", "protocol-env-test");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let _context = runtime.enter();

    // 1. Everything from the environment, to rotel.
    let telemetry = OtlpConfig::default().build().unwrap();
    retried_call(&telemetry);
    shutdown(telemetry).expect("rotel is up on both ports: everything is flushed");
    collector
        .wait_for(&[
            "-> retryscope.attempt: Int(2)",
            "-> service.name: Str(protocol-env-test)",
            "-> Name: retryscope.requests",
            "-> Name: retryscope.retries",
        ])
        .unwrap_or_else(|missing| panic!("{missing}"));

    // 2. The endpoint in code, the protocols still from the environment: the
    // metrics go to the fake as JSON (the traces' gRPC fails there, as it should).
    let seen = Arc::new(Mutex::new(Vec::new()));
    let fake = runtime.block_on(fake_collector(seen.clone()));
    let telemetry = OtlpConfig::default().endpoint(format!("http://{fake}")).build().unwrap();
    retried_call(&telemetry);
    let _ = shutdown(telemetry);
    let seen = seen.lock().unwrap().clone();
    let metrics = seen.iter().find(|(path, _, _)| path == "/v1/metrics");
    let (_, content_type, body) =
        metrics.unwrap_or_else(|| panic!("no metrics export reached the fake: {seen:?}"));
    assert_eq!(content_type, "application/json");
    assert!(body.contains("\"retryscope.requests\""), "{body}");
    println!("protocol_env: 1 passed, 0 failed");
}

fn shutdown(telemetry: Telemetry) -> Result<(), String> {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        done.send(telemetry.shutdown().map_err(|e| format!("{e}: {:?}", e.failures())))
    });
    finished.recv_timeout(Duration::from_secs(30)).unwrap()
}

/// One 503, then success, under the telemetry's own layer.
fn retried_call(telemetry: &Telemetry) {
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let observer: OtelObserver = telemetry.observer();
    retryscope_test_support::telemetry::with_default(subscriber, || {
        let policy = Policy::builder().max_attempts(3).jitter(Jitter::None).build().unwrap();
        let clock = ManualClock::new();
        let mut calls = 0;
        let result = (|| {
            calls += 1;
            if calls < 2 { Err(503u16) } else { Ok(calls) }
        })
        .retry(policy)
        .classify(|r: &Result<u32, u16>| match r {
            Ok(_) => Verdict::Success,
            Err(code) => Verdict::retryable(ErrorType::Status(*code)),
        })
        .observe(observer)
        .dependency("inventory")
        .call_with(&clock, |d| clock.advance(d));
        assert_eq!(result.unwrap(), 2);
    });
}

/// An OTLP/HTTP collector that answers 200 to everything and records each
/// request's path, content type and body.
async fn fake_collector(seen: Arc<Mutex<Vec<(String, String, String)>>>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = seen.clone();
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let seen = seen.clone();
                async move {
                    let path = request.uri().path().to_owned();
                    let content_type = request
                        .headers()
                        .get(hyper::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    seen.lock().unwrap().push((
                        path,
                        content_type,
                        String::from_utf8_lossy(&body).into_owned(),
                    ));
                    Ok::<_, std::convert::Infallible>(Response::new(http_body_util::Full::new(
                        bytes::Bytes::new(),
                    )))
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    addr
}
