//! Idempotency keys where they meet attempt timeouts and a store that is
//! down: a keyed POST to a slow handler behind `IdempotencyLayer` with the
//! real Redis store (`RETRYSCOPE_REDIS_URL`), on a real axum server, runs once
//! and ends with its own 201 for both integrations. Real time: the handler
//! really takes 1.5 s, the attempts really time out after 500 ms.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use retryscope::Policy;
use retryscope_idempotency::{IdempotencyLayer, IdempotencyStore, RedisStore};
use retryscope_reqwest::RetryMiddleware;
use retryscope_test_support::external;
use retryscope_tower::{BoxError, RetryLayer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tower::{Service, ServiceBuilder, ServiceExt};

mod common;

use common::{BOTH, Integration};
use retryscope_reqwest::prelude::*;

/// The handler's running time, three attempt timeouts long.
const WORK: Duration = Duration::from_millis(1_500);

/// Attempts cut at 500 ms, within a 10 s deadline.
fn policy() -> Policy {
    Policy::builder()
        .max_attempts(5)
        .base_delay(Duration::from_millis(100))
        .attempt_timeout(Duration::from_millis(500))
        .deadline(Duration::from_secs(10))
        .build()
        .expect("a valid policy")
}

fn redis_url() -> Option<String> {
    external::required("RETRYSCOPE_REDIS_URL", "a Redis 7, e.g. redis://127.0.0.1:6399/")
}

/// Keys no other test (or earlier run) shares.
fn prefix(test: &str) -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_nanos();
    format!("test:conformance:{test}:{nanos}:")
}

/// `POST /orders` behind the layer: counts its runs, takes `WORK`, answers 201.
async fn serve(store: impl IdempotencyStore) -> (SocketAddr, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let router = Router::new()
        .route(
            "/orders",
            post(move |body: Bytes| {
                let runs = Arc::clone(&counted);
                async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    tokio::time::sleep(WORK).await;
                    (StatusCode::CREATED, format!("order {n}: {}", String::from_utf8_lossy(&body)))
                }
            }),
        )
        .layer(IdempotencyLayer::new(store));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, router).await.expect("the server runs") });
    (addr, runs)
}

/// What the caller got: the status, whether it was a replay, and the body.
#[derive(Debug)]
struct Got {
    status: u16,
    replayed: bool,
    body: String,
}

/// A keyed POST (a generated key) through `integration`'s client.
async fn post_order(integration: Integration, url: &str) -> Got {
    match integration {
        Integration::Reqwest => {
            let middleware = RetryMiddleware::builder(policy()).no_telemetry().idempotency_keys().build();
            let client =
                reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(middleware).build();
            let response = client.post(url).body("sku=7").send().await.expect("an answer");
            let status = response.status().as_u16();
            let replayed = response.headers().get("idempotency-replayed").is_some_and(|v| v == "true");
            Got { status, replayed, body: response.text().await.expect("a body") }
        }
        Integration::Tower => {
            let layer = RetryLayer::builder(policy()).no_telemetry().idempotency_keys().build();
            let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
            let mut client = ServiceBuilder::new().layer(layer).service(client);
            let request = http::Request::post(url).body(Full::new(Bytes::from_static(b"sku=7")));
            let request = request.expect("a valid request");
            let result: Result<_, BoxError> = async { client.ready().await?.call(request).await }.await;
            let response = result.expect("an answer");
            let status = response.status().as_u16();
            let replayed = response.headers().get("idempotency-replayed").is_some_and(|v| v == "true");
            let body = http_body_util::BodyExt::collect(response.into_body()).await.expect("a body");
            Got { status, replayed, body: String::from_utf8_lossy(&body.to_bytes()).into_owned() }
        }
    }
}

/// The slow payment endpoint: every attempt times out while the first runs;
/// the retries get 409 `#conflict` with `Retry-After: 1` (a key in flight is
/// not a failure), wait, and the one after the handler finished gets its 201
/// replayed. Before, the first 409 ended the call (539 ms) for an order that
/// had completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_post_whose_attempt_times_out_gets_its_own_201_and_runs_once() {
    let Some(url) = redis_url() else { return };
    for integration in BOTH {
        let client = redis::Client::open(url.as_str()).expect("a Redis URL");
        let store = RedisStore::connect(client).await.expect("Redis answers").prefix(prefix("in-flight"));
        let (addr, runs) = serve(store).await;
        let started = Instant::now();
        let got = post_order(integration, &format!("http://{addr}/orders")).await;
        let took = started.elapsed();
        eprintln!("{integration:?}: {got:?} after {took:?}");
        assert_eq!((got.status, got.replayed), (201, true), "{integration:?}: {got:?}");
        assert_eq!(got.body, "order 1: sku=7", "{integration:?}: the first run's response");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{integration:?}: executed once");
        assert!(took >= WORK, "{integration:?}: not before the handler finished ({took:?})");
        assert!(took < Duration::from_secs(10), "{integration:?}: within the deadline ({took:?})");
    }
}

/// A free loopback port and nothing listening on it yet.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("an address").port()
}

/// The store is down when the keyed POST arrives: the layer answers 503
/// `#store-unavailable` with `Retry-After: 1` and runs nothing; the client
/// retries after the wait, by then the store is back (a redis-server of the
/// test's own, started 300 ms into the call), and the order runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_post_that_meets_a_store_that_is_down_runs_once_when_it_is_back() {
    // CI provides Redis (and so redis-server); without it, like the tests above.
    if redis_url().is_none() {
        return;
    }
    for integration in BOTH {
        let port = free_port();
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("a Redis URL");
        // Connects lazily: until Redis answers, every claim fails.
        let store = RedisStore::new(client).expect("a store").prefix(prefix("store-down"));
        let (addr, runs) = serve(store).await;
        let call =
            tokio::spawn(async move { post_order(integration, &format!("http://{addr}/orders")).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{integration:?}: nothing runs while the store is down");
        let mut redis = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server starts");
        let got = call.await.expect("the call finishes");
        let _ = redis.kill();
        let _ = redis.wait();
        eprintln!("{integration:?}: {got:?}");
        assert_eq!(got.status, 201, "{integration:?}: {got:?}");
        assert_eq!(got.body, "order 1: sku=7", "{integration:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{integration:?}: executed once");
    }
}

/// Where keys meet fallbacks: a keyed POST gives up at its deadline while its
/// first attempt, cut by its timeout, is still running on the server. The
/// fallback — a queued write, as the configuration guide suggests — is told
/// the key every attempt carried; replayed later with that key, the write is
/// answered from the store with the first run's 201 and the order runs once.
/// A fallback that made up a new key would have placed it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_post_that_gives_up_hands_its_key_to_the_fallback_and_the_queued_write_runs_once() {
    let Some(url) = redis_url() else { return };
    // Gives up before the handler's 1.5 s are over: the first attempt is cut
    // at 500 ms, the retry meets the key in flight (409, `Retry-After: 1`),
    // and a second's wait does not fit the 1.2 s deadline.
    let gives_up = Policy::builder()
        .max_attempts(5)
        .base_delay(Duration::from_millis(100))
        .attempt_timeout(Duration::from_millis(500))
        .deadline(Duration::from_millis(1_200))
        .build()
        .expect("a valid policy");
    for integration in BOTH {
        let client = redis::Client::open(url.as_str()).expect("a Redis URL");
        let store = RedisStore::connect(client).await.expect("Redis answers").prefix(prefix("fallback-key"));
        let (addr, runs) = serve(store).await;
        let orders = format!("http://{addr}/orders");
        let queued = Arc::new(std::sync::Mutex::new(Vec::<http::HeaderValue>::new()));
        let queue = {
            let queued = Arc::clone(&queued);
            move |context: &retryscope_tower::FallbackContext<'_>| -> retryscope_tower::FallbackFuture {
                let key = context.idempotency_key().cloned();
                let accepted = key.is_some();
                queued.lock().expect("not poisoned").extend(key);
                Box::pin(async move {
                    let status =
                        if accepted { StatusCode::ACCEPTED } else { StatusCode::SERVICE_UNAVAILABLE };
                    Ok(http::Response::builder().status(status).body(Bytes::from_static(b"queued"))?)
                })
            }
        };
        let started = Instant::now();
        let (status, fallback) = match integration {
            Integration::Reqwest => {
                let middleware = RetryMiddleware::builder(gives_up)
                    .no_telemetry()
                    .idempotency_keys()
                    .fallback("queue", queue)
                    .default_fallback("queue")
                    .expect("registered");
                let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                    .with(middleware.build())
                    .build();
                let response =
                    client.post(&orders).body("sku=7").send().await.expect("the fallback's answer");
                let fallback = response.extensions().get::<retryscope_reqwest::Fallback>().cloned();
                (response.status().as_u16(), fallback)
            }
            Integration::Tower => {
                let layer = RetryLayer::builder(gives_up)
                    .no_telemetry()
                    .idempotency_keys()
                    .fallback("queue", queue)
                    .default_fallback("queue")
                    .expect("registered")
                    .build();
                let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
                let mut client = ServiceBuilder::new().layer(layer).service(client);
                let request = http::Request::post(&orders).body(Full::new(Bytes::from_static(b"sku=7")));
                let request = request.expect("a valid request");
                let result: Result<_, BoxError> = async { client.ready().await?.call(request).await }.await;
                let response = result.expect("the fallback's answer");
                let fallback = response.extensions().get::<retryscope_tower::Fallback>().cloned();
                (response.status().as_u16(), fallback)
            }
        };
        let took = started.elapsed();
        eprintln!("{integration:?}: {status} {fallback:?} after {took:?}");
        assert_eq!(status, 202, "{integration:?}: the fallback saw no key");
        assert!(fallback.is_some(), "{integration:?}: the answer is marked as a fallback");
        assert!(took < WORK, "{integration:?}: gave up before the handler finished ({took:?})");
        let key = queued.lock().expect("not poisoned").pop().expect("one queued write");

        // The queue's worker, later: the same write, with the key it was given.
        tokio::time::sleep(WORK).await;
        let replay = reqwest::Client::new()
            .post(&orders)
            .header("idempotency-key", key)
            .body("sku=7")
            .send()
            .await
            .expect("an answer");
        let replayed = replay.headers().get("idempotency-replayed").is_some_and(|v| v == "true");
        assert_eq!((replay.status().as_u16(), replayed), (201, true), "{integration:?}: {replay:?}");
        assert_eq!(replay.text().await.expect("a body"), "order 1: sku=7", "{integration:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{integration:?}: the order ran once");
    }
}
