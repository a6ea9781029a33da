//! `.idempotency_keys()`, for both integrations, against a real HTTP server on
//! 127.0.0.1 that loses responses after reading the request: one key per
//! logical operation, the same on every attempt, and what is still sent once.
//! Paused clock: the claims are about which requests go out, not about time.

use http::HeaderName;
use opentelemetry::trace::SpanKind;
use retryscope::{Jitter, Policy};
use retryscope_test_support::keys::uuid_v4_in_sf_string;
use retryscope_test_support::telemetry::{Telemetry, attr};
use retryscope_test_support::{Reply, Server};
use retryscope_tower::{KeyChoice, RetryOptions};
use std::collections::HashSet;
use std::time::Duration;

mod common;

use common::{BOTH, Call, Setup};

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(50))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid policy")
}

/// Generated keys on, telemetry off.
fn keyed() -> Setup {
    Setup::new(policy()).idempotency_keys()
}

/// The `header` of every request the server saw at `path`, in order.
fn keys_seen(server: &Server, path: &str, header: &str) -> Vec<Option<String>> {
    server.seen().into_iter().filter(|s| s.path == path).map(|s| s.headers.get(header).cloned()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_post_whose_response_is_lost_is_retried_with_the_same_generated_key() {
    for integration in BOTH {
        let server = Server::start().await;
        // The server reads the whole request, then breaks the connection off.
        server.script("/orders", [Reply::DropMidResponse, Reply::ok("created").into()]);
        let post = Call::post(server.url("/orders")).body("{\"sku\":7}");
        let response = integration.client(keyed()).send(post).await.expect("retried");
        assert_eq!(response.status, 200, "{integration:?}");
        assert_eq!(response.text().await, "created", "{integration:?}");

        let keys = keys_seen(&server, "/orders", "idempotency-key");
        assert_eq!(keys.len(), 2, "{integration:?}: {keys:?}");
        let first = keys[0].as_deref().expect("a key on the first attempt");
        assert!(uuid_v4_in_sf_string(first).is_some(), "{integration:?}: not an sf-string UUID v4: {first}");
        assert_eq!(keys[0], keys[1], "{integration:?}: every attempt carries the operation's one key");
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_answered_503_after_the_work_is_retried_with_the_same_key() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/payments", [Reply::status(503), Reply::status(503), Reply::ok("paid")]);
        let post = Call::post(server.url("/payments")).body("{}");
        let response = integration.client(keyed()).send(post).await.expect("response");
        assert_eq!(response.status, 200, "{integration:?}");
        let keys = keys_seen(&server, "/payments", "idempotency-key");
        assert_eq!(keys.len(), 3, "{integration:?}");
        assert!(keys.iter().all(|k| k.is_some() && *k == keys[0]), "{integration:?}: {keys:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn without_the_option_a_post_whose_response_is_lost_is_sent_once() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/orders", [Reply::DropMidResponse, Reply::ok("created").into()]);
        let post = Call::post(server.url("/orders")).body("{}");
        let failure = integration.client(Setup::new(policy())).send(post).await.expect_err("not retried");
        assert!(!failure.chain.join(": ").is_empty(), "{integration:?}");
        assert_eq!(keys_seen(&server, "/orders", "idempotency-key"), [None], "{integration:?}");
        server.assert_no_unsafe_request_ran_twice();
    }
}

#[tokio::test(start_paused = true)]
async fn without_the_option_a_post_answered_503_is_sent_once() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/orders", [Reply::status(503), Reply::ok("created")]);
        let post = Call::post(server.url("/orders")).body("{}");
        let response = integration.client(Setup::new(policy())).send(post).await;
        assert_eq!(response.expect("the 503 comes back").status, 503, "{integration:?}");
        assert_eq!(keys_seen(&server, "/orders", "idempotency-key"), [None], "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_the_caller_set_is_sent_unchanged_on_every_attempt() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/orders", [Reply::status(503), Reply::ok("created")]);
        let post = Call::post(server.url("/orders")).header("idempotency-key", "caller-chosen-1").body("{}");
        let response = integration.client(keyed()).send(post).await.expect("response");
        assert_eq!(response.status, 200, "{integration:?}");
        let keys = keys_seen(&server, "/orders", "idempotency-key");
        let expected = [Some("caller-chosen-1".to_owned()), Some("caller-chosen-1".to_owned())];
        assert_eq!(keys, expected, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_supplied_as_an_extension_goes_out_as_an_sf_string_on_every_attempt() {
    for integration in BOTH {
        let server = Server::start().await;
        // A plain key, and one with a space, which an sf-string carries as it is.
        for (path, key, wire) in
            [("/orders", "order-7781", "\"order-7781\""), ("/invoices", "order 7781", "\"order 7781\"")]
        {
            server.script(path, [Reply::status(503), Reply::ok("created")]);
            let post = Call::post(server.url(path))
                .extension(KeyChoice::new(key).expect("printable ASCII"))
                .body("{}");
            // Without `.idempotency_keys()`: a supplied key makes the POST retryable on its own.
            let response = integration.client(Setup::new(policy())).send(post).await.expect("response");
            assert_eq!(response.status, 200, "{integration:?}");
            let keys = keys_seen(&server, path, "idempotency-key");
            assert_eq!(keys, [Some(wire.to_owned()), Some(wire.to_owned())], "{integration:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_suppressed_key_leaves_the_post_sent_once() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/orders", [Reply::status(503), Reply::ok("created")]);
        let post = Call::post(server.url("/orders")).extension(KeyChoice::suppress()).body("{}");
        let response = integration.client(keyed()).send(post).await.expect("the 503 comes back");
        assert_eq!(response.status, 503, "{integration:?}");
        assert_eq!(keys_seen(&server, "/orders", "idempotency-key"), [None], "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_marked_idempotent_gets_a_key_too() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/events", [Reply::status(503), Reply::ok("stored")]);
        let post = Call::post(server.url("/events")).extension(RetryOptions::new().idempotent()).body("{}");
        integration.client(keyed()).send(post).await.expect("response");
        let keys = keys_seen(&server, "/events", "idempotency-key");
        assert_eq!(keys.len(), 2, "{integration:?}");
        assert!(keys[0].as_deref().and_then(uuid_v4_in_sf_string).is_some(), "{integration:?}: {keys:?}");
        assert_eq!(keys[0], keys[1], "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_get_gets_no_key() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/orders", [Reply::status(503), Reply::ok("list")]);
        integration.client(keyed()).send(Call::get(server.url("/orders"))).await.expect("response");
        assert_eq!(keys_seen(&server, "/orders", "idempotency-key"), [None, None], "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn twenty_callers_sharing_one_client_each_get_their_own_stable_key() {
    for integration in BOTH {
        let server = Server::start().await;
        for i in 0..20 {
            let replies = [Reply::DropMidResponse, Reply::status(503).into(), Reply::ok("ok").into()];
            server.script(&format!("/orders/{i}"), replies);
        }
        // Every call fails twice here: no budget or breaker, which would rightly
        // stop retrying a dependency where every call fails, and are not the subject.
        let client = integration.client(keyed().no_budget().no_breaker());
        let calls: Vec<_> = (0..20)
            .map(|i| {
                let post = Call::post(server.url(&format!("/orders/{i}"))).body(format!("{{\"n\":{i}}}"));
                let client = client.clone();
                tokio::spawn(async move { client.send(post).await.map(|response| response.status) })
            })
            .collect();
        for call in calls {
            let status = call.await.expect("task").expect("answered on the third attempt");
            assert_eq!(status, 200, "{integration:?}");
        }
        let mut distinct = HashSet::new();
        for i in 0..20 {
            let keys = keys_seen(&server, &format!("/orders/{i}"), "idempotency-key");
            assert_eq!(keys.len(), 3, "{integration:?}: caller {i}: {keys:?}");
            assert!(keys.iter().all(|k| *k == keys[0]), "{integration:?}: caller {i} changed keys: {keys:?}");
            let key = keys[0].clone().expect("a key");
            assert!(uuid_v4_in_sf_string(&key).is_some(), "{integration:?}: {key}");
            distinct.insert(key);
        }
        assert_eq!(distinct.len(), 20, "{integration:?}: two callers shared a key");
    }
}

#[tokio::test(start_paused = true)]
async fn a_streamed_body_is_sent_once_with_the_option_on() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/upload", [Reply::status(503), Reply::ok("stored")]);
        let post = Call::post(server.url("/upload")).streamed(&["{\"a\":", "1}"]);
        let response = integration.client(keyed()).send(post).await.expect("the 503 comes back");
        assert_eq!(response.status, 503, "{integration:?}");
        // No key either: there is no second attempt for it to protect.
        assert_eq!(keys_seen(&server, "/upload", "idempotency-key"), [None], "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_configured_header_name_carries_the_key_and_makes_the_post_retryable() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/orders", [Reply::status(503), Reply::ok("created")]);
        let setup = keyed().idempotency_key_header(HeaderName::from_static("x-idempotency-key"));
        let response = integration.client(setup).send(Call::post(server.url("/orders")).body("{}")).await;
        assert_eq!(response.expect("response").status, 200, "{integration:?}");
        let keys = keys_seen(&server, "/orders", "x-idempotency-key");
        assert_eq!(keys.len(), 2, "{integration:?}");
        assert!(keys[0].as_deref().and_then(uuid_v4_in_sf_string).is_some(), "{integration:?}: {keys:?}");
        assert_eq!(keys[0], keys[1], "{integration:?}");
        assert_eq!(keys_seen(&server, "/orders", "idempotency-key"), [None, None], "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn attempt_spans_say_whether_the_key_was_generated_never_what_it_is() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/generated", [Reply::status(503), Reply::ok("ok")]);
        server.script("/own", [Reply::ok("ok")]);
        let client = integration.client(Setup::new(policy()).meter(&t).idempotency_keys());
        let generated = client.send(Call::post(server.url("/generated")).body("{}")).await;
        assert_eq!(generated.expect("response").status, 200, "{integration:?}");
        let own = Call::post(server.url("/own")).header("idempotency-key", "\"mine\"").body("{}");
        assert_eq!(client.send(own).await.expect("ok").status, 200, "{integration:?}");
        assert_eq!(client.send(Call::get(server.url("/plain"))).await.expect("ok").status, 200);

        let generated_key = keys_seen(&server, "/generated", "idempotency-key")[0].clone().expect("a key");
        let spans: Vec<_> = t.spans().into_iter().filter(|s| s.span_kind == SpanKind::Client).collect();
        let on = |path: &str| {
            spans
                .iter()
                .filter(|s| attr(s, "url.full").is_some_and(|u| u.ends_with(path)))
                .map(|s| attr(s, "retryscope.idempotency_key.generated"))
                .collect::<Vec<_>>()
        };
        assert_eq!(on("/generated"), [Some("true".to_owned()), Some("true".to_owned())], "{integration:?}");
        assert_eq!(on("/own"), [Some("false".to_owned())], "{integration:?}");
        assert_eq!(on("/plain"), [None], "{integration:?}");
        let uuid = uuid_v4_in_sf_string(&generated_key).expect("a uuid");
        for span in &spans {
            assert!(
                span.attributes.iter().all(|kv| !kv.value.as_str().contains(uuid)),
                "{integration:?}: the key leaked: {span:#?}"
            );
        }
    }
}

/// Inside a job's scope (what a `retryscope-jobs` worker runs its handler
/// in), a POST through a client built without `.idempotency_keys()` carries
/// the key derived from the job's, on every attempt, is retried as a keyed
/// request is, and its spans say the key was generated, never what it is.
#[tokio::test(start_paused = true)]
async fn a_post_in_a_jobs_scope_carries_the_derived_key_on_every_attempt_and_its_spans_say_generated() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/charges", [Reply::status(503), Reply::ok("charged")]);
        let client = integration.client(Setup::new(policy()).meter(&t));
        let post = client.send(Call::post(server.url("/charges")).body("amount=7"));
        let response = retryscope::jobs::JobKeyScope::new("order-9".into(), post).await;
        assert_eq!(response.expect("retried").status, 200, "{integration:?}");
        let derived = Some(r#""order-9/1""#.to_owned());
        assert_eq!(keys_seen(&server, "/charges", "idempotency-key"), [derived.clone(), derived]);
        let spans: Vec<_> = t.spans().into_iter().filter(|s| s.span_kind == SpanKind::Client).collect();
        let generated: Vec<_> =
            spans.iter().map(|s| attr(s, "retryscope.idempotency_key.generated")).collect();
        assert_eq!(generated, [Some("true".to_owned()), Some("true".to_owned())], "{integration:?}");
        for span in &spans {
            assert!(
                span.attributes.iter().all(|kv| !kv.value.as_str().contains("order-9")),
                "{integration:?}: the key leaked: {span:#?}"
            );
        }
    }
}
