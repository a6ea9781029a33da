//! A gRPC server's pushback, to every call of a channel, when the layer is
//! given a pacer (it has none by default: A6's pushback concerns the call that
//! got it). Against a real tonic server on 127.0.0.1, on the wall clock: the
//! claims are about real waits (bounds generous).

use retryscope_test_support as support;

use retryscope::Pacer;
use retryscope_tower::grpc::Grpc;
use retryscope_tower::grpc::{GrpcRetry, NOT_RETRIED, NOT_RETRIED_RATE_LIMITED};
use retryscope_tower::prelude::*;
use retryscope_tower::{RetryLayer, RetryService};
use std::time::Duration;
use support::echo::{Behaviour, EchoClient, EchoServer, echo};
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tower::Layer;

/// Up to two attempts on `RESOURCE_EXHAUSTED`, 10 ms apart.
fn config() -> GrpcRetry {
    GrpcRetry::from_service_config(
        r#"{"methodConfig": [{"name": [{"service": "test.Echo"}],
            "retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
              "backoffMultiplier": 2, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}"#,
    )
    .expect("valid config")
}

/// A client through a gRPC layer.
type Client = EchoClient<RetryService<Channel, Grpc>>;

/// Two clients on one channel through one layer, as two tasks of a service
/// share them: the same guards behind both.
fn clients(server: &EchoServer, pacer: Option<fn() -> Pacer>) -> (Client, Client) {
    let builder = RetryLayer::grpc(config()).origin(server.uri()).no_telemetry();
    let builder = match pacer {
        Some(make) => builder.pacer_per_dependency(make),
        None => builder,
    };
    let (layer, channel) = (builder.build(), Endpoint::from(server.uri()).connect_lazy());
    (EchoClient::new(layer.layer(channel.clone())), EchoClient::new(layer.layer(channel)))
}

/// One call is pushed back 2 s; with a pacer, a second call made meanwhile
/// waits for the pushback too; without one (the default, A6) it goes at once.
#[tokio::test]
async fn a_pushback_holds_every_call_with_a_pacer_and_only_its_own_call_without() {
    for pacer in [None, Some(Pacer::new as fn() -> Pacer)] {
        let server = EchoServer::start(vec![Behaviour::Fail(Code::ResourceExhausted, Some("2000"))]).await;
        let (mut first, mut second) = clients(&server, pacer);
        let start = Instant::now();
        let pushed = tokio::spawn(async move { first.unary(echo("first")).await });
        // The first call's answer has come back: its pushback is known.
        while server.calls().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Loopback answers in well under this.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let reply = second.unary(echo("second")).await.expect("the second call succeeds");
        assert_eq!(reply.into_inner().message, "second");
        let second_at = start.elapsed();
        assert!(pushed.await.expect("task").is_ok(), "the first call's retry succeeds");
        match pacer {
            None => assert!(second_at < Duration::from_millis(1_000), "held without a pacer: {second_at:?}"),
            // Held for the pushback, and at most a fifth of it more (and
            // some slack for a slow machine).
            Some(_) => assert!(
                (Duration::from_millis(1_950)..=Duration::from_millis(3_000)).contains(&second_at),
                "{second_at:?}"
            ),
        }
    }
}

/// With a pacer, a call whose deadline is shorter than a pushback in force is
/// not sent: it fails at once with `UNAVAILABLE`, saying why.
#[tokio::test]
async fn a_call_that_cannot_wait_out_the_pushback_is_not_sent() {
    let server = EchoServer::start(vec![Behaviour::Fail(Code::ResourceExhausted, Some("-1"))]).await;
    let (mut client, mut other) = clients(&server, Some(Pacer::new));
    // Sent once: a negative pushback says "do not retry".
    let status = client.unary(echo("told")).await.expect_err("RESOURCE_EXHAUSTED");
    assert_eq!(status.code(), Code::ResourceExhausted);
    server.script(vec![Behaviour::Fail(Code::ResourceExhausted, Some("60000"))]);
    let _pushed = tokio::spawn(async move { other.unary(echo("pushed back a minute")).await });
    while server.calls().len() < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut request = tonic::Request::new(echo("in a hurry"));
    request.set_timeout(Duration::from_secs(1));
    let start = Instant::now();
    let status = client.unary(request).await.expect_err("not sent");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        status.metadata().get(NOT_RETRIED).map(|v| v.as_bytes()),
        Some(NOT_RETRIED_RATE_LIMITED.as_bytes())
    );
    assert!(start.elapsed() < Duration::from_millis(200), "not at once: {:?}", start.elapsed());
    assert_eq!(server.calls().len(), 2, "the hurried call reached the server");
}
