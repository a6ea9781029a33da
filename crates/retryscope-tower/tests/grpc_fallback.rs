//! Fallbacks for gRPC calls (issue 35) against a real tonic server on
//! 127.0.0.1, on tokio's paused clock: the one fallback registry of HTTP
//! answers a gRPC call that gave up — attempts exhausted, the breaker open —
//! with a reply message the tonic client decodes, or with a status; never a
//! call whose status is not retried; a fallback that fails leaves the
//! caller the status it would have got.

use bytes::Bytes;
use prost::Message as _;
use retryscope::{CircuitBreaker, Jitter, Policy, StopReason};
use retryscope_test_support::echo::{Behaviour, EchoClient, EchoReply, EchoServer, echo};
use retryscope_test_support::telemetry::Telemetry;
use retryscope_tower::grpc::Grpc;
use retryscope_tower::grpc::{GrpcRetry, fallback};
use retryscope_tower::prelude::*;
use retryscope_tower::{Fallback, FallbackContext, FallbackFuture, FallbackReason, RetryLayer, RetryService};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tower::Layer;

/// Two attempts, 10 ms apart.
fn policy() -> Policy {
    Policy::builder()
        .max_attempts(2)
        .base_delay(Duration::from_millis(10))
        .jitter(Jitter::None)
        .build()
        .expect("valid policy")
}

/// Opens on the second failure of two calls, for a second.
fn quick_breaker() -> CircuitBreaker {
    CircuitBreaker::builder()
        .min_calls(2)
        .failure_ratio(0.5)
        .cool_down(Duration::from_secs(1))
        .build()
        .expect("valid breaker")
}

/// Answers with the cached reply `cached`, noting why it ran.
fn cached(
    reasons: Arc<Mutex<Vec<FallbackReason>>>,
) -> impl Fn(&FallbackContext<'_>) -> FallbackFuture + Send + Sync {
    move |context: &FallbackContext<'_>| {
        reasons.lock().expect("not poisoned").push(context.reason());
        let reply = EchoReply { message: "cached".to_owned() };
        Box::pin(async move { Ok(fallback::message(reply.encode_to_vec())) })
    }
}

fn client(server: &EchoServer, layer: RetryLayer<Grpc>) -> EchoClient<RetryService<Channel, Grpc>> {
    EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()))
}

#[tokio::test(start_paused = true)]
async fn a_grpc_call_that_gave_up_gets_its_fallbacks_reply_and_a_meant_status_does_not() {
    let t = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None); 2]).await;
    let reasons = Arc::default();
    let layer = RetryLayer::grpc(GrpcRetry::new(policy()))
        .origin(server.uri())
        .meter(&t.meter)
        .fallback("cached", cached(Arc::clone(&reasons)))
        .default_fallback("cached")
        .expect("registered")
        .build();
    let mut client = client(&server, layer);

    // Attempts exhausted on UNAVAILABLE: the fallback's reply, decoded by tonic, marked.
    let reply = client.unary(echo("x")).await.expect("the fallback's reply");
    let marked = reply.extensions().get::<Fallback>().cloned().expect("marked as a fallback");
    assert_eq!(reply.into_inner().message, "cached");
    assert_eq!(
        (marked.name(), marked.reason()),
        ("cached", FallbackReason::GaveUp(StopReason::AttemptsExhausted))
    );
    assert_eq!(server.calls().len(), 2, "both attempts ran first");

    // A status the call does not retry is the server's answer: no fallback.
    server.script(vec![Behaviour::Fail(Code::NotFound, None)]);
    let status = client.unary(echo("x")).await.expect_err("NOT_FOUND as it came");
    assert_eq!(status.code(), Code::NotFound);

    // A success is the server's.
    let fresh = client.unary(echo("fresh")).await.expect("the server's reply");
    assert!(fresh.extensions().get::<Fallback>().is_none());
    assert_eq!(fresh.into_inner().message, "fresh");

    let told = reasons.lock().expect("not poisoned").clone();
    assert_eq!(told, [FallbackReason::GaveUp(StopReason::AttemptsExhausted)]);
    let dependency = server.addr.to_string();
    let with = [
        ("retryscope.dependency", dependency.as_str()),
        ("retryscope.fallback.reason", "attempts_exhausted"),
    ];
    assert_eq!(t.counter("retryscope.fallbacks", &with), 1);
    let outcome = |outcome: &str| {
        t.histogram_count(
            "retryscope.request.duration",
            &[("retryscope.dependency", dependency.as_str()), ("retryscope.outcome", outcome)],
        )
    };
    assert_eq!(
        (outcome("fallback"), outcome("failure"), outcome("success"), outcome("exhausted")),
        (1, 1, 1, 0)
    );
}

/// While the breaker is open, the fallback answers the calls it refuses,
/// and the server sees none of them.
#[tokio::test(start_paused = true)]
async fn the_grpc_fallback_answers_while_the_breaker_is_open() {
    let t = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None); 40]).await;
    let reasons = Arc::default();
    let layer = RetryLayer::grpc(GrpcRetry::new(policy()))
        .origin(server.uri())
        .meter(&t.meter)
        .breaker_per_dependency(quick_breaker)
        .fallback("cached", cached(Arc::clone(&reasons)))
        .default_fallback("cached")
        .expect("registered")
        .build();
    let mut client = client(&server, layer);
    let mut seen = Vec::new();
    while seen.last() != Some(&FallbackReason::GaveUp(StopReason::CircuitOpen)) && seen.len() < 20 {
        let sent = server.calls().len();
        let reply = client.unary(echo("x")).await.expect("the fallback's reply");
        let marked = reply.extensions().get::<Fallback>().cloned().expect("marked as a fallback");
        if marked.reason() == FallbackReason::GaveUp(StopReason::CircuitOpen) {
            assert_eq!(server.calls().len(), sent, "the open breaker let a call through");
        }
        assert_eq!(reply.into_inner().message, "cached");
        seen.push(marked.reason());
    }
    let exhausted = seen.len() - 1;
    assert!(exhausted >= 1, "{seen:?}");
    assert_eq!(
        seen,
        [
            vec![FallbackReason::GaveUp(StopReason::AttemptsExhausted); exhausted],
            vec![FallbackReason::GaveUp(StopReason::CircuitOpen)]
        ]
        .concat()
    );
    assert_eq!(*reasons.lock().expect("not poisoned"), seen, "what the fallback was told");
    let dependency = server.addr.to_string();
    let by = |reason: &str| {
        t.counter(
            "retryscope.fallbacks",
            &[("retryscope.dependency", dependency.as_str()), ("retryscope.fallback.reason", reason)],
        )
    };
    assert_eq!((by("attempts_exhausted"), by("circuit_open")), (exhausted as u64, 1));
    let refused = [("retryscope.dependency", dependency.as_str()), ("retryscope.outcome", "fallback")];
    assert_eq!(t.counter("retryscope.refused", &refused), 1, "the refused call, answered by the fallback");
}

#[tokio::test(start_paused = true)]
async fn a_grpc_fallback_may_answer_a_status_and_one_that_fails_leaves_the_calls_status() {
    let t = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None); 4]).await;
    let not_cached = |_: &FallbackContext<'_>| -> FallbackFuture {
        Box::pin(async { Ok(fallback::status(&tonic::Status::not_found("no cached copy"))) })
    };
    let failing =
        |_: &FallbackContext<'_>| -> FallbackFuture { Box::pin(async { Err("the cache is down".into()) }) };
    let dependency = server.addr.to_string();
    let layer = |name: &'static str| {
        RetryLayer::grpc(GrpcRetry::new(policy()))
            .origin(server.uri())
            .meter(&t.meter)
            .fallback("not-cached", not_cached)
            .fallback("failing", failing)
            .fallback_for(&dependency, name)
            .expect("registered")
            .build()
    };

    let status =
        client(&server, layer("not-cached")).unary(echo("x")).await.expect_err("the fallback's status");
    assert_eq!((status.code(), status.message()), (Code::NotFound, "no cached copy"));

    let status = client(&server, layer("failing")).unary(echo("x")).await.expect_err("the call's status");
    // The status the call would have got, saying the fallback failed too and why.
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("its fallback `failing` failed: the cache is down"), "{status:?}");
    let chain = std::error::Error::source(&status).map(|source| source.to_string());
    assert_eq!(
        chain.as_deref(),
        Some("the call gave up (attempts_exhausted) and its fallback `failing` failed")
    );
    assert_eq!(server.calls().len(), 4);
    let by = |outcome: &str| {
        t.histogram_count(
            "retryscope.request.duration",
            &[("retryscope.dependency", dependency.as_str()), ("retryscope.outcome", outcome)],
        )
    };
    // The status answer is the fallback's answer; the failed fallback leaves the give-up.
    assert_eq!((by("fallback"), by("exhausted")), (1, 1));
}

/// An answer a fallback writes as a bare HTTP response is read as gRPC too:
/// its body is the reply, framed by the layer (no trailing bytes, no
/// compression flag), and `Bytes` from anywhere will do.
#[test]
fn a_fallbacks_message_is_the_reply_encoded() {
    let reply = EchoReply { message: "m".to_owned() };
    let response = fallback::message(Bytes::from(reply.encode_to_vec()));
    assert_eq!(EchoReply::decode(response.into_body()).expect("decodes").message, "m");
    let status = fallback::status(&tonic::Status::unavailable("later"));
    assert_eq!(status.headers().get("grpc-status").map(|v| v.as_bytes()), Some(&b"14"[..]));
}
