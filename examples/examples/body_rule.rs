//! Retry a "200 with an error body": a server you cannot change answers
//! `200 {"status":"try again"}` when it means "retry", and says so nowhere in
//! its head.
//!
//! ```text
//! cargo run -p examples --example body_rule
//! ```
//!
//! A server on loopback answers `{"status":"try again"}` first and
//! `{"status":"ok"}` second. The client's body rule reads only JSON 200s, up
//! to 4 KiB, and retries those that ask for it; the caller gets the second
//! answer, whole. Any other response (a download, an event stream) is handed
//! over as it comes, never read ahead.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use retryscope::{ErrorType, Policy, Verdict};
use retryscope_reqwest::prelude::*;
use retryscope_reqwest::{BodyLimit, BodyRule, RetryMiddleware};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::net::TcpListener;

/// The rule: which responses to read (JSON 200s), and what their body means.
struct TryAgain;

impl BodyRule for TryAgain {
    fn wants_body(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        let json = headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        status == StatusCode::OK && json
    }

    fn verdict(&self, _: StatusCode, _: &HeaderMap, body: &[u8]) -> Option<Verdict> {
        // A fixed name for the telemetry's `error.type`, never text from the body.
        let asked = body.windows(br#""try again""#.len()).any(|w| w == br#""try again""#);
        asked.then_some(Verdict::retryable(ErrorType::Kind("try_again")))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = try_again_once_server().await?;

    let middleware = RetryMiddleware::builder(Policy::interactive())
        .no_telemetry()
        .retry_on_body(BodyLimit::new(4 * 1024)?, TryAgain)
        .build();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::builder().no_proxy().build()?)
        .with(middleware)
        .build();

    let url = format!("http://{addr}/report");
    let response = client.get(&url).send().await?;
    println!("client: {url} -> {} {}", response.status(), response.text().await?);
    Ok(())
}

/// A hyper server on an ephemeral loopback port whose first answer is
/// `200 {"status":"try again"}` and every later one `200 {"status":"ok"}`.
async fn try_again_once_server() -> std::io::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let calls = Arc::new(AtomicU32::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let calls = Arc::clone(&calls);
            let service = service_fn(move |_request| {
                let call = calls.fetch_add(1, Ordering::Relaxed) + 1;
                let body: &'static str =
                    if call == 1 { r#"{"status":"try again"}"# } else { r#"{"status":"ok"}"# };
                println!("server: answer {call}: 200 {body}");
                let response = http::Response::builder()
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(Bytes::from_static(body.as_bytes())));
                async move { response }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}
