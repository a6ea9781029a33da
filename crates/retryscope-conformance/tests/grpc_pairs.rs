//! A6's transparent retry where it meets hedging and the retry guards, for
//! the tower layer's gRPC mode (the only integration with gRPC), against a raw
//! HTTP/2 server on 127.0.0.1 that refuses streams before processing them
//! (`REFUSED_STREAM`). Wall clock: the hedge delay is real time.

use opentelemetry::trace::SpanKind;
use retryscope::RetryBudget;
use retryscope_test_support::echo::{EchoClient, echo};
use retryscope_test_support::h2_server::{Answer, H2Server};
use retryscope_test_support::telemetry::{Telemetry, attr};
use retryscope_tower::grpc::Grpc;
use retryscope_tower::grpc::GrpcRetry;
use retryscope_tower::prelude::*;
use retryscope_tower::{RetryLayer, RetryService};
use std::time::{Duration, Instant};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tower::Layer;

const REFUSED: Answer = Answer::Reset(h2::Reason::REFUSED_STREAM);

fn client(server: &H2Server, layer: RetryLayer<Grpc>) -> EchoClient<RetryService<Channel, Grpc>> {
    EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()))
}

/// A hedged method (three copies, a second apart) whose first copy the server
/// refuses before processing it: that copy is sent again at once, as its
/// transparent retry, and answers — no waiting for the hedge delay, no hedge
/// spent, one copy by the policy's count, its span telling of the retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedged_copy_the_server_refused_unprocessed_is_sent_again_at_once_not_hedged() {
    let t = Telemetry::install();
    let retry = GrpcRetry::from_service_config(
        r#"{"methodConfig": [{"name": [{"service": "test.Echo"}],
          "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "1s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}"#,
    )
    .expect("valid config");
    let server = H2Server::start(vec![REFUSED]).await;
    let layer = RetryLayer::grpc(retry).origin(server.uri()).meter(&t.meter).build();
    let started = Instant::now();
    let reply = client(&server, layer).unary(echo("x")).await.expect("the transparent retry answers");
    let took = started.elapsed();
    eprintln!("hedged copy refused unprocessed, answered by its transparent retry in {took:?}");
    assert_eq!(reply.into_inner().message, "ok");
    assert!(took < Duration::from_millis(900), "waited for the hedge delay: {took:?}");
    let streams = server.streams();
    assert_eq!(streams.len(), 2, "{streams:?}");
    assert!(streams.iter().all(|s| s.previous_attempts.is_none()), "a copy, not a resend: {streams:?}");

    let copies: Vec<_> = t.spans().into_iter().filter(|s| s.span_kind == SpanKind::Client).collect();
    assert_eq!(copies.len(), 1, "one copy by the policy's count: {copies:#?}");
    assert_eq!(attr(&copies[0], "retryscope.hedge").as_deref(), Some("true"));
    let events: Vec<String> = copies[0].events.iter().map(|e| e.name.to_string()).collect();
    assert!(events.iter().any(|e| e.contains("transparent retry")), "{events:?}");
    assert_eq!(t.counter("retryscope.hedges", &[]), 0, "no hedge was sent");
}

/// `test.Echo` retried on UNAVAILABLE, four attempts, 10 ms apart, with
/// `throttling` (a `retryThrottling` object) if given.
fn retried(throttling: &str) -> GrpcRetry {
    GrpcRetry::from_service_config(&format!(
        r#"{{"methodConfig": [{{"name": [{{"service": "test.Echo"}}],
          "retryPolicy": {{"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
            "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}}}]{throttling}}}"#
    ))
    .expect("valid config")
}

/// Transparent retries are not retries by the guards' count (A6: they do not
/// count against `maxAttempts`, and only an attempt's own failure costs
/// throttling tokens). With `retryThrottling` of 3 tokens (retries stop at
/// 1.5 or less), two calls answered after a refused stream leave the bucket
/// full, so a third call's UNAVAILABLE is still retried; had each refusal
/// cost a token, it would be refused (3 − 2 + 0.2 = 1.2), as the control
/// shows: two calls whose attempts fail by themselves. With a retry budget
/// that allows no retry at all, a refused stream is still sent again, while
/// a real retry is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transparent_retries_spend_neither_the_token_bucket_nor_the_retry_budget() {
    let unavailable = Answer::TrailersOnly(14);
    let server =
        H2Server::start(vec![REFUSED, Answer::Ok("one"), REFUSED, Answer::Ok("two"), unavailable.clone()])
            .await;
    let throttled = retried(r#", "retryThrottling": {"maxTokens": 3, "tokenRatio": 0.1}"#);
    let mut throttled_client =
        client(&server, RetryLayer::grpc(throttled).origin(server.uri()).no_telemetry().build());
    for expected in ["one", "two"] {
        let reply = throttled_client.unary(echo("x")).await.expect("the transparent retry answers");
        assert_eq!(reply.into_inner().message, expected);
    }
    let third = throttled_client.unary(echo("x")).await.expect("UNAVAILABLE, then retried");
    assert_eq!(third.into_inner().message, "ok");
    let previous: Vec<Option<String>> = server.streams().into_iter().map(|s| s.previous_attempts).collect();
    assert_eq!(previous.len(), 6, "{previous:?}");
    assert_eq!(previous[5].as_deref(), Some("1"), "the third call's retry: {previous:?}");

    // The control: two attempts that fail by themselves do drain it, and the
    // second call's retry is refused.
    let control = H2Server::start(vec![unavailable.clone(), Answer::Ok("one"), unavailable.clone()]).await;
    let throttled = retried(r#", "retryThrottling": {"maxTokens": 3, "tokenRatio": 0.1}"#);
    let mut drained =
        client(&control, RetryLayer::grpc(throttled).origin(control.uri()).no_telemetry().build());
    assert_eq!(drained.unary(echo("x")).await.expect("retried").into_inner().message, "one");
    let status = drained.unary(echo("x")).await.expect_err("the retry is throttled");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(control.streams().len(), 3);

    // A budget with nothing for retries: the refused stream is still sent
    // again; an UNAVAILABLE is not retried.
    fn no_retries() -> RetryBudget {
        RetryBudget::builder().ratio(0.0).min_per_second(0).build().expect("valid budget")
    }
    let server = H2Server::start(vec![REFUSED, Answer::Ok("again"), unavailable]).await;
    let layer =
        RetryLayer::grpc(retried("")).origin(server.uri()).budget_per_dependency(no_retries).no_telemetry();
    let mut budgeted = client(&server, layer.build());
    let reply = budgeted.unary(echo("x")).await.expect("the transparent retry answers");
    assert_eq!(reply.into_inner().message, "again");
    let status = budgeted.unary(echo("x")).await.expect_err("the retry is refused by the budget");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(server.streams().len(), 3, "the refused stream twice, the UNAVAILABLE once");
}
