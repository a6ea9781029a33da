//! HTTP hedging through a hyper-util client against a real HTTP/1.1 server on
//! 127.0.0.1, on the wall clock: a copy after its delay is a claim about real
//! time, so the bounds are generous.

use retryscope_test_support as support;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope_tower::{RetryLayer, RetryService};
use std::time::{Duration, Instant};
use support::telemetry::{Telemetry, attr};
use support::{Reply, Server};
use tower::{Layer, Service, ServiceExt};

fn hedge() -> HedgePolicy {
    HedgePolicy::builder()
        .max_copies(3)
        .delay(HedgeDelay::fixed(Duration::from_millis(200)))
        .build()
        .expect("valid hedging policy")
}

fn client(telemetry: &Telemetry) -> RetryService<Client<HttpConnector, Full<Bytes>>> {
    let layer = RetryLayer::builder(support::quick_policy()).hedge(hedge()).meter(&telemetry.meter).build();
    layer.layer(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>())
}

fn request(method: Method, url: &str) -> Request<Full<Bytes>> {
    Request::builder().method(method).uri(url).body(Full::default()).expect("valid request")
}

/// Waits (up to 5 s) until the server has seen `n` stalled connections closed.
async fn closed(server: &Server, n: usize) -> Vec<String> {
    let until = Instant::now() + Duration::from_secs(5);
    while server.closed().len() < n && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.closed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_get_is_answered_by_its_second_copy_and_the_first_connection_is_closed() {
    let telemetry = Telemetry::install();
    let server = Server::start().await;
    server.script("/item", [Reply::StallUntilClosed, Reply::ok("from the second copy")]);
    let mut client = client(&telemetry);

    let started = Instant::now();
    let response =
        client.ready().await.expect("ready").call(request(Method::GET, &server.url("/item"))).await;
    let took = started.elapsed();
    let body = response.expect("the second copy answers").into_body().collect().await.expect("body");
    assert_eq!(body.to_bytes(), "from the second copy");
    assert!(took >= Duration::from_millis(200) && took < Duration::from_secs(5), "{took:?}");

    assert_eq!(server.seen().len(), 2);
    // The second copy says which attempt it is; the first says nothing.
    let attempts: Vec<Option<String>> =
        server.seen().iter().map(|s| s.headers.get("retry-attempt").cloned()).collect();
    assert_eq!(attempts, [None, Some("2".to_owned())]);
    // Cancelling an HTTP/1.1 request closes its connection: the server sees it.
    assert_eq!(closed(&server, 1).await, ["/item"]);

    let spans: Vec<_> = telemetry
        .spans()
        .into_iter()
        .filter(|s| s.span_kind == opentelemetry::trace::SpanKind::Client)
        .collect();
    assert_eq!(spans.len(), 2, "{spans:#?}");
    assert!(spans.iter().all(|s| attr(s, "retryscope.hedge").as_deref() == Some("true")), "{spans:#?}");
    assert!(spans.iter().all(|s| attr(s, "http.request.method").as_deref() == Some("GET")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_sends_the_next_copy_at_once_and_a_404_ends_the_call() {
    let telemetry = Telemetry::install();
    let server = Server::start().await;
    server.script("/item", [Reply::status(503), Reply::ok("second")]);
    server.script("/gone", [Reply::status(404)]);
    let slow = HedgePolicy::builder()
        .max_copies(3)
        .delay(HedgeDelay::fixed(Duration::from_secs(60)))
        .build()
        .expect("valid hedging policy");
    let layer = RetryLayer::builder(support::quick_policy()).hedge(slow).meter(&telemetry.meter).build();
    let mut client = layer.layer(Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>());

    let started = Instant::now();
    let response =
        client.ready().await.expect("ready").call(request(Method::GET, &server.url("/item"))).await;
    assert_eq!(response.expect("the second copy answers").status(), 200);
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());

    let response =
        client.ready().await.expect("ready").call(request(Method::GET, &server.url("/gone"))).await;
    assert_eq!(response.expect("a 404 is an answer").status(), 404);
    assert_eq!(server.seen().iter().filter(|s| s.path == "/gone").count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_without_an_idempotency_key_is_never_hedged_but_a_put_is() {
    let telemetry = Telemetry::install();
    let server = Server::start().await;
    server.script("/orders", [Reply::ok("created")]);
    let mut client = client(&telemetry);

    // Slow enough that a hedged request would have had its second copy.
    server.script("/orders", [Reply::StallUntilClosed]);
    let post = client.ready().await.expect("ready").call(request(Method::POST, &server.url("/orders")));
    let outcome = tokio::time::timeout(Duration::from_secs(1), post).await;
    assert!(outcome.is_err(), "the stalled POST is still waiting on its only attempt");
    assert_eq!(server.seen().len(), 1, "one POST, never a copy");
    server.assert_no_unsafe_request_ran_twice();

    server.script("/orders/7", [Reply::StallUntilClosed, Reply::ok("replaced")]);
    let put = client.ready().await.expect("ready").call(request(Method::PUT, &server.url("/orders/7"))).await;
    assert_eq!(put.expect("the PUT's second copy answers").status(), 200);
    assert_eq!(server.seen().iter().filter(|s| s.path == "/orders/7").count(), 2);

    let mut keyed = request(Method::POST, &server.url("/payments"));
    keyed.headers_mut().insert("idempotency-key", http::HeaderValue::from_static("pay-1"));
    server.script("/payments", [Reply::StallUntilClosed, Reply::ok("paid")]);
    let paid = client.ready().await.expect("ready").call(keyed).await;
    assert_eq!(paid.expect("a keyed POST is hedged").status(), 200);
}
