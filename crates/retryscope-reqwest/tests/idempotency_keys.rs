//! `.idempotency_keys()` against a real HTTP server on 127.0.0.1 that loses
//! responses after reading the request: one key per logical operation, the
//! same on every attempt, and what is still sent once. Paused clock: the
//! claims are about which requests go out, not about time.

use retryscope_test_support as support;

use http::HeaderName;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use retryscope::{Jitter, Policy};
use retryscope_reqwest::{KeyChoice, RetryMiddleware, RetryMiddlewareBuilder, RetryOptions};
use std::collections::HashSet;
use std::time::Duration;
use support::keys::uuid_v4_in_sf_string;
use support::telemetry::{Telemetry, attr};
use support::{Reply, Server};

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(50))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid policy")
}

fn client(builder: RetryMiddlewareBuilder) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    ClientBuilder::new(inner).with(builder.no_telemetry().build()).build()
}

fn keyed_client() -> ClientWithMiddleware {
    client(RetryMiddleware::builder(policy()).idempotency_keys())
}

/// The `idempotency-key` header of every request the server saw at `path`, in order.
fn keys_seen(server: &Server, path: &str, header: &str) -> Vec<Option<String>> {
    server.seen().into_iter().filter(|s| s.path == path).map(|s| s.headers.get(header).cloned()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_post_whose_response_is_lost_is_retried_with_the_same_generated_key() {
    let server = Server::start().await;
    // The server reads the whole request, then breaks the connection off.
    server.script("/orders", [Reply::DropMidResponse, Reply::ok("created")]);
    let response =
        keyed_client().post(server.url("/orders")).body("{\"sku\":7}").send().await.expect("retried");
    assert_eq!(response.text().await.expect("body"), "created");

    let keys = keys_seen(&server, "/orders", "idempotency-key");
    assert_eq!(keys.len(), 2, "{keys:?}");
    let first = keys[0].as_deref().expect("a key on the first attempt");
    assert!(uuid_v4_in_sf_string(first).is_some(), "not an sf-string UUID v4: {first}");
    assert_eq!(keys[0], keys[1], "every attempt carries the operation's one key");
}

#[tokio::test(start_paused = true)]
async fn a_post_answered_503_after_the_work_is_retried_with_the_same_key() {
    let server = Server::start().await;
    server.script("/payments", [Reply::status(503), Reply::status(503), Reply::ok("paid")]);
    let response = keyed_client().post(server.url("/payments")).body("{}").send().await.expect("response");
    assert_eq!(response.status(), 200);
    let keys = keys_seen(&server, "/payments", "idempotency-key");
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| k.is_some() && *k == keys[0]), "{keys:?}");
}

#[tokio::test(start_paused = true)]
async fn without_the_option_a_post_whose_response_is_lost_is_sent_once() {
    let server = Server::start().await;
    server.script("/orders", [Reply::DropMidResponse, Reply::ok("created")]);
    let error = client(RetryMiddleware::builder(policy()))
        .post(server.url("/orders"))
        .body("{}")
        .send()
        .await
        .expect_err("not retried");
    assert!(!error.to_string().is_empty());
    assert_eq!(keys_seen(&server, "/orders", "idempotency-key"), [None]);
    server.assert_no_unsafe_request_ran_twice();
}

#[tokio::test(start_paused = true)]
async fn a_key_the_caller_set_is_sent_unchanged_on_every_attempt() {
    let server = Server::start().await;
    server.script("/orders", [Reply::status(503), Reply::ok("created")]);
    keyed_client()
        .post(server.url("/orders"))
        .header("idempotency-key", "caller-chosen-1")
        .body("{}")
        .send()
        .await
        .expect("response");
    let keys = keys_seen(&server, "/orders", "idempotency-key");
    assert_eq!(keys, [Some("caller-chosen-1".to_owned()), Some("caller-chosen-1".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn a_key_supplied_as_an_extension_goes_out_as_an_sf_string_on_every_attempt() {
    let server = Server::start().await;
    server.script("/orders", [Reply::status(503), Reply::ok("created")]);
    // Without `.idempotency_keys()`: a supplied key makes the POST retryable on its own.
    client(RetryMiddleware::builder(policy()))
        .post(server.url("/orders"))
        .with_extension(KeyChoice::new("order-7781").expect("printable ASCII"))
        .body("{}")
        .send()
        .await
        .expect("response");
    let keys = keys_seen(&server, "/orders", "idempotency-key");
    assert_eq!(keys, [Some("\"order-7781\"".to_owned()), Some("\"order-7781\"".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn a_suppressed_key_leaves_the_post_sent_once() {
    let server = Server::start().await;
    server.script("/orders", [Reply::status(503), Reply::ok("created")]);
    let response = keyed_client()
        .post(server.url("/orders"))
        .with_extension(KeyChoice::suppress())
        .body("{}")
        .send()
        .await
        .expect("the 503 comes back");
    assert_eq!(response.status(), 503);
    assert_eq!(keys_seen(&server, "/orders", "idempotency-key"), [None]);
}

#[tokio::test(start_paused = true)]
async fn a_request_marked_idempotent_gets_a_key_too() {
    let server = Server::start().await;
    server.script("/events", [Reply::status(503), Reply::ok("stored")]);
    keyed_client()
        .post(server.url("/events"))
        .with_extension(RetryOptions::new().idempotent())
        .body("{}")
        .send()
        .await
        .expect("response");
    let keys = keys_seen(&server, "/events", "idempotency-key");
    assert_eq!(keys.len(), 2);
    assert!(keys[0].as_deref().and_then(uuid_v4_in_sf_string).is_some(), "{keys:?}");
    assert_eq!(keys[0], keys[1]);
}

#[tokio::test(start_paused = true)]
async fn a_get_gets_no_key() {
    let server = Server::start().await;
    server.script("/orders", [Reply::status(503), Reply::ok("list")]);
    keyed_client().get(server.url("/orders")).send().await.expect("response");
    assert_eq!(keys_seen(&server, "/orders", "idempotency-key"), [None, None]);
}

#[tokio::test(start_paused = true)]
async fn twenty_callers_sharing_one_client_each_get_their_own_stable_key() {
    let server = Server::start().await;
    for i in 0..20 {
        server.script(&format!("/orders/{i}"), [Reply::DropMidResponse, Reply::status(503), Reply::ok("ok")]);
    }
    // Every call fails twice here: no budget or breaker, which would rightly
    // stop retrying a dependency where every call fails, and are not the subject.
    let client = client(RetryMiddleware::builder(policy()).idempotency_keys().no_budget().no_breaker());
    let calls = (0..20).map(|i| {
        let (client, url) = (client.clone(), server.url(&format!("/orders/{i}")));
        tokio::spawn(async move { client.post(url).body(format!("{{\"n\":{i}}}")).send().await })
    });
    for call in calls {
        let response = call.await.expect("task").expect("answered on the third attempt");
        assert_eq!(response.status(), 200);
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
    let chunks: Vec<Result<&'static str, std::io::Error>> = vec![Ok("{\"a\":"), Ok("1}")];
    let body = reqwest::Body::wrap_stream(Chunks(chunks.into_iter()));
    let response =
        keyed_client().post(server.url("/upload")).body(body).send().await.expect("the 503 comes back");
    assert_eq!(response.status(), 503);
    // No key either: there is no second attempt for it to protect.
    assert_eq!(keys_seen(&server, "/upload", "idempotency-key"), [None]);
}

#[tokio::test(start_paused = true)]
async fn a_configured_header_name_carries_the_key_and_makes_the_post_retryable() {
    let server = Server::start().await;
    server.script("/orders", [Reply::status(503), Reply::ok("created")]);
    let name = HeaderName::from_static("x-idempotency-key");
    client(RetryMiddleware::builder(policy()).idempotency_keys().idempotency_key_header(name))
        .post(server.url("/orders"))
        .body("{}")
        .send()
        .await
        .expect("response");
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
    server.script("/own", [Reply::ok("ok")]);
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    let middleware = RetryMiddleware::builder(policy()).meter(&t.meter).idempotency_keys().build();
    let client = ClientBuilder::new(inner).with(middleware).build();
    client.post(server.url("/generated")).body("{}").send().await.expect("response");
    client
        .post(server.url("/own"))
        .header("idempotency-key", "\"mine\"")
        .body("{}")
        .send()
        .await
        .expect("ok");
    client.get(server.url("/plain")).send().await.expect("response");

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

#[tokio::test(start_paused = true)]
async fn the_readme_snippet_retries_a_lost_order_with_one_key() -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::start().await;
    server.script("/orders", [Reply::DropMidResponse, Reply::ok("created")]);
    let url = server.url("/orders");
    // The README's lines, with the server's address in place of 127.0.0.1:8080.
    let middleware = RetryMiddleware::builder(Policy::interactive()).idempotency_keys().build();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(middleware).build();
    let response = client.post(&url).body(r#"{"sku":7}"#).send().await?;
    assert_eq!(response.text().await?, "created");
    let keys = keys_seen(&server, "/orders", "idempotency-key");
    assert_eq!(keys.len(), 2);
    assert!(keys[0].as_deref().and_then(uuid_v4_in_sf_string).is_some(), "{keys:?}");
    assert_eq!(keys[0], keys[1]);
    Ok(())
}

/// A stream over chunks, without pulling in a stream crate.
struct Chunks<I>(I);

impl<I: Iterator + Unpin> futures_core::Stream for Chunks<I> {
    type Item = I::Item;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<I::Item>> {
        std::task::Poll::Ready(self.0.next())
    }
}
