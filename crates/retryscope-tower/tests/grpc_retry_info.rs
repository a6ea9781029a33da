//! `google.rpc.RetryInfo` in a status's details (gRPC's richer error model,
//! as Google APIs send it): the server's "wait at least this long", honoured
//! as a floor under the backoff, and — with a pacer — by every call to the
//! server. Against a real tonic server on 127.0.0.1 whose handler answers with
//! tonic-types' `with_error_details`, on the wall clock (bounds generous).

use retryscope_test_support as support;

use retryscope::Pacer;
use retryscope_tower::grpc::Grpc;
use retryscope_tower::grpc::GrpcRetry;
use retryscope_tower::prelude::*;
use retryscope_tower::{RetryLayer, RetryService};
use std::time::Duration;
use support::echo::{Behaviour, EchoClient, EchoServer, echo};
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tower::Layer;

/// Up to three attempts on `UNAVAILABLE` and `RESOURCE_EXHAUSTED`, 10 ms apart.
fn config() -> GrpcRetry {
    GrpcRetry::from_service_config(
        r#"{"methodConfig": [{"name": [{"service": "test.Echo"}],
            "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.02s",
              "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}"#,
    )
    .expect("valid config")
}

fn client(server: &EchoServer, pacer: bool) -> EchoClient<RetryService<Channel, Grpc>> {
    let builder = RetryLayer::grpc(config()).origin(server.uri()).no_telemetry();
    let builder = if pacer { builder.pacer_per_dependency(Pacer::new) } else { builder };
    EchoClient::new(builder.build().layer(Endpoint::from(server.uri()).connect_lazy()))
}

#[tokio::test]
async fn a_retry_waits_at_least_the_servers_retry_info_delay_instead_of_its_10_ms_backoff() {
    let server =
        EchoServer::start(vec![Behaviour::FailRetryInfo(Code::Unavailable, Duration::from_millis(600))])
            .await;
    let mut client = client(&server, false);
    let reply = client.unary(echo("told to wait")).await.expect("the retry succeeds");
    assert_eq!(reply.into_inner().message, "told to wait");
    let calls = server.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let waited = calls[1].at - calls[0].at;
    // At least the delay, and at most a fifth more (the floor's spread) plus slack.
    assert!((Duration::from_millis(600)..Duration::from_millis(1_100)).contains(&waited), "{waited:?}");
    assert_eq!(calls[1].previous_attempts.as_deref(), Some("1"));
}

#[tokio::test]
async fn a_retry_info_longer_than_the_calls_deadline_stops_the_retries_at_once() {
    let server =
        EchoServer::start(vec![Behaviour::FailRetryInfo(Code::Unavailable, Duration::from_secs(30))]).await;
    let mut client = client(&server, false);
    let mut request = tonic::Request::new(echo("in a hurry"));
    request.set_timeout(Duration::from_secs(2));
    let start = Instant::now();
    let status = client.unary(request).await.expect_err("the hint does not fit the deadline");
    assert_eq!(status.code(), Code::Unavailable);
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "gave up at once, not at the deadline: {:?}",
        start.elapsed()
    );
    assert_eq!(server.calls().len(), 1);
}

/// With a pacer, a `RESOURCE_EXHAUSTED` carrying a `RetryInfo` closes the
/// server to every call for that long, as `grpc-retry-pushback-ms` does;
/// without one (A6's default) only the call that was told waits.
#[tokio::test]
async fn with_a_pacer_a_retry_info_holds_every_call_and_without_one_only_its_own() {
    for pacer in [false, true] {
        let server = EchoServer::start(vec![Behaviour::FailRetryInfo(
            Code::ResourceExhausted,
            Duration::from_millis(1_500),
        )])
        .await;
        let builder = RetryLayer::grpc(config()).origin(server.uri()).no_telemetry();
        let builder = if pacer { builder.pacer_per_dependency(Pacer::new) } else { builder };
        let (layer, channel) = (builder.build(), Endpoint::from(server.uri()).connect_lazy());
        let (mut first, mut second) =
            (EchoClient::new(layer.layer(channel.clone())), EchoClient::new(layer.layer(channel)));
        let start = Instant::now();
        let told = tokio::spawn(async move { first.unary(echo("first")).await });
        while server.calls().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Loopback answers in well under this: the RetryInfo is known.
        tokio::time::sleep(Duration::from_millis(100)).await;
        second.unary(echo("second")).await.expect("the second call succeeds");
        let second_at = start.elapsed();
        assert!(told.await.expect("task").is_ok(), "the told call's retry succeeds");
        if pacer {
            assert!(
                (Duration::from_millis(1_450)..Duration::from_millis(2_600)).contains(&second_at),
                "held for the RetryInfo: {second_at:?}"
            );
        } else {
            assert!(second_at < Duration::from_millis(1_000), "held without a pacer: {second_at:?}");
        }
    }
}

/// A `RetryInfo` of zero asks for no wait: the policy's own backoff applies.
#[tokio::test]
async fn a_zero_retry_info_leaves_the_backoff_alone() {
    let server = EchoServer::start(vec![Behaviour::FailRetryInfo(Code::Unavailable, Duration::ZERO)]).await;
    let mut client = client(&server, false);
    client.unary(echo("zero")).await.expect("the retry succeeds");
    let calls = server.calls();
    assert_eq!(calls.len(), 2);
    assert!(calls[1].at - calls[0].at < Duration::from_millis(300), "{:?}", calls[1].at - calls[0].at);
}
