//! `.idempotency_keys()` on the tower layer, through a hyper-util client
//! against a real HTTP server on 127.0.0.1 that loses responses after reading
//! the request. Paused clock: the claims are about which requests go out.

use retryscope_test_support as support;

use bytes::Bytes;
use http::{HeaderName, Request};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use retryscope::{Jitter, Policy};
use retryscope_tower::{BoxError, KeyChoice, RetryLayer, RetryLayerBuilder, RetryService};
use std::collections::HashSet;
use std::time::Duration;
use support::keys::uuid_v4_in_sf_string;
use support::telemetry::{Telemetry, attr};
use support::{Reply, Server};
use tower::{ServiceBuilder, ServiceExt};

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(50))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid policy")
}

/// A concrete error type: a `dyn` one makes the spawned calls' futures
/// lifetime-generic, which `tokio::spawn` refuses.
type Body = BoxBody<Bytes, std::io::Error>;

/// A hyper-util client behind the layer `builder` makes, telemetry off.
fn client(builder: RetryLayerBuilder) -> RetryService<Client<HttpConnector, Body>> {
    let hyper = Client::builder(TokioExecutor::new()).build_http::<Body>();
    ServiceBuilder::new().layer(builder.no_telemetry().build()).service(hyper)
}

fn keyed() -> RetryLayerBuilder {
    RetryLayer::builder(policy()).idempotency_keys()
}

fn post(url: String, body: &'static str) -> Request<Body> {
    Request::post(url).body(BoxBody::new(Full::from(body).map_err(|e| match e {}))).expect("valid request")
}

/// The status of the answer `client` gets for `request`.
async fn status(
    client: RetryService<Client<HttpConnector, Body>>,
    request: Request<Body>,
) -> Result<u16, BoxError> {
    Ok(client.oneshot(request).await?.status().as_u16())
}

/// The `header` of every request the server saw at `path`, in order.
fn keys_seen(server: &Server, path: &str, header: &str) -> Vec<Option<String>> {
    server.seen().into_iter().filter(|s| s.path == path).map(|s| s.headers.get(header).cloned()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_post_whose_response_is_lost_is_retried_with_the_same_generated_key() {
    let server = Server::start().await;
    server.script("/orders", [Reply::DropMidResponse, Reply::ok("created")]);
    let code = status(client(keyed()), post(server.url("/orders"), "{\"sku\":7}")).await.expect("retried");
    assert_eq!(code, 200);
    let keys = keys_seen(&server, "/orders", "idempotency-key");
    assert_eq!(keys.len(), 2, "{keys:?}");
    let first = keys[0].as_deref().expect("a key on the first attempt");
    assert!(uuid_v4_in_sf_string(first).is_some(), "not an sf-string UUID v4: {first}");
    assert_eq!(keys[0], keys[1]);
}

#[tokio::test(start_paused = true)]
async fn without_the_option_a_post_answered_503_is_sent_once() {
    let server = Server::start().await;
    server.script("/orders", [Reply::status(503), Reply::ok("created")]);
    let code = status(client(RetryLayer::builder(policy())), post(server.url("/orders"), "{}")).await;
    assert_eq!(code.expect("the 503 comes back"), 503);
    assert_eq!(keys_seen(&server, "/orders", "idempotency-key"), [None]);
}

#[tokio::test(start_paused = true)]
async fn a_key_the_caller_set_is_sent_unchanged_on_every_attempt() {
    let server = Server::start().await;
    server.script("/orders", [Reply::status(503), Reply::ok("created")]);
    let mut request = post(server.url("/orders"), "{}");
    request.headers_mut().insert("idempotency-key", http::HeaderValue::from_static("caller-chosen-1"));
    assert_eq!(status(client(keyed()), request).await.expect("response"), 200);
    let keys = keys_seen(&server, "/orders", "idempotency-key");
    assert_eq!(keys, [Some("caller-chosen-1".to_owned()), Some("caller-chosen-1".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn a_supplied_key_is_used_and_a_suppressed_one_leaves_the_post_sent_once() {
    let server = Server::start().await;
    server.script("/supplied", [Reply::status(503), Reply::ok("created")]);
    server.script("/suppressed", [Reply::status(503), Reply::ok("created")]);
    let mut supplied = post(server.url("/supplied"), "{}");
    supplied.extensions_mut().insert(KeyChoice::new("order 7781").expect("printable ASCII"));
    assert_eq!(status(client(RetryLayer::builder(policy())), supplied).await.expect("response"), 200);
    let keys = keys_seen(&server, "/supplied", "idempotency-key");
    assert_eq!(keys, [Some("\"order 7781\"".to_owned()), Some("\"order 7781\"".to_owned())]);

    let mut suppressed = post(server.url("/suppressed"), "{}");
    suppressed.extensions_mut().insert(KeyChoice::suppress());
    assert_eq!(status(client(keyed()), suppressed).await.expect("the 503 comes back"), 503);
    assert_eq!(keys_seen(&server, "/suppressed", "idempotency-key"), [None]);
}

#[tokio::test(start_paused = true)]
async fn twenty_callers_sharing_one_client_each_get_their_own_stable_key() {
    let server = Server::start().await;
    for i in 0..20 {
        server.script(&format!("/orders/{i}"), [Reply::DropMidResponse, Reply::status(503), Reply::ok("ok")]);
    }
    // Every call fails twice: no budget or breaker, which would rightly stop
    // retrying a dependency where every call fails, and are not the subject.
    let shared = client(keyed().no_budget().no_breaker());
    let calls: Vec<_> = (0..20)
        .map(|i| {
            let (client, request) = (shared.clone(), post(server.url(&format!("/orders/{i}")), "{}"));
            tokio::spawn(async move { status(client, request).await })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.expect("task").expect("answered on the third attempt"), 200);
    }
    let mut distinct = HashSet::new();
    for i in 0..20 {
        let keys = keys_seen(&server, &format!("/orders/{i}"), "idempotency-key");
        assert_eq!(keys.len(), 3, "caller {i}: {keys:?}");
        assert!(keys.iter().all(|k| *k == keys[0]), "caller {i} changed keys: {keys:?}");
        let key = keys[0].clone().expect("a key");
        assert!(uuid_v4_in_sf_string(&key).is_some(), "{key}");
        distinct.insert(key);
    }
    assert_eq!(distinct.len(), 20, "two callers shared a key");
}

#[tokio::test(start_paused = true)]
async fn a_streamed_body_is_sent_once_with_the_option_on() {
    let server = Server::start().await;
    server.script("/upload", [Reply::status(503), Reply::ok("stored")]);
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, std::io::Error>>(1);
    // The body is still being produced when the request starts: a stream.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _ = sender.send(Ok(http_body::Frame::data(Bytes::from_static(b"{}")))).await;
    });
    let stream = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(receiver));
    let request = Request::post(server.url("/upload")).body(BoxBody::new(stream)).expect("valid");
    assert_eq!(status(client(keyed()), request).await.expect("the 503 comes back"), 503);
    assert_eq!(keys_seen(&server, "/upload", "idempotency-key"), [None]);
}

#[tokio::test(start_paused = true)]
async fn a_configured_header_name_carries_the_key_and_makes_the_post_retryable() {
    let server = Server::start().await;
    server.script("/orders", [Reply::status(503), Reply::ok("created")]);
    let builder = keyed().idempotency_key_header(HeaderName::from_static("x-idempotency-key"));
    assert_eq!(status(client(builder), post(server.url("/orders"), "{}")).await.expect("response"), 200);
    let keys = keys_seen(&server, "/orders", "x-idempotency-key");
    assert_eq!(keys.len(), 2);
    assert!(keys[0].as_deref().and_then(uuid_v4_in_sf_string).is_some(), "{keys:?}");
    assert_eq!(keys[0], keys[1]);
    assert_eq!(keys_seen(&server, "/orders", "idempotency-key"), [None, None]);
}

#[tokio::test(start_paused = true)]
async fn attempt_spans_say_whether_the_key_was_generated_never_what_it_is() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/generated", [Reply::status(503), Reply::ok("ok")]);
    let hyper = Client::builder(TokioExecutor::new()).build_http::<Body>();
    let layer = RetryLayer::builder(policy()).meter(&t.meter).idempotency_keys().build();
    let client = ServiceBuilder::new().layer(layer).service(hyper);
    assert_eq!(status(client.clone(), post(server.url("/generated"), "{}")).await.expect("ok"), 200);
    let mut own = post(server.url("/own"), "{}");
    own.headers_mut().insert("idempotency-key", http::HeaderValue::from_static("\"mine\""));
    assert_eq!(status(client.clone(), own).await.expect("ok"), 200);
    let get = Request::get(server.url("/plain")).body(BoxBody::new(Full::default().map_err(|e| match e {})));
    assert_eq!(status(client, get.expect("valid")).await.expect("ok"), 200);

    let generated_key = keys_seen(&server, "/generated", "idempotency-key")[0].clone().expect("a key");
    let spans: Vec<_> =
        t.spans().into_iter().filter(|s| s.span_kind == opentelemetry::trace::SpanKind::Client).collect();
    let on = |path: &str| {
        spans
            .iter()
            .filter(|s| attr(s, "url.full").is_some_and(|u| u.ends_with(path)))
            .map(|s| attr(s, "retryscope.idempotency_key.generated"))
            .collect::<Vec<_>>()
    };
    assert_eq!(on("/generated"), [Some("true".to_owned()), Some("true".to_owned())]);
    assert_eq!(on("/own"), [Some("false".to_owned())]);
    assert_eq!(on("/plain"), [None]);
    let uuid = uuid_v4_in_sf_string(&generated_key).expect("a uuid");
    for span in &spans {
        assert!(
            span.attributes.iter().all(|kv| !kv.value.as_str().contains(uuid)),
            "the key leaked: {span:#?}"
        );
    }
}
