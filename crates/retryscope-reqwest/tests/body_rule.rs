//! The body rule against a real HTTP server on 127.0.0.1, on the wall clock
//! (the stalls are real): which bodies are read, what the caller gets, and
//! what bounds the read.

use retryscope_test_support as support;

use hyper::body::Bytes;
use opentelemetry::trace::SpanKind;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use retryscope::{ErrorType, Jitter, Policy, Verdict};
use retryscope_reqwest::{BodyLimit, BodyRule, RetryMiddleware, body_rule_fn};
use std::time::{Duration, Instant};
use support::body_server::{Answer, BodyServer, feed};
use support::telemetry::{Telemetry, attr};

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
        says_try_again(body).then_some(Verdict::retryable(TRY_AGAIN))
    }
}

fn says_try_again(body: &[u8]) -> bool {
    body.windows(9).any(|w| w == b"try again")
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

fn client(telemetry: &Telemetry, policy: Policy, rule: impl BodyRule) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    let limit = BodyLimit::new(LIMIT).expect("a valid limit");
    let middleware =
        RetryMiddleware::builder(policy).meter(&telemetry.meter).retry_on_body(limit, rule).build();
    ClientBuilder::new(inner).with(middleware).build()
}

/// Fails the test instead of hanging it.
async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future).await.unwrap_or_else(|_| panic!("{what} hung"))
}

#[tokio::test]
async fn a_200_whose_body_says_try_again_is_retried_and_the_caller_gets_the_second_body() {
    let t = Telemetry::install();
    let server = BodyServer::start(vec![
        Answer::Json(r#"{"status":"try again"}"#),
        Answer::Json(r#"{"status":"ok"}"#),
    ])
    .await;
    let url = server.url("/report");
    let response =
        within("the call", client(&t, policy(), TryAgain).get(&url).send()).await.expect("response");
    assert_eq!(response.status(), 200);
    assert_eq!(response.url().as_str(), url, "the URL survives the read-ahead");
    assert_eq!(response.headers()[http::header::CONTENT_TYPE], "application/json");
    assert_eq!(response.text().await.expect("body"), r#"{"status":"ok"}"#);
    assert_eq!(server.methods().len(), 2);

    assert_eq!(t.counter("retryscope.retries", &[("retryscope.retry.reason", "try_again")]), 1);
    let spans = t.spans();
    let mut attempts: Vec<_> = spans.iter().filter(|s| s.span_kind == SpanKind::Client).collect();
    attempts.sort_by_key(|s| s.start_time);
    assert_eq!(attempts.len(), 2);
    assert_eq!(attr(attempts[0], "error.type").as_deref(), Some("try_again"), "the rule's error type");
    assert_eq!(attr(attempts[1], "error.type"), None);
}

#[tokio::test]
async fn when_retries_run_out_on_try_again_the_caller_gets_the_last_answer_whole() {
    let t = Telemetry::install();
    let server = BodyServer::start(vec![
        Answer::Json(r#"{"status":"try again","n":1}"#),
        Answer::Json(r#"{"status":"try again","n":2}"#),
    ])
    .await;
    let policy = policy().to_builder().max_attempts(2).build().expect("policy");
    let response = within("the call", client(&t, policy, TryAgain).get(server.url("/report")).send())
        .await
        .expect("response");
    assert_eq!(response.status(), 200, "the server's last answer, as without the middleware");
    assert_eq!(response.text().await.expect("body"), r#"{"status":"try again","n":2}"#);
    assert_eq!(server.methods().len(), 2);
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_not_judged_and_reaches_the_caller_byte_for_byte() {
    let t = Telemetry::install();
    // Three chunks of the limit's size, each saying "try again": a rule that
    // was asked would retry.
    let chunks: Vec<Bytes> = (0..3_u8)
        .map(|i| {
            let mut chunk = vec![b'a' + i; LIMIT];
            chunk[..9].copy_from_slice(b"try again");
            Bytes::from(chunk)
        })
        .collect();
    let expected: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let server = BodyServer::start(vec![Answer::Chunked("application/json", chunks)]).await;
    let response = within("the call", client(&t, policy(), TryAgain).get(server.url("/big")).send())
        .await
        .expect("response");
    assert_eq!(response.status(), 200);
    let body = response.bytes().await.expect("body");
    assert_eq!(body.len(), 3 * LIMIT);
    assert!(body[..] == expected[..], "the bytes read ahead, then the rest, in order");
    assert_eq!(server.methods().len(), 1, "not judged, so not retried");
}

#[tokio::test]
async fn a_body_whose_declared_length_is_over_the_limit_is_not_judged_and_arrives_whole() {
    let t = Telemetry::install();
    let big: &'static str = format!(r#"{{"status":"try again","pad":"{}"}}"#, "x".repeat(3 * LIMIT)).leak();
    let server = BodyServer::start(vec![Answer::Json(big)]).await;
    let response = within("the call", client(&t, policy(), TryAgain).get(server.url("/big")).send())
        .await
        .expect("response");
    assert_eq!(response.text().await.expect("body"), big);
    assert_eq!(server.methods().len(), 1);
}

#[tokio::test]
async fn an_unselected_stream_reaches_the_caller_chunk_by_chunk_as_the_server_sends_it() {
    let t = Telemetry::install();
    let (sender, receiver) = feed();
    let server = BodyServer::start(vec![Answer::Fed("text/event-stream", receiver)]).await;
    sender.send(Bytes::from_static(b"data: first\n\n")).await.expect("server alive");
    // The server sends nothing more until the caller has the first chunk: a
    // layer that read the body ahead would wait here forever.
    let mut response =
        within("the response", client(&t, policy(), TryAgain).get(server.url("/events")).send())
            .await
            .expect("response");
    let first = within("the first chunk", response.chunk()).await.expect("chunk");
    assert_eq!(first.as_deref(), Some(&b"data: first\n\n"[..]));
    sender.send(Bytes::from_static(b"data: second\n\n")).await.expect("server alive");
    drop(sender);
    let second = within("the second chunk", response.chunk()).await.expect("chunk");
    assert_eq!(second.as_deref(), Some(&b"data: second\n\n"[..]));
    assert_eq!(within("the end", response.chunk()).await.expect("end"), None);
}

#[tokio::test]
async fn a_selected_body_that_stalls_after_the_head_ends_the_attempt_at_its_timeout_and_is_retried() {
    let t = Telemetry::install();
    let (stalled, receiver) = feed();
    let server = BodyServer::start(vec![
        Answer::Fed("application/json", receiver),
        Answer::Json(r#"{"status":"ok"}"#),
    ])
    .await;
    let policy = policy().to_builder().attempt_timeout(Duration::from_millis(300)).build().expect("policy");
    let started = Instant::now();
    let response = within("the call", client(&t, policy, TryAgain).get(server.url("/slow")).send())
        .await
        .expect("response");
    let took = started.elapsed();
    assert_eq!(response.text().await.expect("body"), r#"{"status":"ok"}"#);
    assert!(took >= Duration::from_millis(300), "the first attempt waited for its timeout: {took:?}");
    assert!(took < Duration::from_secs(5), "and no longer: {took:?}");
    assert_eq!(t.counter("retryscope.retries", &[("retryscope.retry.reason", "timeout")]), 1);
    drop(stalled);
}

#[tokio::test]
async fn a_selected_body_that_stalls_on_every_attempt_fails_the_call_within_its_attempt_timeouts() {
    let t = Telemetry::install();
    let (stalled_1, first) = feed();
    let (stalled_2, second) = feed();
    let server = BodyServer::start(vec![
        Answer::Fed("application/json", first),
        Answer::Fed("application/json", second),
    ])
    .await;
    let policy = policy()
        .to_builder()
        .max_attempts(2)
        .attempt_timeout(Duration::from_millis(200))
        .build()
        .expect("policy");
    let started = Instant::now();
    let result = within("the call", client(&t, policy, TryAgain).get(server.url("/slow")).send()).await;
    let took = started.elapsed();
    let error = result.expect_err("both attempts timed out");
    let retry = match &error {
        reqwest_middleware::Error::Middleware(e) => {
            e.downcast_ref::<retryscope::RetryError<reqwest_middleware::Error>>()
        }
        reqwest_middleware::Error::Reqwest(_) => None,
    };
    assert_eq!(retry.map(retryscope::RetryError::attempts), Some(2), "{error:?}");
    assert!(took >= Duration::from_millis(400) && took < Duration::from_secs(5), "{took:?}");
    assert_eq!(server.methods().len(), 2);
    drop((stalled_1, stalled_2));
}

#[tokio::test]
async fn a_body_that_breaks_off_while_read_is_a_transport_failure_retried_as_incomplete() {
    let t = Telemetry::install();
    let server = BodyServer::start(vec![
        Answer::BrokenAfter("application/json", Bytes::from_static(b"{\"status\":")),
        Answer::Json(r#"{"status":"ok"}"#),
    ])
    .await;
    let response = within("the call", client(&t, policy(), TryAgain).get(server.url("/broken")).send())
        .await
        .expect("response");
    assert_eq!(response.text().await.expect("body"), r#"{"status":"ok"}"#);
    assert_eq!(t.counter("retryscope.retries", &[("retryscope.retry.reason", "incomplete")]), 1);
}

#[tokio::test]
async fn an_unkeyed_post_whose_body_says_try_again_is_sent_once() {
    let t = Telemetry::install();
    let server = BodyServer::start(vec![
        Answer::Json(r#"{"status":"try again"}"#),
        Answer::Json(r#"{"status":"ok"}"#),
    ])
    .await;
    let response =
        within("the call", client(&t, policy(), TryAgain).post(server.url("/orders")).body("{}").send())
            .await
            .expect("the server's answer");
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.expect("body"), r#"{"status":"try again"}"#, "the answer, whole");
    assert_eq!(server.methods(), ["POST"]);
}

#[tokio::test]
async fn a_post_with_an_idempotency_key_whose_body_says_try_again_is_retried() {
    let t = Telemetry::install();
    let server = BodyServer::start(vec![
        Answer::Json(r#"{"status":"try again"}"#),
        Answer::Json(r#"{"status":"ok"}"#),
    ])
    .await;
    let request = client(&t, policy(), TryAgain)
        .post(server.url("/orders"))
        .header("idempotency-key", "order-7")
        .body("{}");
    let response = within("the call", request.send()).await.expect("response");
    assert_eq!(response.text().await.expect("body"), r#"{"status":"ok"}"#);
    assert_eq!(server.methods(), ["POST", "POST"]);
}

#[tokio::test]
async fn a_body_rule_that_gives_no_verdict_leaves_the_decision_to_the_head_rule() {
    let t = Telemetry::install();
    let server = BodyServer::start(vec![Answer::Json(r#"{"status":"fine"}"#)]).await;
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    let silent = body_rule_fn(|_, _| true, |_, _, _| None);
    let permanent =
        retryscope_reqwest::rule_fn(|_, _| Some(Verdict::permanent(ErrorType::Kind("head_rule"))));
    let middleware = RetryMiddleware::builder(policy())
        .meter(&t.meter)
        .retry_on_body(BodyLimit::new(LIMIT).expect("limit"), silent)
        .retry_rule(permanent)
        .build();
    let client = ClientBuilder::new(inner).with(middleware).build();
    let response = within("the call", client.get(server.url("/")).send()).await.expect("response");
    assert_eq!(response.text().await.expect("body"), r#"{"status":"fine"}"#, "read ahead, and given back");
    let spans = t.spans();
    let attempt = spans.iter().find(|s| s.span_kind == SpanKind::Client).expect("attempt span");
    assert_eq!(attr(attempt, "error.type").as_deref(), Some("head_rule"));
}

#[test]
fn a_limit_of_zero_or_above_one_mib_is_refused_with_a_message_that_says_why() {
    let error = BodyLimit::new(0).expect_err("zero");
    assert_eq!(
        error.to_string(),
        "the body limit of a body rule must be above zero and at most 1048576 bytes, got 0"
    );
    assert!(BodyLimit::new(BodyLimit::MAX + 1).is_err());
    assert_eq!(BodyLimit::new(BodyLimit::MAX).map(BodyLimit::bytes), Ok(1024 * 1024));
}
