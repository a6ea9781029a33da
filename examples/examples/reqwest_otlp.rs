//! Instrument an existing reqwest client and export its retries over OTLP.
//!
//! ```text
//! # with a collector listening (e.g. `docker compose up -d`, or rotel-agent):
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=example \
//!     cargo run -p examples --example reqwest_otlp [URL]
//! ```
//!
//! Without a URL the example starts a small flaky server on loopback (two 503s,
//! then a 200) and calls it, so the collector receives an operation span with
//! three attempt spans, `retryscope.retries` = 2, the attempt-duration histogram
//! and the budget and breaker gauges. The server prints the `traceparent` each
//! attempt carried: three different span ids, one per attempt span, in one trace.
//! Without a collector the export fails in the background: the calls
//! themselves are never slowed down by telemetry, and at exit the program logs
//! which endpoint it could not reach and exits 0.

use retryscope::Policy;
use retryscope_reqwest::{RetryMiddleware, RetryOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
/// prints the `traceparent` of every request.
async fn flaky_server() -> std::io::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let calls = Arc::new(AtomicU32::new(0));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let call = calls.fetch_add(1, Ordering::Relaxed) + 1;
            let status = if call <= 2 { "503 Service Unavailable" } else { "200 OK" };
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let read = stream.read(&mut request).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&request[..read]);
                let traceparent = head
                    .lines()
                    .find_map(|line| line.strip_prefix("traceparent:"))
                    .map_or("(none)", str::trim);
                println!("server: request {call} carried traceparent {traceparent} -> {status}");
                let response =
                    format!("HTTP/1.1 {status}\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    Ok(addr)
}
