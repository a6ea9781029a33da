//! Retries along a call chain: a top client → a middle service (behind
//! `IncomingLayer`, calling the bottom through `RetryLayer`) → a bottom service
//! that is down. All real hyper servers on 127.0.0.1, on the paused clock.

use retryscope_test_support as support;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use retryscope::Policy;
use retryscope_otel::IncomingRequests;
use retryscope_tower::prelude::*;
use retryscope_tower::{BoxError, IncomingLayer, RetryLayer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;
use support::http_server::HttpServer;
use support::telemetry::Telemetry;
use tower::{Service, ServiceBuilder, ServiceExt};

const ATTEMPTS: u32 = 4;

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(ATTEMPTS)
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(100))
        .no_deadline()
        .build()
        .expect("valid policy")
}

fn retry_layer(t: &Telemetry, one_layer: bool) -> RetryLayer {
    let builder = RetryLayer::builder(policy()).meter(&t.meter).no_budget().no_breaker();
    if one_layer { builder.retry_at_one_layer().build() } else { builder.build() }
}

/// The middle service: counts what it receives, calls `bottom` for every
/// request and answers with the bottom's status.
async fn start_middle(t: &Telemetry, bottom: SocketAddr, one_layer: bool) -> SocketAddr {
    let client = ServiceBuilder::new()
        .layer(retry_layer(t, one_layer))
        .service(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    let handler = tower::service_fn(move |_: Request<Incoming>| {
        let mut client = client.clone();
        async move {
            let request = Request::get(format!("http://{bottom}/work")).body(Full::default())?;
            let answer = client.ready().await?.call(request).await?;
            let mut response = Response::new(Full::<Bytes>::default());
            *response.status_mut() = answer.status();
            Ok::<_, BoxError>(response)
        }
    });
    let service = ServiceBuilder::new()
        .layer(
            IncomingLayer::with(IncomingRequests::from_meter(&t.meter)).route(|_| Some("/work".to_owned())),
        )
        .service(handler);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service.clone();
            tokio::spawn(async move {
                let hyper_service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let mut service = service.clone();
                    async move {
                        match service.ready().await {
                            Ok(ready) => ready.call(request).await,
                            Err(e) => Err(e),
                        }
                        .or_else(|_| {
                            Ok::<_, Infallible>(
                                Response::builder().status(500).body(Full::default()).unwrap_or_default(),
                            )
                        })
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), hyper_service)
                    .await;
            });
        }
    });
    addr
}

/// One user request from the top client to the middle; the middle's status.
async fn user_request(t: &Telemetry, middle: SocketAddr, one_layer: bool) -> u16 {
    let mut top = ServiceBuilder::new()
        .layer(retry_layer(t, one_layer))
        .service(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());
    let request = Request::get(format!("http://{middle}/")).body(Full::default()).expect("request");
    let response = top.ready().await.expect("ready").call(request).await.expect("a response");
    response.status().as_u16()
}

/// What the bottom saw in `retry-attempt`, per request.
fn announced(bottom: &HttpServer) -> Vec<Option<String>> {
    bottom
        .seen()
        .iter()
        .map(|s| s.headers.get("retry-attempt").and_then(|v| v.to_str().ok()).map(str::to_owned))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn retries_multiply_down_the_chain_and_each_server_sees_which_attempt_it_gets() {
    let t = Telemetry::install();
    let bottom = HttpServer::start(&[503; 64]).await;
    let middle = start_middle(&t, bottom.addr, false).await;
    assert_eq!(user_request(&t, middle, false).await, 503);

    // Four attempts at the top, four below each of them.
    let seen = announced(&bottom);
    assert_eq!(seen.len(), (ATTEMPTS * ATTEMPTS) as usize);
    let one_round = [None, Some("2".to_owned()), Some("3".to_owned()), Some("4".to_owned())];
    assert!(seen.chunks(4).all(|round| round == one_round), "{seen:?}");
    // The middle's server metric counts the top's retries.
    for bucket in ["1", "2", "3", "4+"] {
        let counted = t.counter(
            "retryscope.server.requests",
            &[("retryscope.attempt", bucket), ("http.route", "/work")],
        );
        assert_eq!(counted, 1, "attempt {bucket}");
    }
}

#[tokio::test(start_paused = true)]
async fn at_one_layer_the_bottom_sees_one_layers_worth_of_attempts() {
    let t = Telemetry::install();
    let bottom = HttpServer::start(&[503; 64]).await;
    let middle = start_middle(&t, bottom.addr, true).await;
    assert_eq!(user_request(&t, middle, true).await, 503);

    assert_eq!(bottom.seen().len(), ATTEMPTS as usize, "the middle retried; the top did not retry that");
    assert_eq!(t.counter("retryscope.server.requests", &[("retryscope.attempt", "1")]), 1);
    assert_eq!(t.counter("retryscope.server.requests", &[("retryscope.attempt", "2")]), 0);
    assert_eq!(t.counter("retryscope.throttled", &[("retryscope.throttle.reason", "upstream_retry")]), 1);
}

#[tokio::test(start_paused = true)]
async fn at_one_layer_a_retried_request_makes_one_attempt_downstream() {
    let t = Telemetry::install();
    let bottom = HttpServer::start(&[503; 64]).await;
    let middle = start_middle(&t, bottom.addr, true).await;
    // A top that retries per layer (it does not honour `retry-exhausted`): the
    // middle still makes only one attempt for each of its retries.
    assert_eq!(user_request(&t, middle, false).await, 503);
    assert_eq!(
        bottom.seen().len(),
        (ATTEMPTS + ATTEMPTS - 1) as usize,
        "4 for the first attempt, 1 per retry"
    );
}
