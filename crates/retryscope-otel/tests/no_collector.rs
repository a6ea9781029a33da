//! A program set up with `init_otlp()` and no collector listening: one
//! instrumented call, shutdown, exit. It must exit 0 — the telemetry is lost,
//! not the work — and its log must say which endpoints it could not reach,
//! and how many spans were lost.
//!
//! The program is this test binary, run again as a child process with the
//! environment a user's shell would give it (a plain `main`, no harness).

#![allow(clippy::unwrap_used)]

use retryscope::clock::ManualClock;
use retryscope::{ErrorType, Jitter, Policy, Retryable, Verdict};
use std::net::TcpListener;
use std::process::Command;

const CHILD: &str = "RETRYSCOPE_TEST_CHILD";

fn main() {
    if std::env::var_os(CHILD).is_some() {
        return program();
    }
    // Bound and released: nothing listens there any more.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .env(CHILD, "1")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{closed}"))
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("the program's stderr:\n{stderr}");
    assert!(output.status.success(), "the program failed: {:?}", output.status);
    assert!(stderr.contains("telemetry not flushed"), "no shutdown warning");
    let shutdown_line = stderr.lines().find(|l| l.contains("telemetry not flushed")).unwrap_or_default();
    // Every signal it could not deliver, the spans lost with theirs: the
    // program's one attempt span per attempt (2), neither exported.
    let traces = format!("traces to http://{closed}/v1/traces (2 spans lost)");
    let metrics = format!("metrics to http://{closed}/v1/metrics");
    assert!(shutdown_line.contains(&traces), "the shutdown error names no {traces:?}: {shutdown_line}");
    assert!(shutdown_line.contains(&metrics), "the shutdown error names no {metrics:?}: {shutdown_line}");
    assert!(stderr.contains("retryscope.backoff"), "the stderr log prints the retry");
    println!("no_collector: 1 passed, 0 failed");
}

/// What a user's program does: the guide's one-call setup, one retried call,
/// shutdown with the error logged.
fn program() {
    let telemetry = retryscope_otel::init_otlp().unwrap();
    let observer = retryscope_otel::OtelObserver::global();
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
    if let Err(error) = telemetry.shutdown() {
        tracing::warn!(error = &error as &dyn std::error::Error, "telemetry not flushed");
    }
}
