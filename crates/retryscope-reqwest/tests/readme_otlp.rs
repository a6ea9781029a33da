//! The README's setup, literally, against a real collector: `init_otlp()` with
//! the standard environment, `RetryMiddleware::new`, one call that a loopback
//! server answers 503 then 200. Nothing here installs a propagator, a meter or a
//! subscriber: whatever the wire and the collector show comes from the
//! documented path alone.
//!
//! It proves that every request on the wire carried a `traceparent` naming the
//! attempt span that sent it, and that the collector received the budget and
//! breaker gauges. A test binary of its own with a plain `main`: it sets the
//! process environment (as a user's shell would) before any thread starts.

#![allow(clippy::unwrap_used)]

use retryscope_test_support as support;
use retryscope_test_support::rotel;

use std::collections::HashMap;
use support::{Reply, Server};

fn main() {
    let Some(binary) = rotel::binary() else { return };
    let collector = rotel::Collector::start(&binary, "readme");
    // SAFETY: no other thread of this process exists yet, so nothing reads the
    // environment while it changes.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{}", collector.http));
        std::env::set_var("OTEL_SERVICE_NAME", "readme-test");
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (seen, dependency) = runtime.block_on(readme());

    let printed = collector
        .wait_for(&["-> Name: retryscope.budget.available", "-> Name: retryscope.breaker.state"])
        .unwrap_or_else(|missing| panic!("{missing}"));
    let spans = client_spans(&printed);
    assert_eq!(seen.len(), 2, "503, then 200");
    for (attempt, headers) in (1..).zip(&seen) {
        let traceparent =
            headers.get("traceparent").unwrap_or_else(|| panic!("attempt {attempt}: no traceparent"));
        let [version, trace_id, span_id, flags] = traceparent.split('-').collect::<Vec<_>>()[..] else {
            panic!("malformed traceparent {traceparent:?}");
        };
        assert_eq!((version, flags), ("00", "01"), "{traceparent}");
        let span =
            spans.get(span_id).unwrap_or_else(|| panic!("{traceparent} names no client span: {spans:#?}"));
        assert_eq!(span.trace_id, trace_id);
        assert_eq!(
            span.attempt,
            attempt.to_string(),
            "the traceparent of attempt {attempt} names its own span"
        );
        println!("attempt {attempt}: traceparent: {traceparent}");
    }
    for gauge in ["retryscope.budget.available", "retryscope.breaker.state"] {
        let metric = printed.split("Metric #").find(|m| m.contains(&format!("-> Name: {gauge}\n"))).unwrap();
        assert!(metric.contains("DataType: Gauge"), "{gauge}: {metric}");
        assert!(
            metric.contains(&format!("-> retryscope.dependency: Str({dependency})")),
            "{gauge}: {metric}"
        );
    }
    println!("readme_otlp: 1 passed, 0 failed");
}

/// The README, line for line, then one call; returns the headers of each request
/// the server saw, and the dependency name the call should be reported under.
async fn readme() -> (Vec<HashMap<String, String>>, String) {
    let server = Server::start().await;
    server.script("/inventory", [Reply::status(503), Reply::ok("7 in stock")]);

    let telemetry = retryscope_otel::init_otlp().unwrap(); // before building clients
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(retryscope_reqwest::RetryMiddleware::new(retryscope::Policy::interactive()))
        .build();

    let response = client.get(server.url("/inventory")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    if let Err(error) = telemetry.shutdown() {
        tracing::warn!(error = &error as &dyn std::error::Error, "telemetry not flushed");
    }

    let seen = server.seen().into_iter().map(|s| s.headers).collect();
    (seen, format!("127.0.0.1:{}", server.addr.port()))
}

/// A client span as rotel printed it.
#[derive(Debug)]
struct ClientSpan {
    trace_id: String,
    attempt: String,
}

/// Every CLIENT span in rotel's detailed output, by span id.
fn client_spans(printed: &str) -> HashMap<String, ClientSpan> {
    printed
        .split("Span #")
        .skip(1)
        .filter(|block| block.contains("Kind           : SPAN_KIND_CLIENT"))
        .filter_map(|block| {
            let field = |prefix: &str| {
                block.lines().find_map(|l| l.trim().strip_prefix(prefix)).map(|v| v.trim().to_owned())
            };
            let attempt = field("-> retryscope.attempt: Int(")?.trim_end_matches(')').to_owned();
            Some((field("ID             :")?, ClientSpan { trace_id: field("Trace ID       :")?, attempt }))
        })
        .collect()
}
