//! The body rule in HTTP mode, through a hyper-util client against a real
//! hyper server on 127.0.0.1, on the wall clock (the stalls are real): which
//! bodies are read, what the caller gets, and what bounds the read.

use retryscope_test_support as support;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry::trace::SpanKind;
use retryscope::{ErrorType, Jitter, Policy, Verdict};
use retryscope_tower::{BodyLimit, BodyRule, BoxError, RetryLayer, body_rule_fn};
use std::time::{Duration, Instant};
use support::body_server::{Answer, BodyServer, feed};
use support::telemetry::{Telemetry, attr};
use tower::{Service, ServiceBuilder, ServiceExt};

const TRY_AGAIN: ErrorType = ErrorType::Kind("try_again");
const LIMIT: usize = 1024;

/// Reads JSON 200s; retries those whose body says "try again".
struct TryAgain;

impl BodyRule for TryAgain {
    fn wants_body(&self, status: StatusCode, headers: &http::HeaderMap) -> bool {
        let json = headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        status == StatusCode::OK && json
    }

    fn verdict(&self, _: StatusCode, _: &http::HeaderMap, body: &[u8]) -> Option<Verdict> {
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

type Client_ =
    retryscope_tower::RetryService<Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>>;

fn client(telemetry: &Telemetry, policy: Policy, rule: impl BodyRule) -> Client_ {
    let limit = BodyLimit::new(LIMIT).expect("a valid limit");
    let layer = RetryLayer::builder(policy).meter(&telemetry.meter).retry_on_body(limit, rule).build();
    ServiceBuilder::new().layer(layer).service(Client::builder(TokioExecutor::new()).build_http())
}

async fn send<S, B>(service: &mut S, request: Request<B>) -> Result<S::Response, BoxError>
where
    S: Service<Request<B>, Error = BoxError>,
{
    // Fails the test instead of hanging it.
    let call = async { service.ready().await?.call(request).await };
    tokio::time::timeout(Duration::from_secs(10), call).await.expect("the call hung")
}

fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::default()).expect("valid request")
}

async fn text<B: http_body::Body>(body: B) -> Bytes
where
    B::Error: std::fmt::Debug,
{
    body.collect().await.expect("body").to_bytes()
}

#[tokio::test]
async fn a_200_whose_body_says_try_again_is_retried_and_the_caller_gets_the_second_body() {
    let t = Telemetry::install();
    let server = BodyServer::start(vec![
        Answer::Json(r#"{"status":"try again"}"#),
        Answer::Json(r#"{"status":"ok"}"#),
    ])
    .await;
    let mut client = client(&t, policy(), TryAgain);
    let response = send(&mut client, get(&server.url("/report"))).await.expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[http::header::CONTENT_TYPE], "application/json");
    assert_eq!(text(response.into_body()).await, r#"{"status":"ok"}"#);
    assert_eq!(server.methods().len(), 2);

    assert_eq!(t.counter("retryscope.retries", &[("retryscope.retry.reason", "try_again")]), 1);
    let mut attempts: Vec<_> = t.spans().into_iter().filter(|s| s.span_kind == SpanKind::Client).collect();
    attempts.sort_by_key(|s| s.start_time);
    assert_eq!(attempts.len(), 2);
    assert_eq!(attr(&attempts[0], "error.type").as_deref(), Some("try_again"), "the rule's error type");
    assert_eq!(attr(&attempts[1], "error.type"), None);
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_not_judged_and_reaches_the_caller_byte_for_byte() {
    let t = Telemetry::install();
    let chunks: Vec<Bytes> = (0..3_u8)
        .map(|i| {
            let mut chunk = vec![b'a' + i; LIMIT];
            chunk[..9].copy_from_slice(b"try again");
            Bytes::from(chunk)
        })
        .collect();
    let expected: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let server = BodyServer::start(vec![Answer::Chunked("application/json", chunks)]).await;
    let mut client = client(&t, policy(), TryAgain);
    let response = send(&mut client, get(&server.url("/big"))).await.expect("response");
    let body = text(response.into_body()).await;
    assert_eq!(body.len(), 3 * LIMIT);
    assert!(body[..] == expected[..], "the frames read ahead, then the rest, in order");
    assert_eq!(server.methods().len(), 1, "not judged, so not retried");
}

#[tokio::test]
async fn an_unselected_stream_reaches_the_caller_frame_by_frame_as_the_server_sends_it() {
    let t = Telemetry::install();
    let (sender, receiver) = feed();
    let server = BodyServer::start(vec![Answer::Fed("text/event-stream", receiver)]).await;
    sender.send(Bytes::from_static(b"data: first\n\n")).await.expect("server alive");
    let mut client = client(&t, policy(), TryAgain);
    let response = send(&mut client, get(&server.url("/events"))).await.expect("response");
    let mut body = std::pin::pin!(response.into_body());
    let wait = Duration::from_secs(10);
    let first = tokio::time::timeout(wait, body.frame()).await.expect("the first frame hung");
    let first = first.expect("a frame").expect("data").into_data().expect("data frame");
    assert_eq!(first, "data: first\n\n");
    sender.send(Bytes::from_static(b"data: second\n\n")).await.expect("server alive");
    drop(sender);
    let second = tokio::time::timeout(wait, body.frame()).await.expect("the second frame hung");
    assert_eq!(second.expect("a frame").expect("data").into_data().expect("data frame"), "data: second\n\n");
    let end = tokio::time::timeout(wait, body.frame()).await.expect("the end hung");
    assert!(end.is_none(), "the end: {end:?}");
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
    let mut client = client(&t, policy, TryAgain);
    let started = Instant::now();
    let response = send(&mut client, get(&server.url("/slow"))).await.expect("response");
    let took = started.elapsed();
    assert_eq!(text(response.into_body()).await, r#"{"status":"ok"}"#);
    assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(5), "{took:?}");
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
    let mut client = client(&t, policy, TryAgain);
    let started = Instant::now();
    let error = send(&mut client, get(&server.url("/slow"))).await.expect_err("both attempts timed out");
    let took = started.elapsed();
    let gave_up = error.downcast_ref::<retryscope_tower::GaveUp>().expect("the layer gave up");
    assert_eq!((gave_up.attempts(), gave_up.error_type()), (2, Some(ErrorType::TIMEOUT)));
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
    let mut client = client(&t, policy(), TryAgain);
    let response = send(&mut client, get(&server.url("/broken"))).await.expect("response");
    assert_eq!(text(response.into_body()).await, r#"{"status":"ok"}"#);
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
    let mut client = client(&t, policy(), TryAgain);
    let post =
        Request::post(server.url("/orders")).body(Full::new(Bytes::from_static(b"{}"))).expect("request");
    let response = send(&mut client, post).await.expect("the server's answer");
    assert_eq!(text(response.into_body()).await, r#"{"status":"try again"}"#, "the answer, whole");
    assert_eq!(server.methods(), ["POST"]);
}

#[tokio::test]
async fn a_body_rule_that_gives_no_verdict_leaves_the_decision_to_the_head_rule() {
    let t = Telemetry::install();
    let server = BodyServer::start(vec![Answer::Json(r#"{"status":"fine"}"#)]).await;
    let silent = body_rule_fn(|_, _| true, |_, _, _| None);
    let permanent = retryscope_tower::rule_fn(|_, _| Some(Verdict::permanent(ErrorType::Kind("head_rule"))));
    let layer = RetryLayer::builder(policy())
        .meter(&t.meter)
        .retry_on_body(BodyLimit::new(LIMIT).expect("limit"), silent)
        .retry_rule(permanent)
        .build();
    let mut client =
        ServiceBuilder::new().layer(layer).service(Client::builder(TokioExecutor::new()).build_http());
    let response = send(&mut client, get(&server.url("/"))).await.expect("response");
    assert_eq!(text(response.into_body()).await, r#"{"status":"fine"}"#, "read ahead, and given back");
    let spans = t.spans();
    let attempt = spans.iter().find(|s| s.span_kind == SpanKind::Client).expect("attempt span");
    assert_eq!(attr(attempt, "error.type").as_deref(), Some("head_rule"));
}
