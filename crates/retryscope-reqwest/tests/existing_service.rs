//! An existing service adopts retryscope by the README's "existing service"
//! snippet, literally, against a real collector (rotel).
//!
//! The service's subscriber is `tracing_subscriber::registry()` with its fmt
//! layer and its `EnvFilter` at `warn`, first in the chain, as it was before
//! retryscope; the snippet adds retryscope's layer after them (composing in
//! the one chain: a subscriber already *installed* cannot gain a layer) and
//! installs the globals. Then one call through `RetryMiddleware` that a
//! loopback server answers 503, then 200.
//!
//! It proves that the service's `warn` filter drops none of retryscope's spans:
//! every attempt span reaches the collector under the span of the service's
//! request handler that made the call (attempts are CLIENT spans under the
//! caller's span: there is no operation span by default), both in its trace,
//! and the `traceparent` each request carried names the attempt span that sent
//! it. And that the layer records none of what nobody asked for (source
//! locations, threads, busy/idle times). A test binary of its own with a plain
//! `main`: it installs the global subscriber and sets the process environment
//! (as a user's shell would) before any thread starts.

#![allow(clippy::unwrap_used)]

use retryscope_test_support as support;
use retryscope_test_support::rotel;

use std::collections::HashMap;
use support::{Reply, Server};

fn main() {
    let Some(binary) = rotel::binary() else { return };
    let collector = rotel::Collector::start(&binary, "existing-service");
    // SAFETY: no other thread of this process exists yet, so nothing reads the
    // environment while it changes.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{}", collector.http));
        std::env::set_var("OTEL_SERVICE_NAME", "existing-service-test");
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let seen = runtime.block_on(service());

    let printed = collector
        .wait_for(&["Kind           : SPAN_KIND_INTERNAL", "-> http.response.status_code: Int(200)"])
        .unwrap_or_else(|missing| panic!("{missing}"));
    let spans = rotel::spans(&printed);
    let by_id: HashMap<&str, &rotel::PrintedSpan> = spans.iter().map(|s| (s.id.as_str(), s)).collect();
    let attempts: Vec<_> = spans.iter().filter(|s| s.kind == "SPAN_KIND_CLIENT").collect();
    assert_eq!(seen.len(), 2, "503, then 200");
    assert_eq!(attempts.len(), 2, "one attempt span per request: {spans:#?}");
    for (attempt, headers) in (1..).zip(&seen) {
        let traceparent =
            headers.get("traceparent").unwrap_or_else(|| panic!("attempt {attempt}: no traceparent"));
        let [version, trace_id, span_id, flags] = traceparent.split('-').collect::<Vec<_>>()[..] else {
            panic!("malformed traceparent {traceparent:?}");
        };
        assert_eq!((version, flags), ("00", "01"), "{traceparent}");
        let span = attempts
            .iter()
            .find(|s| s.id == span_id)
            .unwrap_or_else(|| panic!("{traceparent} names no attempt span: {attempts:#?}"));
        assert_eq!(span.trace_id, trace_id, "attempt {attempt}");
        assert_eq!(span.attribute("retryscope.attempt"), Some(format!("Int({attempt})").as_str()));
        assert_eq!(
            span.attribute("retryscope.dependency").map(|d| d.contains("127.0.0.1")),
            Some(true),
            "{span:#?}"
        );
        // Under the service's own span, the handler that made the call, in its trace.
        let parent = by_id
            .get(span.parent_id.as_str())
            .unwrap_or_else(|| panic!("attempt {attempt}'s parent {:?} never arrived", span.parent_id));
        assert_eq!(
            (parent.kind.as_str(), parent.name.as_str()),
            ("SPAN_KIND_INTERNAL", HANDLER),
            "{parent:#?}"
        );
        assert_eq!(parent.trace_id, trace_id);
        // Nothing nobody asked for.
        for absent in ["code.file.path", "thread.id", "thread.name", "busy_ns", "idle_ns"] {
            assert_eq!(span.attribute(absent), None, "attempt {attempt} carries {absent}");
            assert_eq!(parent.attribute(absent), None, "the handler's span carries {absent}");
        }
        println!("attempt {attempt}: traceparent {traceparent}, under {} ({})", parent.id, parent.name);
    }
    println!("existing_service: 1 passed, 0 failed");
}

/// The span of the service's request handler, which makes the call.
const HANDLER: &str = "handle_order";

/// The service: its subscriber as it was, then the README's "existing
/// service" snippet, then one call. Returns the headers of each request the
/// server saw.
async fn service() -> Vec<HashMap<String, String>> {
    let server = Server::start().await;
    server.script("/inventory", [Reply::status(503), Reply::ok("7 in stock")]);

    readme_existing_service(server.url("/inventory")).await.unwrap();

    server.seen().into_iter().map(|s| s.headers).collect()
}

/// The README's "existing service" snippet, line for line (keep the two in
/// step), with the service's call and the `?`s of its `main`.
async fn readme_existing_service(url: String) -> Result<(), Box<dyn std::error::Error>> {
    use tracing_subscriber::{
        EnvFilter, Layer as _, layer::SubscriberExt as _, util::SubscriberInitExt as _,
    };

    let telemetry = retryscope_otel::OtlpConfig::default().build()?; // reads OTEL_*, installs nothing
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_filter(EnvFilter::new("warn"))) // the service's own
        .with(telemetry.layer()) // retryscope's spans, with a filter of their own
        .init();
    telemetry.install_globals(); // providers and W3C propagator, before building clients
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(retryscope_reqwest::RetryMiddleware::new(retryscope::Policy::interactive()))
        .build();
    // … use `client` as before; at exit, flush, and log what was lost:
    let response = {
        // The service's code, not the snippet's: a request handler's span.
        use tracing::Instrument as _;
        client.get(url).send().instrument(tracing::info_span!(HANDLER)).await?
    };
    assert_eq!(response.status(), 200);
    if let Err(error) = telemetry.shutdown() {
        tracing::warn!(error = &error as &dyn std::error::Error, "telemetry not flushed");
    }
    Ok(())
}
