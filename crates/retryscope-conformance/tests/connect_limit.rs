//! A connect that hangs ends at its share of the attempt, and the retry
//! reaches the server long before the attempt's own limit, for both
//! integrations, on loopback.
//!
//! The server's accept queue is full when the first attempt connects, so the
//! kernel drops its SYN (as a listener under a SYN flood, or a firewall,
//! would); the kernel resends a SYN only after 1 s (its initial
//! retransmission timeout). The server starts accepting at 300 ms. With
//! [`ConnectLimit`] the first connect ends at a third of its 1.5 s attempt
//! (500 ms) and the retry, 50 ms later, is answered at once; without it the
//! same call waits for the resent SYN, 1 s in — the control that shows the
//! connect really hung.

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use retryscope::{Jitter, Policy};
use retryscope_conformance::services::SynDropping;
use retryscope_reqwest::{ConnectLimit, KeyChoice, RetryMiddleware};
use retryscope_tower::RetryLayer;
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer as _, ServiceBuilder, ServiceExt as _};

/// When the server starts accepting.
const ACCEPTS_FROM: Duration = Duration::from_millis(300);
/// The first attempt's connect limit: a third of the attempt's 1.5 s.
const CONNECT_LIMIT: Duration = Duration::from_millis(500);
/// The kernel's first SYN retransmission.
const SYN_RESENT: Duration = Duration::from_secs(1);

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(50))
        .jitter(Jitter::None)
        .attempt_timeout(Duration::from_millis(1_500))
        .deadline(Duration::from_secs(5))
        .build()
        .expect("policy")
}

/// reqwest's middleware over a client built with or without the connect limit.
fn reqwest_client(limited: bool) -> reqwest_middleware::ClientWithMiddleware {
    let inner = reqwest::Client::builder().no_proxy();
    let inner = if limited { inner.connector_layer(ConnectLimit::new()) } else { inner };
    reqwest_middleware::ClientBuilder::new(inner.build().expect("client"))
        .with(RetryMiddleware::new(policy()))
        .build()
}

/// One call through reqwest's middleware, the client built with or without
/// the connect limit; returns how long it took.
async fn reqwest_call(limited: bool) -> Duration {
    let server = SynDropping::start(ACCEPTS_FROM).await;
    let client = reqwest_client(limited);
    let started = Instant::now();
    let response = client.get(server.url()).send().await.expect("answered");
    let took = started.elapsed();
    assert_eq!(response.status(), 200);
    assert_eq!(server.answered(), 1);
    took
}

/// One call through tower's layer over a hyper-util client, its connector
/// wrapped or not; returns how long it took.
async fn tower_call(limited: bool) -> Duration {
    let server = SynDropping::start(ACCEPTS_FROM).await;
    let layer = RetryLayer::new(policy());
    let request = || http::Request::get(server.url()).body(Full::<Bytes>::default()).expect("request");
    let started = Instant::now();
    let response = if limited {
        let connector = ConnectLimit::new().layer(HttpConnector::new());
        let client = HyperClient::builder(TokioExecutor::new()).build(connector);
        ServiceBuilder::new().layer(layer).service(client).oneshot(request()).await
    } else {
        let client = HyperClient::builder(TokioExecutor::new()).build(HttpConnector::new());
        ServiceBuilder::new().layer(layer).service(client).oneshot(request()).await
    };
    let took = started.elapsed();
    assert_eq!(response.expect("answered").status(), 200);
    assert_eq!(server.answered(), 1);
    took
}

fn assert_retried_early(integration: &str, limited: Duration, unlimited: Duration) {
    println!("{integration}: with the connect limit {limited:?}, without {unlimited:?}");
    assert!(
        unlimited >= SYN_RESENT - Duration::from_millis(50),
        "{integration}: without a limit the connect waits for the resent SYN ({unlimited:?})"
    );
    assert!(
        limited >= CONNECT_LIMIT && limited < SYN_RESENT - Duration::from_millis(100),
        "{integration}: the first connect ends at {CONNECT_LIMIT:?} and the retry is answered at once ({limited:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reqwest_a_hung_connect_ends_at_its_share_and_the_retry_is_answered() {
    let limited = reqwest_call(true).await;
    let unlimited = reqwest_call(false).await;
    assert_retried_early("reqwest", limited, unlimited);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tower_a_hung_connect_ends_at_its_share_and_the_retry_is_answered() {
    let limited = tower_call(true).await;
    let unlimited = tower_call(false).await;
    assert_retried_early("tower", limited, unlimited);
}

/// Where the connect limit meets the caller's own timeout: reqwest's
/// `RequestBuilder::timeout(600 ms)` cuts each attempt to what is left of it,
/// and each connect to a third of that. The first connect ends at 200 ms, the
/// retry's (sent at 250 ms, its SYN dropped too: the server accepts from
/// 300 ms) at a third of the 350 ms left, and the third attempt is answered —
/// within the caller's 600 ms, where without the limit the call ran out of
/// time waiting for the first resent SYN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reqwest_the_callers_timeout_shortens_each_connects_limit() {
    let call = |limited: bool| async move {
        let server = SynDropping::start(ACCEPTS_FROM).await;
        let client = reqwest_client(limited);
        let started = Instant::now();
        let answer = client.get(server.url()).timeout(Duration::from_millis(600)).send().await;
        (answer.map(|r| r.status().as_u16()).map_err(|e| e.to_string()), started.elapsed(), server.answered())
    };
    let (answer, took, answered) = call(true).await;
    println!("reqwest, caller's 600 ms: with the connect limit {answer:?} after {took:?}");
    assert_eq!((answer, answered), (Ok(200), 1));
    assert!(took >= ACCEPTS_FROM && took < Duration::from_millis(600), "{took:?}");
    let (answer, took, answered) = call(false).await;
    println!("reqwest, caller's 600 ms: without {answer:?} after {took:?}");
    assert!(answer.is_err() && answered == 0, "the call ran out of time: {answer:?}");
}

/// Where the connect limit meets request safety: a POST with no idempotency
/// key (generation suppressed) is never retried once it may have been sent,
/// but a connect cut at its share sent nothing, so the POST is retried and
/// answered once — through reqwest and through tower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_whose_connect_was_cut_is_retried_for_it_sent_nothing() {
    let server = SynDropping::start(ACCEPTS_FROM).await;
    let started = Instant::now();
    let response = reqwest_client(true)
        .post(server.url())
        .with_extension(KeyChoice::suppress())
        .body("{}")
        .send()
        .await
        .expect("answered");
    let took = started.elapsed();
    println!("reqwest POST: answered after {took:?}");
    assert_eq!((response.status().as_u16(), server.answered()), (200, 1));
    assert!(took >= CONNECT_LIMIT && took < SYN_RESENT - Duration::from_millis(100), "{took:?}");

    let server = SynDropping::start(ACCEPTS_FROM).await;
    let client =
        HyperClient::builder(TokioExecutor::new()).build(ConnectLimit::new().layer(HttpConnector::new()));
    let mut request = http::Request::post(server.url()).body(Full::<Bytes>::from("{}")).expect("request");
    request.extensions_mut().insert(KeyChoice::suppress());
    let started = Instant::now();
    let response =
        ServiceBuilder::new().layer(RetryLayer::new(policy())).service(client).oneshot(request).await;
    let took = started.elapsed();
    println!("tower POST: answered after {took:?}");
    assert_eq!((response.expect("answered").status().as_u16(), server.answered()), (200, 1));
    assert!(took >= CONNECT_LIMIT && took < SYN_RESENT - Duration::from_millis(100), "{took:?}");
}
