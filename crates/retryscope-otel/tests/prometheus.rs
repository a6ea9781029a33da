//! The Prometheus exposition, scraped over real HTTP: the series names are the
//! ones in the last column of DESIGN.md §3.

#![cfg(feature = "prometheus")]

mod common;

use common::Refuse;
use retryscope::clock::ManualClock;
use retryscope::{ErrorType, Jitter, Policy, Retryable, Verdict};
use retryscope_otel::{PrometheusMetrics, register_breaker_gauge, register_budget_gauge};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n").expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    response
}

#[test]
fn the_scrape_has_the_contract_series() {
    let prometheus = PrometheusMetrics::new().expect("exporter");
    let observer = prometheus.observer();
    let meter = prometheus.meter();
    let _breaker = register_breaker_gauge(&meter, "db", || 2);
    let _budget = register_budget_gauge(&meter, "db", || 4.0);
    let policy = Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(10))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let classify = |r: &Result<(), u16>| match r {
        Ok(()) => Verdict::Success,
        Err(code) => Verdict::retryable(ErrorType::Status(*code)),
    };
    let clock = ManualClock::new();
    // Succeeds on its second attempt: a retry and a wait.
    let mut calls = 0;
    let ok = (|| {
        calls += 1;
        if calls < 2 { Err(503) } else { Ok(()) }
    })
    .retry(policy)
    .classify(classify)
    .observe(observer.clone())
    .dependency("db")
    .call_with(&clock, |d| clock.advance(d));
    assert!(ok.is_ok());
    // Refused by the budget: a throttled retry.
    let refused = (|| Err::<(), u16>(503))
        .retry(policy)
        .classify(classify)
        .budget(&Refuse)
        .observe(observer)
        .dependency("db")
        .call_with(&clock, |d| clock.advance(d));
    assert!(refused.is_err());

    let server = prometheus.serve("127.0.0.1:0").expect("serve");
    let response = get(server.local_addr(), "/metrics");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("Content-Type: text/plain; version=0.0.4"), "{response}");
    for series in [
        "retryscope_requests_total{",
        "retryscope_retries_total{",
        "retryscope_throttled_total{",
        "retryscope_attempt_duration_seconds_bucket{",
        "retryscope_attempt_duration_seconds_sum{",
        "retryscope_attempt_duration_seconds_count{",
        "retryscope_request_duration_seconds_bucket{",
        "retryscope_backoff_delay_seconds_bucket{",
        "retryscope_breaker_state{",
        "retryscope_budget_available{",
    ] {
        assert!(response.lines().any(|l| l.starts_with(series)), "no {series} in:\n{response}");
    }
    let scope =
        concat!(r#"otel_scope_name="retryscope",otel_scope_version=""#, env!("CARGO_PKG_VERSION"), r#"""#);
    for (series, labels, value) in [
        ("retryscope_requests_total", r#"retryscope_dependency="db""#, "2"),
        ("retryscope_retries_total", r#"retryscope_dependency="db",retryscope_retry_reason="503""#, "1"),
        (
            "retryscope_throttled_total",
            r#"retryscope_dependency="db",retryscope_throttle_reason="budget""#,
            "1",
        ),
        ("retryscope_breaker_state", r#"retryscope_dependency="db""#, "2"),
        ("retryscope_budget_available", r#"retryscope_dependency="db""#, "4"),
    ] {
        let line = format!("{series}{{{labels},{scope}}} {value}");
        assert!(response.lines().any(|l| l == line), "no line {line} in:\n{response}");
    }
    assert!(get(server.local_addr(), "/other").starts_with("HTTP/1.1 404"));
    if std::env::var_os("RETRYSCOPE_SAVE_FIXTURES").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/prometheus.txt");
        std::fs::write(path, &response).expect("fixture");
    }
}
