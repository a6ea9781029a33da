//! gRPC retries (gRFC A6) against a real tonic server on 127.0.0.1, on tokio's
//! paused clock.

use retryscope_test_support as support;

use opentelemetry_sdk::trace::SpanData;
use retryscope::{Policy, RetryBudget};
use retryscope_tower::grpc::Grpc;
use retryscope_tower::grpc::{GrpcRetry, NOT_RETRIED, NOT_RETRIED_THROTTLED};
use retryscope_tower::prelude::*;
use retryscope_tower::{RetryLayer, RetryOptions, RetryService};
use std::time::Duration;
use support::echo::{Behaviour, EchoClient, EchoServer, echo};
use support::telemetry::{Telemetry, attr};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tower::Layer;

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(4)
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(100))
        .build()
        .expect("valid policy")
}

fn client_with(server: &EchoServer, layer: RetryLayer<Grpc>) -> EchoClient<RetryService<Channel, Grpc>> {
    let channel = Endpoint::from(server.uri()).connect_lazy();
    EchoClient::new(layer.layer(channel))
}

fn layer(server: &EchoServer, telemetry: &Telemetry, retry: GrpcRetry) -> RetryLayer<Grpc> {
    RetryLayer::grpc(retry).origin(server.uri()).meter(&telemetry.meter).build()
}

fn client(server: &EchoServer, telemetry: &Telemetry) -> EchoClient<RetryService<Channel, Grpc>> {
    client_with(server, layer(server, telemetry, GrpcRetry::new(policy())))
}

/// The attempt spans (CLIENT spans under the caller's span), in start order.
fn attempt_spans(telemetry: &Telemetry) -> Vec<SpanData> {
    let mut spans: Vec<SpanData> = telemetry
        .spans()
        .into_iter()
        .filter(|s| s.span_kind == opentelemetry::trace::SpanKind::Client)
        .collect();
    spans.sort_by_key(|s| s.start_time);
    spans
}

#[tokio::test(start_paused = true)]
async fn unavailable_twice_then_ok_takes_three_attempts_with_a_span_each() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None); 2]).await;
    let mut client = client(&server, &telemetry);

    let reply = client.unary(echo("hello")).await.expect("the third attempt succeeds");
    assert_eq!(reply.into_inner().message, "hello");

    let calls = server.calls();
    assert_eq!(calls.len(), 3);
    let previous: Vec<Option<&str>> = calls.iter().map(|c| c.previous_attempts.as_deref()).collect();
    assert_eq!(previous, [None, Some("1"), Some("2")]);
    let traceparents: Vec<&str> =
        calls.iter().map(|c| c.traceparent.as_deref().expect("traceparent")).collect();
    assert!(traceparents[0] != traceparents[1] && traceparents[1] != traceparents[2], "{traceparents:?}");

    let spans = attempt_spans(&telemetry);
    assert_eq!(spans.len(), 3, "{spans:#?}");
    for (i, span) in spans.iter().enumerate() {
        assert_eq!(span.name, "test.Echo/Unary");
        assert_eq!(attr(span, "rpc.system").as_deref(), Some("grpc"));
        assert_eq!(attr(span, "rpc.service").as_deref(), Some("test.Echo"));
        assert_eq!(attr(span, "rpc.method").as_deref(), Some("Unary"));
        assert_eq!(attr(span, "server.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(attr(span, "server.port"), Some(server.addr.port().to_string()));
        assert_eq!(attr(span, "retryscope.attempt"), Some((i + 1).to_string()));
        // The span's context is what went on the wire.
        assert!(traceparents[i].contains(&span.span_context.span_id().to_string()), "{}", traceparents[i]);
    }
    let codes: Vec<Option<String>> = spans.iter().map(|s| attr(s, "rpc.grpc.status_code")).collect();
    assert_eq!(codes, [Some("14".into()), Some("14".into()), Some("0".into())]);
    let errors: Vec<Option<String>> = spans.iter().map(|s| attr(s, "error.type")).collect();
    assert_eq!(errors, [Some("UNAVAILABLE".into()), Some("UNAVAILABLE".into()), None]);
    for span in &spans {
        let recorded = span.attributes.iter().filter(|kv| kv.key.as_str() == "error.type").count();
        assert!(recorded <= 1, "error.type recorded {recorded} times on {span:?}");
    }

    let dependency = server.addr.to_string();
    let with = [("retryscope.dependency", dependency.as_str()), ("retryscope.retry.reason", "UNAVAILABLE")];
    assert_eq!(telemetry.counter("retryscope.retries", &with), 2);
    let failed = [("retryscope.dependency", dependency.as_str()), ("error.type", "UNAVAILABLE")];
    assert_eq!(telemetry.histogram_count("retryscope.attempt.duration", &failed), 2);
    assert_eq!(telemetry.counter("retryscope.requests", &[("retryscope.dependency", &dependency)]), 1);
}

#[tokio::test(start_paused = true)]
async fn a_grpc_call_is_reported_as_its_method_not_its_address() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None)]).await;
    let mut client = client(&server, &telemetry);

    client.say_hello(echo("hello")).await.expect("the retry succeeds");

    // The operation span, where the observer makes one, is named after the
    // method too (the default observer may make none: attempts then sit under
    // the caller's span).
    let spans = telemetry.spans();
    let operations: Vec<_> = spans
        .iter()
        .filter(|s| {
            s.span_kind == opentelemetry::trace::SpanKind::Internal
                && attr(s, "retryscope.dependency").is_some()
        })
        .collect();
    for operation in operations {
        assert_eq!(operation.name, "helloworld.Greeter/SayHello");
        assert_eq!(attr(operation, "retryscope.operation").as_deref(), Some("helloworld.Greeter/SayHello"));
    }
    let names: Vec<String> = attempt_spans(&telemetry).iter().map(|s| s.name.to_string()).collect();
    assert_eq!(names, ["helloworld.Greeter/SayHello"; 2]);
    let method = [("retryscope.operation", "helloworld.Greeter/SayHello")];
    assert_eq!(telemetry.counter("retryscope.requests", &method), 1);
    assert_eq!(telemetry.counter("retryscope.retries", &method), 1);
}

#[tokio::test(start_paused = true)]
async fn codes_outside_the_retryable_set_are_not_retried() {
    let telemetry = Telemetry::install();
    for code in [Code::ResourceExhausted, Code::InvalidArgument] {
        let server = EchoServer::start(vec![Behaviour::Fail(code, None)]).await;
        let status = client(&server, &telemetry).unary(echo("x")).await.expect_err("fails");
        assert_eq!(status.code(), code);
        assert_eq!(server.calls().len(), 1, "{code:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn configured_codes_are_retried() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::ResourceExhausted, None)]).await;
    let retry = GrpcRetry::new(policy()).retryable_codes([Code::Unavailable, Code::ResourceExhausted]);
    let mut client = client_with(&server, layer(&server, &telemetry, retry));
    client.unary(echo("x")).await.expect("the retry succeeds");
    assert_eq!(server.calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn pushback_replaces_the_computed_delay() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, Some("250"))]).await;
    client(&server, &telemetry).unary(echo("x")).await.expect("the retry succeeds");
    let calls = server.calls();
    assert_eq!(calls.len(), 2);
    let waited = calls[1].at - calls[0].at;
    // The policy alone would wait at most 10 ms.
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert!(waited < Duration::from_millis(260), "{waited:?}");
    let source = [("retryscope.delay.source", "grpc_pushback")];
    assert_eq!(telemetry.histogram_count("retryscope.backoff.delay", &source), 1);
}

#[tokio::test(start_paused = true)]
async fn negative_or_malformed_pushback_stops_retrying() {
    let telemetry = Telemetry::install();
    for pushback in ["-1", "soon"] {
        let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, Some(pushback))]).await;
        let status = client(&server, &telemetry).unary(echo("x")).await.expect_err("not retried");
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(server.calls().len(), 1, "pushback {pushback}");
    }
}

#[tokio::test(start_paused = true)]
async fn grpc_timeout_is_the_deadline_of_the_whole_call() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![
        Behaviour::Fail(Code::Unavailable, Some("100")),
        Behaviour::Fail(Code::Unavailable, Some("500")),
    ])
    .await;
    let mut request = tonic::Request::new(echo("x"));
    request.set_timeout(Duration::from_millis(400));
    let status = client(&server, &telemetry).unary(request).await.expect_err("the deadline ends it");
    assert_eq!(status.code(), Code::Unavailable);
    let calls = server.calls();
    // A pushback of 500 ms cannot fit in what is left of 400 ms: no third attempt.
    assert_eq!(calls.len(), 2);
    let timeouts: Vec<&str> = calls.iter().map(|c| c.timeout.as_deref().expect("grpc-timeout")).collect();
    assert_eq!(timeouts[0], "400000u");
    // The retry carries what is left of the deadline, not the original timeout.
    assert_eq!(timeouts[1], "300000u");
}

#[tokio::test(start_paused = true)]
async fn throttling_stops_retries_at_half_the_tokens_and_successes_resume_them() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None); 7]).await;
    let retry = GrpcRetry::new(
        Policy::builder().max_attempts(5).base_delay(Duration::from_millis(10)).build().expect("valid"),
    )
    .throttling(10, 1.0)
    .expect("valid throttling");
    let layer = RetryLayer::grpc(retry).origin(server.uri()).meter(&telemetry.meter).no_breaker().build();
    let mut client = client_with(&server, layer);

    // 10 tokens: each failure takes one, and a retry is allowed only while more
    // than 5 are left. The first call fails 5 times (9, 8, 7, 6, 5 tokens left):
    // its attempts run out just as the bucket reaches half.
    assert_eq!(client.unary(echo("x")).await.expect_err("fails").code(), Code::Unavailable);
    assert_eq!(server.calls().len(), 5);
    // At 5 tokens (then 4), no retry: each call is sent once.
    assert_eq!(client.unary(echo("x")).await.expect_err("fails").code(), Code::Unavailable);
    assert_eq!(server.calls().len(), 6);
    assert_eq!(client.unary(echo("x")).await.expect_err("fails").code(), Code::Unavailable);
    assert_eq!(server.calls().len(), 7);
    let dependency = server.addr.to_string();
    let throttled =
        [("retryscope.dependency", dependency.as_str()), ("retryscope.throttle.reason", "budget")];
    assert_eq!(telemetry.counter("retryscope.throttled", &throttled), 2);

    // 3 tokens left. Successes give back 1 each (tokenRatio 1.0): after four, 7.
    for _ in 0..4 {
        client.unary(echo("ok")).await.expect("succeeds");
    }
    assert_eq!(server.calls().len(), 11);
    // A failure now leaves 6, more than half: the retry runs again.
    server.script(vec![Behaviour::Fail(Code::Unavailable, None)]);
    client.unary(echo("x")).await.expect("retried and succeeds");
    assert_eq!(server.calls().len(), 13);
}

/// A6 counts as a failure "an RPC that receives a pushback response
/// indicating not to retry", whatever its code: six INVALID_ARGUMENTs that
/// say so take the bucket from 10 tokens to 4, and the next UNAVAILABLE is
/// not retried. (They were counted as permanent answers, which the bucket
/// ignores: the retry went.)
#[tokio::test(start_paused = true)]
async fn a_pushback_that_says_stop_counts_against_throttling_whatever_its_code() {
    let telemetry = Telemetry::install();
    let mut script = vec![Behaviour::Fail(Code::InvalidArgument, Some("-1")); 6];
    script.push(Behaviour::Fail(Code::Unavailable, None));
    let server = EchoServer::start(script).await;
    let retry = GrpcRetry::new(
        Policy::builder().max_attempts(5).base_delay(Duration::from_millis(10)).build().expect("valid"),
    )
    .throttling(10, 0.1)
    .expect("valid throttling");
    let layer = RetryLayer::grpc(retry).origin(server.uri()).meter(&telemetry.meter).no_breaker().build();
    let mut client = client_with(&server, layer);

    for _ in 0..6 {
        let status = client.unary(echo("x")).await.expect_err("a meant answer");
        assert_eq!(status.code(), Code::InvalidArgument);
    }
    assert_eq!(server.calls().len(), 6, "none retried");
    let status = client.unary(echo("x")).await.expect_err("not retried");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(server.calls().len(), 7, "the bucket is under half: no retry");
    assert_eq!(
        status.metadata().get(NOT_RETRIED).map(|v| v.to_str().ok()),
        Some(Some(NOT_RETRIED_THROTTLED))
    );
}

/// A6 has no time limit per attempt (the call's deadline spans them all):
/// a method its service config retries on UNAVAILABLE alone, and one it
/// does not name, both wait out an answer slower than a preset's 5-s
/// attempt timeout, sent once. (Cut at 5 s, the attempt was retried whatever
/// the codes said: the server saw two calls.)
#[tokio::test(start_paused = true)]
async fn a_slow_answer_is_waited_for_and_never_cut_and_retried() {
    let telemetry = Telemetry::install();
    let retried = r#"{"methodConfig": [{"name": [{"service": "test.Echo", "method": "Unary"}],
        "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
        "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#;
    let unnamed = r#"{"methodConfig": [{"name": [{"service": "test.Echo", "method": "Stream"}],
        "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
        "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#;
    for config in [retried, unnamed] {
        let retry = GrpcRetry::from_service_config(config).expect("valid config");
        if let Some(policy) = retry.policy_for("/test.Echo/Unary") {
            assert_eq!(policy.attempt_timeout(), None);
        }
        let server = EchoServer::start(vec![Behaviour::Delay(Duration::from_secs(6))]).await;
        let mut client = client_with(&server, layer(&server, &telemetry, retry));
        let reply = client.unary(echo("slow")).await.expect("the one attempt answers");
        assert_eq!(reply.into_inner().message, "slow");
        assert_eq!(server.calls().len(), 1, "sent once");
    }
}

/// A retry budget given in code on a channel whose config throttles: the
/// token bucket and the budget are both asked, and a retry goes only when
/// both allow it. (The bucket used to replace the budget: a setting accepted
/// and then ignored.) Here the bucket is full and the budget allows none.
#[tokio::test(start_paused = true)]
async fn a_budget_given_in_code_is_asked_beside_the_configs_token_bucket() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None); 4]).await;
    let retry = GrpcRetry::new(policy()).throttling(10, 1.0).expect("valid throttling");
    let none = || RetryBudget::builder().ratio(0.0).min_per_second(0).build().expect("valid budget");
    let layer =
        RetryLayer::grpc(retry).origin(server.uri()).meter(&telemetry.meter).budget_per_dependency(none);
    let mut client = client_with(&server, layer.build());

    let status = client.unary(echo("x")).await.expect_err("not retried");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(server.calls().len(), 1, "the budget refused the retry the full bucket allowed");
    // Either could have refused: the message names both.
    assert!(status.message().contains("retry budget or retry throttling (token bucket)"), "{status:?}");
    let why = status.metadata().get(NOT_RETRIED).and_then(|v| v.to_str().ok());
    assert_eq!(why, Some(NOT_RETRIED_THROTTLED));
}

/// ... and the other way round: a budget that allows every retry does not
/// lift the config's throttling. With 4 tokens a retry goes while more than
/// 2 are left: the first failure leaves 3 (retried), the second 2 (not).
#[tokio::test(start_paused = true)]
async fn the_configs_token_bucket_still_throttles_beside_a_generous_budget() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None); 4]).await;
    let retry = GrpcRetry::new(policy()).throttling(4, 1.0).expect("valid throttling");
    let all = || RetryBudget::builder().ratio(1.0).min_per_second(1_000).build().expect("valid budget");
    let layer =
        RetryLayer::grpc(retry).origin(server.uri()).meter(&telemetry.meter).budget_per_dependency(all);
    let mut client = client_with(&server, layer.build());

    assert_eq!(client.unary(echo("x")).await.expect_err("throttled").code(), Code::Unavailable);
    assert_eq!(server.calls().len(), 2, "policy() allows 4 attempts; the bucket stopped the third");
    let dependency = server.addr.to_string();
    let throttled =
        [("retryscope.dependency", dependency.as_str()), ("retryscope.throttle.reason", "budget")];
    assert_eq!(telemetry.counter("retryscope.throttled", &throttled), 1);
}

#[tokio::test(start_paused = true)]
async fn a_body_over_the_replay_limit_is_sent_once_and_the_span_says_so() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None)]).await;
    let mut request = echo("big");
    request.padding = vec![7; 300 * 1024];
    let status = client(&server, &telemetry).unary(request).await.expect_err("not retried");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(server.calls().len(), 1);
    let spans = attempt_spans(&telemetry);
    assert_eq!(spans.len(), 1);
    let said: Vec<String> = spans[0].events.iter().map(|e| e.name.to_string()).collect();
    assert!(said.iter().any(|e| e.contains("sent once and never retried")), "{said:?}");
}

/// Every attempt is sent as tonic sends the call itself: a body held for
/// replay tells its length as tonic's did (not at all), so no attempt — the
/// first or a retry — carries a `content-length` that a call without the
/// layer would not (hyper adds one for a body of exact length).
#[tokio::test(start_paused = true)]
async fn no_attempt_carries_a_content_length_tonic_would_not_send() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Ok, Behaviour::Fail(Code::Unavailable, None)]).await;
    let channel = Endpoint::from(server.uri()).connect_lazy();
    EchoClient::new(channel).unary(echo("plain")).await.expect("answered without the layer");
    client(&server, &telemetry).unary(echo("retried")).await.expect("answered on the retry");
    let calls = server.calls();
    assert_eq!(calls.len(), 3, "one plain call, then an attempt and its retry");
    for (n, call) in calls.iter().enumerate() {
        assert_eq!(call.content_length, None, "call {n}: {:?}", call.previous_attempts);
    }
}

/// The guide's "request bodies up to 256 KiB are kept for replay; larger
/// ones are sent once", at its edge: the request's HTTP/2 body (the 5-byte
/// gRPC frame header and the encoded message) of exactly
/// `DEFAULT_REPLAY_LIMIT` bytes is retried, and answered; one byte more is
/// sent once and its `UNAVAILABLE` reaches the caller. On the real clock,
/// where each case takes milliseconds: on the paused one, a retried body of
/// 100 KiB already ends `DEADLINE_EXCEEDED`, the clock having jumped to the
/// deadline while the bytes were under way.
#[tokio::test]
async fn a_body_of_exactly_the_replay_limit_is_retried_and_one_byte_more_is_sent_once() {
    use prost::Message as _;
    const FRAME_HEADER: usize = 5;
    let limit = retryscope_tower::DEFAULT_REPLAY_LIMIT;
    assert_eq!(limit, 256 * 1024, "the guide's figure");
    // A request whose body on the wire is `body` bytes long.
    let request = |body: usize| {
        let mut request = echo("edge");
        request.padding = vec![7; body - 64];
        let missing = body - (FRAME_HEADER + request.encoded_len());
        request.padding.resize(request.padding.len() + missing, 7);
        assert_eq!(FRAME_HEADER + request.encoded_len(), body, "the body on the wire");
        request
    };
    for (body, retried) in [(limit, true), (limit + 1, false)] {
        let telemetry = Telemetry::install();
        let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None)]).await;
        let answer = client(&server, &telemetry).unary(request(body)).await;
        let calls = server.calls().len();
        if retried {
            assert_eq!(answer.map(|r| r.into_inner().message).map_err(|s| s.code()), Ok("edge".to_owned()));
            assert_eq!(calls, 2, "a body of {body} bytes is kept and sent again");
        } else {
            assert_eq!(answer.map(|_| ()).map_err(|s| s.code()), Err(Code::Unavailable));
            assert_eq!(calls, 1, "a body of {body} bytes is sent once");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_answered_trailers_only_is_retried() {
    let telemetry = Telemetry::install();
    // The handler fails: the status comes in the headers, nothing else.
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None)]).await;
    let response = client(&server, &telemetry).stream(echo("s")).await.expect("retried");
    let mut stream = response.into_inner();
    let mut messages = Vec::new();
    while let Some(reply) = stream.message().await.expect("no error") {
        messages.push(reply.message);
    }
    assert_eq!(messages, ["s 1", "s 2"]);
    assert_eq!(server.calls().len(), 2);
    drop(stream);
    let codes: Vec<Option<String>> =
        attempt_spans(&telemetry).iter().map(|s| attr(s, "rpc.grpc.status_code")).collect();
    assert_eq!(codes, [Some("14".into()), Some("0".into())]);
}

#[tokio::test(start_paused = true)]
async fn a_stream_is_committed_at_its_headers_even_when_it_fails_before_any_message() {
    let telemetry = Telemetry::install();
    // Headers first, then UNAVAILABLE in the trailers: A6 has committed the
    // call at the headers, which the caller already has.
    let server = EchoServer::start(vec![Behaviour::FailAfterHeaders(Code::Unavailable)]).await;
    let response = client(&server, &telemetry).stream(echo("s")).await.expect("the headers arrive");
    let mut stream = response.into_inner();
    let status = stream.message().await.expect_err("the trailers say UNAVAILABLE");
    assert_eq!(status.code(), Code::Unavailable);
    drop(stream);
    assert_eq!(server.calls().len(), 1, "never retried");
    let spans = attempt_spans(&telemetry);
    assert_eq!(spans.len(), 1);
    assert_eq!(attr(&spans[0], "rpc.grpc.status_code").as_deref(), Some("14"));
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_fails_after_its_first_message_is_committed() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::ReplyThenFail(Code::Unavailable)]).await;
    let response = client(&server, &telemetry).stream(echo("s")).await.expect("the call starts");
    let mut stream = response.into_inner();
    assert_eq!(stream.message().await.expect("first message").map(|r| r.message).as_deref(), Some("s 1"));
    let status = stream.message().await.expect_err("then the failure");
    assert_eq!(status.code(), Code::Unavailable);
    drop(stream);
    assert_eq!(server.calls().len(), 1);
    // The attempt span stayed open until the trailers and recorded them.
    let spans = attempt_spans(&telemetry);
    assert_eq!(spans.len(), 1);
    assert_eq!(attr(&spans[0], "rpc.grpc.status_code").as_deref(), Some("14"));
    assert_eq!(attr(&spans[0], "error.type").as_deref(), Some("UNAVAILABLE"));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_call_mid_wait_cancels_it_and_no_attempt_runs_after() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, Some("1000"))]).await;
    let mut client = client(&server, &telemetry);
    let call = client.unary(echo("x"));
    assert!(tokio::time::timeout(Duration::from_millis(300), call).await.is_err(), "still waiting");
    assert_eq!(server.calls().len(), 1);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(server.calls().len(), 1, "no attempt after the drop");
    let dependency = server.addr.to_string();
    let cancelled = [("retryscope.dependency", dependency.as_str()), ("retryscope.outcome", "cancelled")];
    assert_eq!(telemetry.histogram_count("retryscope.request.duration", &cancelled), 1);
}

#[tokio::test(start_paused = true)]
async fn methods_without_a_retry_policy_are_sent_once() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None)]).await;
    let config = r#"{"methodConfig": [{"name": [{"service": "test.Echo", "method": "Stream"}],
        "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
        "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#;
    let retry = GrpcRetry::from_service_config(config).expect("valid config");
    let mut client = client_with(&server, layer(&server, &telemetry, retry));
    assert_eq!(client.unary(echo("x")).await.expect_err("not retried").code(), Code::Unavailable);
    assert_eq!(server.calls().len(), 1);

    // A policy given for one call retries it on UNAVAILABLE all the same.
    server.script(vec![Behaviour::Fail(Code::Unavailable, None)]);
    let mut request = tonic::Request::new(echo("x"));
    request.extensions_mut().insert(RetryOptions::new().policy(policy()));
    client.unary(request).await.expect("retried");
    assert_eq!(server.calls().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_retried_and_reported_as_unavailable() {
    let telemetry = Telemetry::install();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let uri: http::Uri = format!("http://{}", listener.local_addr().expect("addr")).parse().expect("uri");
    drop(listener);
    let layer =
        RetryLayer::grpc(GrpcRetry::new(policy())).origin(uri.clone()).meter(&telemetry.meter).build();
    let mut client = EchoClient::new(layer.layer(Endpoint::from(uri).connect_lazy()));
    let status = client.unary(echo("x")).await.expect_err("nobody listens");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let spans = attempt_spans(&telemetry);
    assert_eq!(spans.len(), 4, "every attempt the policy allows");
    assert!(spans.iter().all(|s| attr(s, "error.type").as_deref() == Some("connect")), "{spans:#?}");
}
