//! gRPC calls through the layer behave as gRPC users expect, against a real
//! tonic server on 127.0.0.1: streams are never delayed or blocked (the call
//! commits at its response headers, A6), the layer's own stops are gRPC
//! statuses, A6's throttling is the only guard by default, and no deadline is
//! invented. Real-time claims run on the wall clock with generous bounds;
//! counting runs on tokio's paused clock.

use retryscope_test_support as support;

use retryscope::{CircuitBreaker, Policy};
use retryscope_tower::grpc::Grpc;
use retryscope_tower::grpc::{
    GrpcRetry, NOT_RETRIED, NOT_RETRIED_BODY, NOT_RETRIED_CIRCUIT_OPEN, NOT_RETRIED_THROTTLED,
};
use retryscope_tower::prelude::*;
use retryscope_tower::{RetryLayer, RetryService};
use std::time::{Duration, Instant};
use support::echo::{Behaviour, EchoClient, EchoServer, WATCH_FIRST_MESSAGE, echo};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tower::Layer;

/// How long a step may take before the test calls it hung: far more than any
/// step needs on loopback.
const HUNG: Duration = Duration::from_secs(5);

/// A config with a retry policy for `test.Echo`, or — `configured: false` —
/// one that names another service only, so that `test.Echo` has no entry.
fn config(configured: bool) -> GrpcRetry {
    let service = if configured { "test.Echo" } else { "other.Service" };
    GrpcRetry::from_service_config(&format!(
        r#"{{"methodConfig": [{{"name": [{{"service": "{service}"}}],
            "retryPolicy": {{"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
              "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}}}]}}"#
    ))
    .expect("valid config")
}

fn client(server: &EchoServer, retry: GrpcRetry) -> EchoClient<RetryService<Channel, Grpc>> {
    let layer = RetryLayer::grpc(retry).origin(server.uri()).no_telemetry().build();
    EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()))
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(HUNG, future).await.unwrap_or_else(|_| panic!("hung: {what}"))
}

/// Opens a chat, then sends: the server says nothing before the first message,
/// so the call must return at the headers.
async fn chat_open_then_send(configured: bool) {
    let server = EchoServer::start(Vec::new()).await;
    let mut client = client(&server, config(configured));
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    let response =
        within("opening the chat", client.chat(ReceiverStream::new(receiver))).await.expect("the chat opens");
    let mut replies = response.into_inner();
    for word in ["one", "two"] {
        sender.send(echo(word)).await.expect("the call takes messages");
        let reply = within("a reply", replies.message()).await.expect("no error").expect("a reply");
        assert_eq!(reply.message, format!("{word} back"));
    }
    drop(sender);
    assert!(within("the end", replies.message()).await.expect("no error").is_none());
    assert_eq!(server.calls().len(), 1);
}

/// Sends the first message, then opens the chat while the stream stays open.
async fn chat_send_then_open(configured: bool) {
    let server = EchoServer::start(Vec::new()).await;
    let mut client = client(&server, config(configured));
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    sender.send(echo("one")).await.expect("buffered");
    let response =
        within("opening the chat", client.chat(ReceiverStream::new(receiver))).await.expect("the chat opens");
    let mut replies = response.into_inner();
    let reply = within("the first reply", replies.message()).await.expect("no error").expect("a reply");
    assert_eq!(reply.message, "one back");
    sender.send(echo("two")).await.expect("the call takes messages");
    let reply = within("the second reply", replies.message()).await.expect("no error").expect("a reply");
    assert_eq!(reply.message, "two back");
    drop(sender);
    assert!(within("the end", replies.message()).await.expect("no error").is_none());
    assert_eq!(server.calls().len(), 1);
}

#[tokio::test]
async fn a_chat_opened_before_its_first_message_works_with_a_config_entry() {
    chat_open_then_send(true).await;
}

#[tokio::test]
async fn a_chat_opened_before_its_first_message_works_without_a_config_entry() {
    chat_open_then_send(false).await;
}

#[tokio::test]
async fn a_chat_whose_first_message_is_sent_before_it_opens_works_with_a_config_entry() {
    chat_send_then_open(true).await;
}

#[tokio::test]
async fn a_chat_whose_first_message_is_sent_before_it_opens_works_without_a_config_entry() {
    chat_send_then_open(false).await;
}

#[tokio::test]
async fn a_chat_whose_messages_are_all_sent_before_it_opens_gets_every_reply() {
    let server = EchoServer::start(Vec::new()).await;
    let mut client = client(&server, config(true));
    let messages = tokio_stream::iter([echo("one"), echo("two")]);
    let response = within("opening the chat", client.chat(messages)).await.expect("the chat opens");
    let mut replies = response.into_inner();
    let mut got = Vec::new();
    while let Some(reply) = within("a reply", replies.message()).await.expect("no error") {
        got.push(reply.message);
    }
    assert_eq!(got, ["one back", "two back"]);
}

#[tokio::test]
async fn a_client_stream_works_whichever_comes_first_sending_or_opening() {
    for configured in [true, false] {
        for send_first in [true, false] {
            let server = EchoServer::start(Vec::new()).await;
            let mut client = client(&server, config(configured));
            let (sender, receiver) = tokio::sync::mpsc::channel(4);
            if send_first {
                sender.send(echo("one")).await.expect("buffered");
            }
            // The answer comes only once the stream ends: the call runs
            // while the messages are sent.
            let call = tokio::spawn(async move { client.collect(ReceiverStream::new(receiver)).await });
            if !send_first {
                sender.send(echo("one")).await.expect("the call takes messages");
            }
            sender.send(echo("two")).await.expect("the call takes messages");
            drop(sender);
            let reply = within("the answer", call).await.expect("the call ran").expect("answered");
            assert_eq!(
                reply.into_inner().message,
                "one two",
                "configured {configured}, send first {send_first}"
            );
            assert_eq!(server.calls().len(), 1);
        }
    }
}

#[tokio::test]
async fn a_watch_stream_hands_over_its_headers_at_once_not_with_its_first_message() {
    for configured in [true, false] {
        let server = EchoServer::start(Vec::new()).await;
        let mut client = client(&server, config(configured));
        let started = Instant::now();
        let response = within("the headers", client.watch(echo("w"))).await.expect("the watch starts");
        let headers_after = started.elapsed();
        // The first message comes 1.5 s in; the headers come at once.
        assert!(headers_after < WATCH_FIRST_MESSAGE / 2, "headers after {headers_after:?}");
        let mut stream = response.into_inner();
        let first =
            within("the first message", stream.message()).await.expect("no error").expect("a message");
        assert_eq!(first.message, "w changed");
        assert!(
            started.elapsed() >= WATCH_FIRST_MESSAGE - Duration::from_millis(50),
            "{:?}",
            started.elapsed()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_unary_call_answered_trailers_only_unavailable_is_still_retried() {
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None)]).await;
    let reply = client(&server, config(true)).unary(echo("u")).await.expect("the retry succeeds");
    assert_eq!(reply.into_inner().message, "u");
    let previous: Vec<Option<String>> = server.calls().into_iter().map(|c| c.previous_attempts).collect();
    assert_eq!(previous, [None, Some("1".to_owned())]);
}

#[tokio::test]
async fn a_spent_deadline_is_deadline_exceeded_on_every_fresh_channel() {
    // The server answers after 2 s; each call allows 500 ms. Whichever timer
    // fires first — the layer's, or the tonic server's answering its
    // `grpc-timeout` with CANCELLED — the caller gets DEADLINE_EXCEEDED.
    let server = EchoServer::start(vec![Behaviour::Delay(Duration::from_secs(2)); 20]).await;
    let mut calls = Vec::new();
    for _ in 0..10 {
        let mut client = client(&server, config(true));
        calls.push(tokio::spawn(async move {
            let mut request = tonic::Request::new(echo("slow"));
            request.set_timeout(Duration::from_millis(500));
            let started = Instant::now();
            let status = client.unary(request).await.expect_err("too slow");
            (status, started.elapsed())
        }));
    }
    for call in calls {
        let (status, took) = call.await.expect("the call ran");
        assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
        assert!(took < Duration::from_millis(1_500), "{took:?}");
    }
    // A policy's own deadline, with none from the caller, ends the same way.
    let bounded = Policy::builder().deadline(Duration::from_millis(500)).build().expect("valid policy");
    for _ in 0..2 {
        let status =
            client(&server, GrpcRetry::new(bounded)).unary(echo("slow")).await.expect_err("too slow");
        assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
        assert!(status.message().contains("deadline"), "{status:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn thirty_calls_to_a_failing_server_make_exactly_a6s_33_attempts_and_all_are_sent() {
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None); 64]).await;
    let retry = GrpcRetry::from_service_config(
        r#"{"methodConfig": [{"name": [{"service": "test.Echo"}],
            "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
              "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}],
          "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}"#,
    )
    .expect("valid config");
    let mut client = client(&server, retry);
    for call in 0..30 {
        let status = client.unary(echo("x")).await.expect_err("the server fails");
        // The last attempt's status: the server's code and message…
        assert_eq!(status.code(), Code::Unavailable);
        assert!(status.message().starts_with("scripted failure"), "{status:?}");
        // …saying why it was not retried, once the bucket refused a retry.
        let why = status.metadata().get(NOT_RETRIED).and_then(|v| v.to_str().ok());
        if call == 0 {
            assert_eq!((status.message(), why), ("scripted failure", None), "attempts ran out first");
        } else {
            assert_eq!(why, Some(NOT_RETRIED_THROTTLED), "call {call}: {status:?}");
            assert!(
                status.message().contains("retry throttling (token bucket) refused a retry"),
                "{status:?}"
            );
        }
    }
    let calls = server.calls();
    // 10 tokens: the first call's 4 attempts leave 6, the second call's one
    // failure leaves 5 — half — and from then on every call is sent once.
    assert_eq!(calls.len(), 33);
    let first_attempts = calls.iter().filter(|c| c.previous_attempts.is_none()).count();
    assert_eq!(first_attempts, 30, "no call was refused before it was sent");
}

#[tokio::test(start_paused = true)]
async fn a_breaker_is_there_only_when_asked_for_and_its_refusal_is_unavailable() {
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None); 64]).await;
    let once = Policy::builder().max_attempts(1).build().expect("valid policy");
    let layer = RetryLayer::grpc(GrpcRetry::new(once))
        .origin(server.uri())
        .no_telemetry()
        .breaker_per_dependency(CircuitBreaker::default)
        .build();
    let mut client = EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()));
    let mut refused = 0;
    for _ in 0..30 {
        let status = client.unary(echo("x")).await.expect_err("the server fails");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        if status.message().contains("circuit breaker is open") {
            let why = status.metadata().get(NOT_RETRIED).and_then(|v| v.to_str().ok());
            assert_eq!(why, Some(NOT_RETRIED_CIRCUIT_OPEN));
            refused += 1;
        }
    }
    assert!(refused > 0, "the breaker asked for opened");
    assert_eq!(server.calls().len(), 30 - refused, "what the breaker refused was never sent");
}

#[tokio::test(start_paused = true)]
async fn no_deadline_goes_on_the_wire_for_a_call_that_set_none() {
    let server = EchoServer::start(Vec::new()).await;
    let mut client = client(&server, GrpcRetry::new(Policy::interactive()));
    client.unary(echo("x")).await.expect("answered");
    let mut request = tonic::Request::new(echo("x"));
    request.set_timeout(Duration::from_secs(2));
    client.unary(request).await.expect("answered");
    let timeouts: Vec<Option<String>> = server.calls().into_iter().map(|c| c.timeout).collect();
    // The preset's 15 s is the layer's own bound; the caller's 2 s is sent.
    assert_eq!(timeouts, [None, Some("2000000u".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn a_failure_not_retried_because_of_the_body_says_so_in_the_status() {
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None)]).await;
    let mut request = echo("big");
    request.padding = vec![7; 300 * 1024];
    let status = client(&server, config(true)).unary(request).await.expect_err("not retried");
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.message().starts_with("scripted failure"), "{status:?}");
    assert!(status.message().contains("not retried"), "{status:?}");
    let flag = status.metadata().get(NOT_RETRIED).and_then(|v| v.to_str().ok());
    assert_eq!(flag, Some(NOT_RETRIED_BODY));
    assert_eq!(server.calls().len(), 1);
}
