//! HTTP/2 resets as gRPC reads them, against a raw HTTP/2 server on
//! 127.0.0.1: a stream the server refused before processing it gets A6's
//! transparent retry, whatever the retry policy and outside its attempts;
//! any other reset is retried only as the status it maps to is. And a failed
//! answer kept through a backoff wait lets go of its stream first.

use retryscope_test_support as support;

use http::StatusCode;
use retryscope::{Jitter, Policy};
use retryscope_tower::grpc::Grpc;
use retryscope_tower::grpc::GrpcRetry;
use retryscope_tower::prelude::*;
use retryscope_tower::{RetryLayer, RetryService};
use std::time::Duration;
use support::echo::{EchoClient, echo};
use support::h2_server::{Answer, H2Server};
use support::telemetry::{Telemetry, attr};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tower::Layer;

fn client(server: &H2Server, retry: GrpcRetry) -> EchoClient<RetryService<Channel, Grpc>> {
    let layer = RetryLayer::grpc(retry).origin(server.uri()).no_telemetry().build();
    EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()))
}

/// Four attempts on UNAVAILABLE only, 10 ms apart.
fn unavailable_only() -> GrpcRetry {
    GrpcRetry::new(
        Policy::builder()
            .max_attempts(4)
            .base_delay(Duration::from_millis(10))
            .max_delay(Duration::from_millis(100))
            .build()
            .expect("valid policy"),
    )
}

/// A config whose only entry names another service: `test.Echo` has no retry
/// policy and is sent once.
fn no_policy_for_echo() -> GrpcRetry {
    GrpcRetry::from_service_config(
        r#"{"methodConfig": [{"name": [{"service": "other.Service"}],
            "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
              "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#,
    )
    .expect("valid config")
}

#[tokio::test]
async fn a_refused_stream_is_sent_again_once_even_without_a_retry_policy() {
    let server = H2Server::start(vec![Answer::Reset(h2::Reason::REFUSED_STREAM)]).await;
    let reply = client(&server, no_policy_for_echo()).unary(echo("x")).await.expect("the transparent retry");
    assert_eq!(reply.into_inner().message, "ok");
    let streams = server.streams();
    assert_eq!(streams.len(), 2);
    // Not a retry by the policy's count: no previous attempts to report.
    assert!(streams.iter().all(|s| s.previous_attempts.is_none()), "{streams:?}");
}

#[tokio::test]
async fn the_transparent_retry_is_part_of_its_attempt_and_its_span_says_so() {
    let telemetry = Telemetry::install();
    let server = H2Server::start(vec![Answer::Reset(h2::Reason::REFUSED_STREAM)]).await;
    let layer = RetryLayer::grpc(unavailable_only()).origin(server.uri()).meter(&telemetry.meter).build();
    let mut client = EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()));
    client.unary(echo("x")).await.expect("the transparent retry");
    assert_eq!(server.streams().len(), 2);
    let attempts: Vec<_> = telemetry
        .spans()
        .into_iter()
        .filter(|s| s.span_kind == opentelemetry::trace::SpanKind::Client)
        .collect();
    assert_eq!(attempts.len(), 1, "one attempt by the policy's count");
    let events: Vec<String> = attempts[0].events.iter().map(|e| e.name.to_string()).collect();
    assert!(
        events.iter().any(|e| e.contains("transparent retry") && e.contains("REFUSED_STREAM")),
        "{events:?}"
    );
    assert_eq!(attr(&attempts[0], "rpc.grpc.status_code").as_deref(), Some("0"));
    let dependency = server.addr.to_string();
    assert_eq!(telemetry.counter("retryscope.retries", &[("retryscope.dependency", &dependency)]), 0);
}

#[tokio::test]
async fn the_transparent_retry_carries_what_is_left_of_the_callers_deadline() {
    let server = H2Server::start(vec![Answer::Reset(h2::Reason::REFUSED_STREAM)]).await;
    let mut request = tonic::Request::new(echo("x"));
    request.set_timeout(Duration::from_secs(2));
    client(&server, no_policy_for_echo()).unary(request).await.expect("the transparent retry");
    let micros: Vec<u64> = server
        .streams()
        .iter()
        .map(|s| {
            let value = s.timeout.as_deref().expect("grpc-timeout on both");
            value.strip_suffix('u').and_then(|v| v.parse().ok()).expect("microseconds")
        })
        .collect();
    assert_eq!(micros.len(), 2);
    assert!(micros[0] <= 2_000_000 && micros[1] <= micros[0], "{micros:?}");
    assert!(micros[1] > 1_000_000, "{micros:?}");
}

#[tokio::test]
async fn the_transparent_retry_happens_once_only() {
    let refused = Answer::Reset(h2::Reason::REFUSED_STREAM);
    let server = H2Server::start(vec![refused.clone(), refused]).await;
    let status = client(&server, no_policy_for_echo()).unary(echo("x")).await.expect_err("refused twice");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(server.streams().len(), 2);
}

#[tokio::test]
async fn the_transparent_retry_does_not_count_against_max_attempts() {
    let server = H2Server::start(vec![Answer::Reset(h2::Reason::REFUSED_STREAM); 8]).await;
    let status = client(&server, unavailable_only()).unary(echo("x")).await.expect_err("always refused");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let previous: Vec<Option<String>> = server.streams().into_iter().map(|s| s.previous_attempts).collect();
    // The first attempt and its transparent retry, then the policy's three retries.
    let expected: Vec<Option<String>> =
        [None, None, Some("1"), Some("2"), Some("3")].into_iter().map(|p| p.map(str::to_owned)).collect();
    assert_eq!(previous, expected);
}

#[tokio::test]
async fn a_stream_a_goaway_left_unprocessed_is_sent_again_once_even_without_a_retry_policy() {
    let server = H2Server::start_after_goaways(1, Vec::new()).await;
    let reply = client(&server, no_policy_for_echo()).unary(echo("x")).await.expect("the transparent retry");
    assert_eq!(reply.into_inner().message, "ok");
    assert_eq!(server.goaways(), 1, "the first connection went away");
    // The retry, on a new connection, is the only stream the server processed.
    let streams = server.streams();
    assert_eq!(streams.len(), 1, "{streams:?}");
    assert_eq!(streams[0].previous_attempts, None);
}

#[tokio::test]
async fn a_second_goaway_ends_the_call_as_unavailable_as_grpc_go_says() {
    let server = H2Server::start_after_goaways(2, Vec::new()).await;
    let status = client(&server, no_policy_for_echo()).unary(echo("x")).await.expect_err("sent away twice");
    // tonic alone would say INTERNAL (it maps a GOAWAY by its reason, NO_ERROR).
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(server.goaways(), 2);
    assert!(server.streams().is_empty(), "nothing was processed");
}

#[tokio::test]
async fn other_resets_are_retried_only_as_their_status_is() {
    let cases = [
        (h2::Reason::INTERNAL_ERROR, Code::Internal),
        (h2::Reason::CANCEL, Code::Cancelled),
        (h2::Reason::ENHANCE_YOUR_CALM, Code::ResourceExhausted),
        // grpc-go's INTERNAL, where tonic alone says UNKNOWN.
        (h2::Reason::HTTP_1_1_REQUIRED, Code::Internal),
    ];
    for (reason, code) in cases {
        let server = H2Server::start(vec![Answer::Reset(reason); 4]).await;
        let status = client(&server, unavailable_only()).unary(echo("x")).await.expect_err("reset");
        assert_eq!(status.code(), code, "{reason:?}: {status:?}");
        assert_eq!(server.streams().len(), 1, "{reason:?}: only UNAVAILABLE is retried");
    }
    // With RESOURCE_EXHAUSTED configured, ENHANCE_YOUR_CALM is retried.
    let server = H2Server::start(vec![Answer::Reset(h2::Reason::ENHANCE_YOUR_CALM)]).await;
    let retry = unavailable_only().retryable_codes([Code::Unavailable, Code::ResourceExhausted]);
    client(&server, retry).unary(echo("x")).await.expect("the retry succeeds");
    assert_eq!(server.streams().len(), 2);
}

#[tokio::test]
async fn a_trailers_only_answer_from_a_raw_server_is_retried() {
    let server = H2Server::start(vec![Answer::TrailersOnly(14)]).await;
    client(&server, unavailable_only()).unary(echo("x")).await.expect("the retry succeeds");
    assert_eq!(server.streams().len(), 2);
}

#[tokio::test]
async fn a_failed_answer_kept_through_the_wait_lets_go_of_its_stream_first() {
    // A 503 whose body does not end (more than is drained), then OK after a
    // 2 s wait: the stream must be reset during the wait, not after the retry.
    let server =
        H2Server::start(vec![Answer::StatusWithEndlessBody(StatusCode::SERVICE_UNAVAILABLE, 100 * 1024)])
            .await;
    let policy = Policy::builder()
        .max_attempts(2)
        .base_delay(Duration::from_secs(2))
        .jitter(Jitter::None)
        .build()
        .expect("valid policy");
    client(&server, GrpcRetry::new(policy)).unary(echo("x")).await.expect("the retry succeeds");
    let streams = server.streams();
    assert_eq!(streams.len(), 2);
    let reset = streams[0].reset_at.expect("the kept answer's stream was reset");
    assert!(reset < streams[1].at, "released at {reset:?}, retried at {:?}", streams[1].at);
    assert!(streams[1].at - reset > Duration::from_millis(500), "released well before the retry");
}
