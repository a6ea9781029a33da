//! Instrument an existing reqwest client and export its retries over OTLP.
//!
//! ```text
//! # with a collector listening (e.g. `docker compose up -d`, or rotel-agent):
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=example \
//!     cargo run -p examples --example reqwest_otlp [URL]
//! ```
//!
//! Without a URL the example starts a small flaky server on loopback (two 503s,
//! then a 200) and calls it, so the collector receives three attempt spans,
//! `retryscope.retries` = 2, the attempt-duration histogram and the budget and
//! breaker gauges. The server prints the `traceparent` each attempt carried: three
//! different span ids, one per attempt span. The call runs outside any span, so
//! each attempt is a trace of its own (the OpenTelemetry HTTP conventions' shape);
//! inside a request handler's span, the attempts are its children, in its trace.
//! Without a collector the export fails in the background: the calls
//! themselves are never slowed down by telemetry, and at exit the program logs
//! which endpoint it could not reach and exits 0.

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use retryscope::Policy;
use retryscope_reqwest::{RetryMiddleware, RetryOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Reads OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_SERVICE_NAME…
    // and installs the W3C TraceContext propagator.
    let telemetry = retryscope_otel::init_otlp()?;

    // The client the application already has…
    let client = reqwest::Client::builder().no_proxy().build()?;
    // …gains instrumented retries with one middleware (built after the providers exist).
    let client = reqwest_middleware::ClientBuilder::new(client)
        .with(RetryMiddleware::new(Policy::interactive()))
        .build();

    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => format!("http://{}/inventory", flaky_server().await?),
    };
    let response =
        client.get(&url).with_extension(RetryOptions::new().operation("fetch_inventory")).send().await?;
    println!("{url} -> {}", response.status());

    // Flush spans and metrics before exiting. A collector that is down loses
    // the telemetry, not the work: log it, and exit as usual.
    if let Err(error) = telemetry.shutdown() {
        tracing::warn!(error = &error as &dyn std::error::Error, "telemetry not flushed");
    }
    Ok(())
}

/// A server that answers 503 twice, then 200, on an ephemeral loopback port, and
/// prints the `traceparent` of every request. Written on hyper 1, as a service
/// would be: one `service_fn` per connection, served by hyper's HTTP/1 server.
async fn flaky_server() -> std::io::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let calls = Arc::new(AtomicU32::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let calls = Arc::clone(&calls);
            let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let call = calls.fetch_add(1, Ordering::Relaxed) + 1;
                let status =
                    if call <= 2 { http::StatusCode::SERVICE_UNAVAILABLE } else { http::StatusCode::OK };
                let traceparent = request
                    .headers()
                    .get("traceparent")
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or("(none)");
                println!("server: request {call} carried traceparent {traceparent} -> {status}");
                let mut response = http::Response::new(Full::new(Bytes::from_static(b"ok")));
                *response.status_mut() = status;
                std::future::ready(Ok::<_, std::convert::Infallible>(response))
            });
            // A connection's error (the client hung up) ends only that connection.
            tokio::spawn(
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    Ok(addr)
}
