//! One setup, two exports: `OtlpConfig::with_prometheus` puts a Prometheus
//! reader on the meter provider that exports over OTLP, and the scrape is
//! mounted on the service's own axum router. The same retry is then both
//! scraped (as `retryscope_requests_total` with its labels) and received by a
//! real collector (rotel).

#![allow(clippy::unwrap_used)]

use axum::routing::get;
use retryscope::clock::ManualClock;
use retryscope::{ErrorType, Jitter, Policy, Retryable, Verdict};
use retryscope_otel::{OtelObserver, OtlpConfig, Protocol};
use retryscope_test_support::rotel;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_setup_exports_over_otlp_and_serves_the_scrape_on_the_services_router() {
    let Some(binary) = rotel::binary() else { return };
    let collector = rotel::Collector::start(&binary, "otlp-and-prometheus");
    let telemetry = OtlpConfig::default()
        .protocol(Protocol::HttpProtobuf)
        .endpoint(format!("http://{}", collector.http))
        .service_name("otlp-and-prometheus-test")
        .with_prometheus()
        .build()
        .unwrap();
    let metrics = telemetry.prometheus().expect("asked for").clone();
    // The service's router, with the scrape mounted on it.
    let app: axum::Router = axum::Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/metrics", get(move || async move { metrics.scrape() }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    retried_call(&telemetry.observer());

    let scraped = scrape(addr).await;
    let requests = scraped
        .lines()
        .find(|l| l.starts_with("retryscope_requests_total{"))
        .unwrap_or_else(|| panic!("no retryscope_requests_total in:\n{scraped}"));
    assert!(requests.contains(r#"retryscope_dependency="inventory""#), "{requests}");
    assert!(requests.contains(r#"retryscope_operation="reserve""#), "{requests}");
    assert!(requests.ends_with(" 1"), "{requests}");
    assert!(scraped.contains("retryscope_retries_total{"), "{scraped}");

    // The OTLP side: shutdown flushes the same counter to the collector.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(telemetry.shutdown().map_err(|e| e.to_string())));
    finished.recv_timeout(Duration::from_secs(30)).unwrap().expect("the collector is up");
    let printed = collector
        .wait_for(&["-> Name: retryscope.requests", "-> retryscope.dependency: Str(inventory)"])
        .unwrap_or_else(|missing| panic!("{missing}"));
    let metric = printed.split("Metric #").find(|m| m.contains("-> Name: retryscope.requests\n")).unwrap();
    assert!(metric.contains("-> retryscope.operation: Str(reserve)"), "{metric}");
    assert!(metric.contains("Value: 1"), "{metric}");
}

/// One 503, then success: one request, one retry.
fn retried_call(observer: &OtelObserver) {
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
    .observe(observer.clone())
    .dependency("inventory")
    .operation("reserve")
    .call_with(&clock, |d| clock.advance(d));
    assert_eq!(result.unwrap(), 2);
}

/// `GET /metrics` as a scraper sends it; the body.
async fn scrape(addr: std::net::SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer)).await.unwrap().unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"), "{head}");
    body.to_owned()
}
