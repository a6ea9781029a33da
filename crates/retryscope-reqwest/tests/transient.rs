//! `reqwest` errors are `Transient`: a plain `.retry(policy)` around a reqwest
//! call retries what may pass and returns the rest, against real loopback
//! servers (one refusing, one stalled, one answering with error statuses).

use retryscope::Retryable;
use retryscope_test_support::net::{StalledServer, closed_port};
use retryscope_test_support::quick_policy as policy;
use std::cell::Cell;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A server that answers every request with `status`, closing each connection.
async fn answering(status: u16) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await;
            let reply = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = stream.write_all(reply.as_bytes()).await;
        }
    });
    address
}

#[tokio::test]
async fn a_refused_connection_is_retried() {
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{}/", closed_port().await);
    let attempts = Cell::new(0);
    let error = (|| {
        attempts.set(attempts.get() + 1);
        client.get(&url).send()
    })
    .retry(policy())
    .await
    .expect_err("nothing listens");
    assert_eq!((attempts.get(), error.attempts()), (3, 3));
    assert!(error.last_error().is_some_and(reqwest::Error::is_connect));
}

#[tokio::test]
async fn a_timeout_is_retried() {
    let client = reqwest::Client::builder().timeout(Duration::from_millis(50)).build().expect("client");
    let stalled = StalledServer::start().await;
    let url = stalled.url("/");
    let error = (|| client.get(&url).send()).retry(policy()).await.expect_err("never answers");
    assert_eq!(error.attempts(), 3);
    assert!(error.last_error().is_some_and(reqwest::Error::is_timeout));
}

#[tokio::test]
async fn an_error_status_is_retried_only_when_transient() {
    let client = reqwest::Client::new();
    for (status, attempts_expected) in [(503, 3), (429, 3), (404, 1), (400, 1)] {
        let url = format!("http://{}/", answering(status).await);
        let attempts = Cell::new(0);
        let error = (|| {
            attempts.set(attempts.get() + 1);
            let request = client.get(&url).send();
            async move { request.await?.error_for_status() }
        })
        .retry(policy())
        .await
        .expect_err("an error status");
        assert_eq!((status, attempts.get()), (status, attempts_expected));
        assert_eq!(error.last_error().and_then(reqwest::Error::status).map(|s| s.as_u16()), Some(status));
    }
}

#[tokio::test]
async fn a_middleware_client_error_is_judged_like_reqwest_s() {
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).build();
    let url = format!("http://127.0.0.1:{}/", closed_port().await);
    let error = (|| client.get(&url).send()).retry(policy()).await.expect_err("nothing listens");
    assert_eq!(error.attempts(), 3);
}
