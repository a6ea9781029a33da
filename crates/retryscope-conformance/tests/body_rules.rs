//! The body rule, for both integrations, against a real hyper server on
//! 127.0.0.1 on the wall clock (the stalls are real): which bodies are read,
//! what the caller gets, and what bounds the read.

use bytes::Bytes;
use opentelemetry::trace::SpanKind;
use retryscope::{ErrorType, Jitter, Policy, Verdict};
use retryscope_test_support::body_server::{Answer as Serve, BodyServer, feed};
use retryscope_test_support::telemetry::{Telemetry, attr};
use retryscope_tower::{BodyLimit, BodyRule, body_rule_fn, rule_fn};
use std::time::{Duration, Instant};

mod common;

use common::{BOTH, Call, Client, Failure, Integration, Response, Setup};

const TRY_AGAIN: ErrorType = ErrorType::Kind("try_again");
const LIMIT: usize = 1024;

/// Reads JSON 200s; retries those whose body says "try again".
struct TryAgain;

impl BodyRule for TryAgain {
    fn wants_body(&self, status: http::StatusCode, headers: &http::HeaderMap) -> bool {
        let json = headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        status == http::StatusCode::OK && json
    }

    fn verdict(&self, _: http::StatusCode, _: &http::HeaderMap, body: &[u8]) -> Option<Verdict> {
        body.windows(9).any(|w| w == b"try again").then_some(Verdict::retryable(TRY_AGAIN))
    }
}

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(10))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid policy")
}

fn limit() -> BodyLimit {
    BodyLimit::new(LIMIT).expect("a valid limit")
}

/// A client of `integration` with `policy` and the [`TryAgain`] rule.
fn client(integration: Integration, telemetry: &Telemetry, policy: Policy) -> Client {
    integration.client(Setup::new(policy).meter(telemetry).retry_on_body(limit(), TryAgain))
}

/// Sends `call`, failing the test instead of hanging it.
async fn send(client: &Client, call: Call) -> Result<Response, Failure> {
    tokio::time::timeout(Duration::from_secs(10), client.send(call)).await.expect("the call hung")
}

#[tokio::test]
async fn a_200_whose_body_says_try_again_is_retried_and_the_caller_gets_the_second_body() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = BodyServer::start(vec![
            Serve::Json(r#"{"status":"try again"}"#),
            Serve::Json(r#"{"status":"ok"}"#),
        ])
        .await;
        let url = server.url("/report");
        let client = client(integration, &t, policy());
        let response = send(&client, Call::get(&url)).await.expect("response");
        assert_eq!(response.status, 200, "{integration:?}");
        let expected_url = (integration == Integration::Reqwest).then(|| url.clone());
        assert_eq!(response.url, expected_url, "{integration:?}: reqwest's URL survives the read-ahead");
        assert_eq!(response.headers[http::header::CONTENT_TYPE], "application/json", "{integration:?}");
        assert_eq!(response.text().await, r#"{"status":"ok"}"#, "{integration:?}");
        assert_eq!(server.methods().len(), 2, "{integration:?}");

        let retries = t.counter("retryscope.retries", &[("retryscope.retry.reason", "try_again")]);
        assert_eq!(retries, 1, "{integration:?}");
        let spans = t.spans();
        let mut attempts: Vec<_> = spans.iter().filter(|s| s.span_kind == SpanKind::Client).collect();
        attempts.sort_by_key(|s| s.start_time);
        assert_eq!(attempts.len(), 2, "{integration:?}");
        let first = attr(attempts[0], "error.type");
        assert_eq!(first.as_deref(), Some("try_again"), "{integration:?}: the rule's error type");
        assert_eq!(attr(attempts[1], "error.type"), None, "{integration:?}");
    }
}

#[tokio::test]
async fn when_retries_run_out_on_try_again_the_caller_gets_the_last_answer_whole() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = BodyServer::start(vec![
            Serve::Json(r#"{"status":"try again","n":1}"#),
            Serve::Json(r#"{"status":"try again","n":2}"#),
        ])
        .await;
        let policy = policy().to_builder().max_attempts(2).build().expect("policy");
        let response = send(&client(integration, &t, policy), Call::get(server.url("/report"))).await;
        let response = response.expect("response");
        assert_eq!(response.status, 200, "{integration:?}: the server's last answer, as without a retry");
        assert_eq!(response.text().await, r#"{"status":"try again","n":2}"#, "{integration:?}");
        assert_eq!(server.methods().len(), 2, "{integration:?}");
    }
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_not_judged_and_reaches_the_caller_byte_for_byte() {
    for integration in BOTH {
        let t = Telemetry::install();
        // Three chunks of the limit's size, each saying "try again": a rule
        // that was asked would retry.
        let chunks: Vec<Bytes> = (0..3_u8)
            .map(|i| {
                let mut chunk = vec![b'a' + i; LIMIT];
                chunk[..9].copy_from_slice(b"try again");
                Bytes::from(chunk)
            })
            .collect();
        let expected: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let server = BodyServer::start(vec![Serve::Chunked("application/json", chunks)]).await;
        let response = send(&client(integration, &t, policy()), Call::get(server.url("/big"))).await;
        let response = response.expect("response");
        assert_eq!(response.status, 200, "{integration:?}");
        let body = response.bytes().await;
        assert_eq!(body.len(), 3 * LIMIT, "{integration:?}");
        assert!(body[..] == expected[..], "{integration:?}: the bytes read ahead, then the rest, in order");
        assert_eq!(server.methods().len(), 1, "{integration:?}: not judged, so not retried");
    }
}

#[tokio::test]
async fn a_body_whose_declared_length_is_over_the_limit_is_not_judged_and_arrives_whole() {
    let big: &'static str = format!(r#"{{"status":"try again","pad":"{}"}}"#, "x".repeat(3 * LIMIT)).leak();
    for integration in BOTH {
        let t = Telemetry::install();
        let server = BodyServer::start(vec![Serve::Json(big)]).await;
        let response = send(&client(integration, &t, policy()), Call::get(server.url("/big"))).await;
        assert_eq!(response.expect("response").text().await, big, "{integration:?}");
        assert_eq!(server.methods().len(), 1, "{integration:?}");
    }
}

#[tokio::test]
async fn an_unselected_stream_reaches_the_caller_chunk_by_chunk_as_the_server_sends_it() {
    for integration in BOTH {
        let t = Telemetry::install();
        let (sender, receiver) = feed();
        let server = BodyServer::start(vec![Serve::Fed("text/event-stream", receiver)]).await;
        sender.send(Bytes::from_static(b"data: first\n\n")).await.expect("server alive");
        // The server sends nothing more until the caller has the first chunk:
        // an integration that read the body ahead would wait here forever.
        let client = client(integration, &t, policy());
        let mut response = send(&client, Call::get(server.url("/events"))).await.expect("response");
        let first = response.chunk().await;
        assert_eq!(first.as_deref(), Some(&b"data: first\n\n"[..]), "{integration:?}");
        sender.send(Bytes::from_static(b"data: second\n\n")).await.expect("server alive");
        drop(sender);
        let second = response.chunk().await;
        assert_eq!(second.as_deref(), Some(&b"data: second\n\n"[..]), "{integration:?}");
        assert_eq!(response.chunk().await, None, "{integration:?}: the end");
    }
}

#[tokio::test]
async fn a_selected_body_that_stalls_after_the_head_ends_the_attempt_at_its_timeout_and_is_retried() {
    for integration in BOTH {
        let t = Telemetry::install();
        let (stalled, receiver) = feed();
        let server = BodyServer::start(vec![
            Serve::Fed("application/json", receiver),
            Serve::Json(r#"{"status":"ok"}"#),
        ])
        .await;
        let policy =
            policy().to_builder().attempt_timeout(Duration::from_millis(300)).build().expect("policy");
        let client = client(integration, &t, policy);
        let started = Instant::now();
        let response = send(&client, Call::get(server.url("/slow"))).await.expect("response");
        let took = started.elapsed();
        assert_eq!(response.text().await, r#"{"status":"ok"}"#, "{integration:?}");
        assert!(
            took >= Duration::from_millis(300),
            "{integration:?}: the first attempt waited for its timeout: {took:?}"
        );
        assert!(took < Duration::from_secs(5), "{integration:?}: and no longer: {took:?}");
        let retries = t.counter("retryscope.retries", &[("retryscope.retry.reason", "timeout")]);
        assert_eq!(retries, 1, "{integration:?}");
        drop(stalled);
    }
}

#[tokio::test]
async fn a_selected_body_that_stalls_on_every_attempt_fails_the_call_within_its_attempt_timeouts() {
    for integration in BOTH {
        let t = Telemetry::install();
        let (stalled_1, first) = feed();
        let (stalled_2, second) = feed();
        let server = BodyServer::start(vec![
            Serve::Fed("application/json", first),
            Serve::Fed("application/json", second),
        ])
        .await;
        let policy = policy()
            .to_builder()
            .max_attempts(2)
            .attempt_timeout(Duration::from_millis(200))
            .build()
            .expect("policy");
        let client = client(integration, &t, policy);
        let started = Instant::now();
        let failure =
            send(&client, Call::get(server.url("/slow"))).await.expect_err("both attempts timed out");
        let took = started.elapsed();
        let stopped = failure.stopped.as_ref().unwrap_or_else(|| panic!("{integration:?}: {failure:?}"));
        assert_eq!((stopped.attempts, stopped.error_type), (2, Some(ErrorType::TIMEOUT)), "{integration:?}");
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_secs(5),
            "{integration:?}: {took:?}"
        );
        assert_eq!(server.methods().len(), 2, "{integration:?}");
        drop((stalled_1, stalled_2));
    }
}

#[tokio::test]
async fn a_body_that_breaks_off_while_read_is_a_transport_failure_retried_as_incomplete() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = BodyServer::start(vec![
            Serve::BrokenAfter("application/json", Bytes::from_static(b"{\"status\":")),
            Serve::Json(r#"{"status":"ok"}"#),
        ])
        .await;
        let response = send(&client(integration, &t, policy()), Call::get(server.url("/broken"))).await;
        assert_eq!(response.expect("response").text().await, r#"{"status":"ok"}"#, "{integration:?}");
        let retries = t.counter("retryscope.retries", &[("retryscope.retry.reason", "incomplete")]);
        assert_eq!(retries, 1, "{integration:?}");
    }
}

#[tokio::test]
async fn an_unkeyed_post_whose_body_says_try_again_is_sent_once() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = BodyServer::start(vec![
            Serve::Json(r#"{"status":"try again"}"#),
            Serve::Json(r#"{"status":"ok"}"#),
        ])
        .await;
        let post = Call::post(server.url("/orders")).body("{}");
        let response = send(&client(integration, &t, policy()), post).await.expect("the server's answer");
        assert_eq!(response.status, 200, "{integration:?}");
        assert_eq!(response.text().await, r#"{"status":"try again"}"#, "{integration:?}: the answer, whole");
        assert_eq!(server.methods(), ["POST"], "{integration:?}");
    }
}

#[tokio::test]
async fn a_post_with_an_idempotency_key_whose_body_says_try_again_is_retried() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = BodyServer::start(vec![
            Serve::Json(r#"{"status":"try again"}"#),
            Serve::Json(r#"{"status":"ok"}"#),
        ])
        .await;
        let post = Call::post(server.url("/orders")).header("idempotency-key", "order-7").body("{}");
        let response = send(&client(integration, &t, policy()), post).await.expect("response");
        assert_eq!(response.text().await, r#"{"status":"ok"}"#, "{integration:?}");
        assert_eq!(server.methods(), ["POST", "POST"], "{integration:?}");
    }
}

#[tokio::test]
async fn a_body_rule_that_gives_no_verdict_leaves_the_decision_to_the_head_rule() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = BodyServer::start(vec![Serve::Json(r#"{"status":"fine"}"#)]).await;
        let silent = body_rule_fn(|_, _| true, |_, _, _| None);
        let permanent = rule_fn(|_, _| Some(Verdict::permanent(ErrorType::Kind("head_rule"))));
        let setup = Setup::new(policy()).meter(&t).retry_on_body(limit(), silent).retry_rule(permanent);
        let response = send(&integration.client(setup), Call::get(server.url("/"))).await.expect("response");
        let body = response.text().await;
        assert_eq!(body, r#"{"status":"fine"}"#, "{integration:?}: read ahead, and given back");
        let spans = t.spans();
        let attempt = spans.iter().find(|s| s.span_kind == SpanKind::Client).expect("attempt span");
        assert_eq!(attr(attempt, "error.type").as_deref(), Some("head_rule"), "{integration:?}");
    }
}
