//! A failed HTTP response kept through a backoff wait lets go of its
//! connection, as the reqwest middleware's does: the retry finds it back in the
//! pool. A real keep-alive server on loopback counts the connections.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use retryscope::{Jitter, Policy};
use retryscope_tower::RetryLayer;
use retryscope_tower::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tower::{Layer, Service, ServiceExt};

/// Answers the first request with a 503 and a 32 KiB error page (more than hyper reads ahead, less than the 64 KiB drained), every later
/// one with a 200, keeping each connection open; counts the connections.
async fn keep_alive_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("address"));
    let (connections, requests) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let counted = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let requests = Arc::clone(&requests);
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 1024];
                while let Ok(n @ 1..) = stream.read(&mut chunk).await {
                    buffer.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                        buffer.drain(..end + 4);
                        let reply = if requests.fetch_add(1, Ordering::SeqCst) == 0 {
                            let page = "x".repeat(32 * 1024);
                            format!(
                                "HTTP/1.1 503 Service Unavailable\r\ncontent-length: {}\r\n\r\n{page}",
                                page.len()
                            )
                        } else {
                            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_owned()
                        };
                        if stream.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (url, connections)
}

#[tokio::test]
async fn the_retry_after_a_failed_response_reuses_its_connection() {
    let (url, connections) = keep_alive_server().await;
    let policy = Policy::builder()
        .max_attempts(2)
        .base_delay(Duration::from_millis(200))
        .jitter(Jitter::None)
        .build()
        .expect("valid policy");
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut service = RetryLayer::builder(policy).no_telemetry().build().layer(client);
    let request = Request::get(&url).body(Full::default()).expect("request");
    let response = service.ready().await.expect("ready").call(request).await.expect("answered");
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(body, "ok");
    // The 503's page was read during the 200 ms wait, which gave its connection
    // back to the pool: the retry went out on it instead of opening another.
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}
