//! Retry a hyper-util client's requests with the tower layer, and export every
//! attempt over OTLP.
//!
//! ```text
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=example \
//!     cargo run -p examples --example tower_hyper [URL]
//! ```
//!
//! Without a URL the example starts a small flaky server on loopback (two 503s,
//! then a 200) and calls it: the collector receives three `GET` attempt spans
//! and `retryscope.retries` = 2.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use retryscope::Policy;
use retryscope_tower::{RetryLayer, RetryOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::net::TcpListener;
use tower::{Service, ServiceBuilder, ServiceExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let telemetry = retryscope_otel::init_otlp()?;

    // The client the application already has…
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    // …gains instrumented retries with one layer (built after the providers exist).
    let mut client = ServiceBuilder::new().layer(RetryLayer::new(Policy::interactive())).service(client);

    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => format!("http://{}/inventory", flaky_server().await?),
    };
    let mut request = http::Request::get(&url).body(Full::default())?;
    request.extensions_mut().insert(RetryOptions::new().operation("fetch_inventory"));
    let response = client.ready().await?.call(request).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    println!("{url} -> {status} {body:?}");

    // Flush spans and metrics before exiting. A collector that is down loses
    // the telemetry, not the work: log it, and exit as usual.
    if let Err(error) = telemetry.shutdown() {
        tracing::warn!(error = &error as &dyn std::error::Error, "telemetry not flushed");
    }
    Ok(())
}

/// A server that answers 503 twice, then 200, on an ephemeral loopback port.
async fn flaky_server() -> std::io::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let calls = Arc::new(AtomicU32::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let calls = Arc::clone(&calls);
            let service = service_fn(move |_request: http::Request<hyper::body::Incoming>| {
                let status = if calls.fetch_add(1, Ordering::Relaxed) < 2 { 503 } else { 200 };
                async move {
                    let mut response = http::Response::new(Full::new(Bytes::from_static(b"7 in stock")));
                    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    Ok(addr)
}
