//! gRPC hedging (gRFC A6 `hedgingPolicy`) against a real tonic server on
//! 127.0.0.1, on the wall clock: what is claimed is about real time (a copy
//! after its delay, another at once), so every bound is generous.

use retryscope_test_support as support;

use retryscope_tower::grpc::Grpc;
use retryscope_tower::grpc::{GrpcRetry, NOT_RETRIED, NOT_RETRIED_THROTTLED};
use retryscope_tower::prelude::*;
use retryscope_tower::{RetryLayer, RetryService};
use std::time::{Duration, Instant};
use support::echo::{Behaviour, EchoClient, EchoServer, echo};
use support::telemetry::{Telemetry, attr};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tower::Layer;

/// grpc-java's hedging example, literally
/// (`examples/src/main/resources/io/grpc/examples/hedging/hedging_service_config.json`).
const GRPC_JAVA_EXAMPLE: &str = r#"{
  "methodConfig": [
    {
      "name": [
        {
          "service": "helloworld.Greeter",
          "method": "SayHello"
        }
      ],

      "hedgingPolicy": {
        "maxAttempts": 3,
        "hedgingDelay": "1s"
      }
    }
  ],

  "retryThrottling": {
    "maxTokens": 10,
    "tokenRatio": 0.1
  }
}"#;

/// gRFC A6's second hedging example ("issues four RPCs simultaneously"), for
/// `test.Echo`.
const A6_SIMULTANEOUS: &str = r#"{"methodConfig": [{"name": [{"service": "test.Echo"}],
  "hedgingPolicy": {
    "maxAttempts": 4,
    "hedgingDelay": "0s",
    "nonFatalStatusCodes": [
      "UNAVAILABLE",
      "INTERNAL",
      "ABORTED"
    ]
  }
}]}"#;

/// `test.Echo` hedged: `copies` copies `delay` apart, non-fatal on UNAVAILABLE.
fn hedged(copies: u32, delay: &str) -> GrpcRetry {
    GrpcRetry::from_service_config(&format!(
        r#"{{"methodConfig": [{{"name": [{{"service": "test.Echo"}}],
          "hedgingPolicy": {{"maxAttempts": {copies}, "hedgingDelay": "{delay}", "nonFatalStatusCodes": ["UNAVAILABLE"]}}}}]}}"#
    ))
    .expect("valid config")
}

fn client(
    server: &EchoServer,
    telemetry: &Telemetry,
    retry: GrpcRetry,
) -> EchoClient<RetryService<Channel, Grpc>> {
    let layer = RetryLayer::grpc(retry).origin(server.uri()).meter(&telemetry.meter).build();
    EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()))
}

/// Waits (up to 5 s) until the server has seen `n` cancelled calls.
async fn cancelled(server: &EchoServer, n: usize) -> Vec<usize> {
    let until = Instant::now() + Duration::from_secs(5);
    while server.cancelled().len() < n && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut cancelled = server.cancelled();
    cancelled.sort_unstable();
    cancelled
}

fn previous_attempts(server: &EchoServer) -> Vec<Option<String>> {
    let mut previous: Vec<Option<String>> = server.calls().into_iter().map(|c| c.previous_attempts).collect();
    previous.sort();
    previous
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_javas_hedging_example_sends_a_second_copy_after_a_second_and_cancels_the_first() {
    let telemetry = Telemetry::install();
    let retry = GrpcRetry::from_service_config(GRPC_JAVA_EXAMPLE).expect("grpc-java's example is valid");
    let hedge = retry.hedging_for("/helloworld.Greeter/SayHello").expect("hedged");
    assert_eq!(hedge.max_copies(), 3);
    // The first copy stalls; the second answers at once.
    let server = EchoServer::start(vec![Behaviour::Delay(Duration::from_secs(30))]).await;
    let mut client = client(&server, &telemetry, retry);

    let started = Instant::now();
    let reply = client.say_hello(echo("hello")).await.expect("the second copy answers");
    let took = started.elapsed();
    eprintln!("hedged call answered by its second copy in {took:?} (hedgingDelay 1s)");
    assert_eq!(reply.into_inner().message, "hello");
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(5), "{took:?}");

    let calls = server.calls();
    assert_eq!(calls.len(), 2, "no third copy once the second answered: {calls:?}");
    assert_eq!(previous_attempts(&server), [None, Some("1".to_owned())]);
    // The server saw the first copy's stream reset: tonic dropped its handler.
    assert_eq!(cancelled(&server, 1).await, [0]);

    // Every copy is an attempt span, marked as a hedge.
    let spans: Vec<_> = telemetry
        .spans()
        .into_iter()
        .filter(|s| s.span_kind == opentelemetry::trace::SpanKind::Client)
        .collect();
    assert_eq!(spans.len(), 2, "{spans:#?}");
    for span in &spans {
        assert_eq!(span.name, "helloworld.Greeter/SayHello");
        assert_eq!(attr(span, "retryscope.hedge").as_deref(), Some("true"), "{span:#?}");
        assert_eq!(attr(span, "rpc.method").as_deref(), Some("SayHello"));
    }
    let mut outcomes: Vec<(Option<String>, Option<String>)> =
        spans.iter().map(|s| (attr(s, "retryscope.attempt"), attr(s, "retryscope.hedge.outcome"))).collect();
    outcomes.sort();
    let expected = [("1", "cancelled"), ("2", "won")].map(|(a, o)| (Some(a.to_owned()), Some(o.to_owned())));
    assert_eq!(outcomes, expected);
    // The cancelled copy was no failure: its span carries no error.
    let first = spans.iter().find(|s| attr(s, "retryscope.attempt").as_deref() == Some("1")).expect("copy 1");
    assert_eq!(attr(first, "error.type"), None, "{first:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a6s_simultaneous_example_sends_four_copies_at_once_each_with_its_previous_attempts() {
    let telemetry = Telemetry::install();
    let retry = GrpcRetry::from_service_config(A6_SIMULTANEOUS).expect("A6's example is valid");
    let server = EchoServer::start(vec![Behaviour::Delay(Duration::from_secs(30)); 3]).await;
    let mut client = client(&server, &telemetry, retry);

    let started = Instant::now();
    client.unary(echo("hello")).await.expect("the fourth copy answers");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());

    assert_eq!(server.calls().len(), 4);
    // Absent on the first copy (A6: "it will not be present on the first
    // RPC"), then the number of copies sent before.
    let expected = [None, Some("1"), Some("2"), Some("3")].map(|v| v.map(str::to_owned));
    assert_eq!(previous_attempts(&server), expected);
    assert_eq!(cancelled(&server, 3).await.len(), 3, "the three stalled copies are cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_fatal_status_sends_the_next_copy_at_once() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None)]).await;
    // A delay far longer than the test may take: only the non-fatal status
    // can send the second copy.
    let mut client = client(&server, &telemetry, hedged(3, "60s"));

    let started = Instant::now();
    client.unary(echo("hello")).await.expect("the second copy answers");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert_eq!(previous_attempts(&server), [None, Some("1".to_owned())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_status_ends_the_call_and_cancels_the_copies_in_flight() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![
        Behaviour::Delay(Duration::from_secs(30)),
        Behaviour::Fail(Code::InvalidArgument, None),
    ])
    .await;
    let mut client = client(&server, &telemetry, hedged(3, "0.2s"));

    let status = client.unary(echo("hello")).await.expect_err("INVALID_ARGUMENT is fatal");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_eq!(cancelled(&server, 1).await, [0]);
    // No third copy after the call ended.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.calls().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushback_that_says_stop_sends_no_further_copy_and_the_one_in_flight_answers() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![
        Behaviour::Delay(Duration::from_millis(800)),
        Behaviour::Fail(Code::Unavailable, Some("-1")),
    ])
    .await;
    let mut client = client(&server, &telemetry, hedged(3, "0.2s"));

    let reply = client.unary(echo("hello")).await.expect("the first copy still answers");
    assert_eq!(reply.into_inner().message, "hello");
    // The third copy was due at 0.4 s at the latest; the pushback stopped it.
    assert_eq!(server.calls().len(), 2, "{:?}", server.calls());
    assert!(server.cancelled().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushback_with_a_wait_sends_the_next_copy_after_that_wait() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, Some("300"))]).await;
    // Neither the 60 s delay nor "at once": the server's 300 ms.
    let mut client = client(&server, &telemetry, hedged(3, "60s"));

    client.unary(echo("hello")).await.expect("the second copy answers");
    let calls = server.calls();
    assert_eq!(calls.len(), 2);
    let gap = calls[1].at - calls[0].at;
    assert!(gap >= Duration::from_millis(290) && gap < Duration::from_secs(10), "{gap:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushback_past_the_policys_limit_sends_no_further_copy_and_the_call_fails_at_once() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, Some("600000"))]).await;
    // Ten minutes, past the 60 s a call may wait on a server: "not any time
    // soon". No copy waits on it; the call fails with the server's status.
    let mut client = client(&server, &telemetry, hedged(3, "60s"));

    let status = tokio::time::timeout(Duration::from_secs(2), client.unary(echo("hello")))
        .await
        .expect("the call ends at once, not after the pushback")
        .expect_err("the only copy failed");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(server.calls().len(), 1, "{:?}", server.calls());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_throttling_holds_the_hedges_of_a_dead_dependency() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None); 100]).await;
    let retry = hedged(3, "0.05s").throttling(10, 0.1).expect("valid throttling");
    let mut client = client(&server, &telemetry, retry);

    let mut copies = Vec::new();
    for _ in 0..10 {
        let before = server.calls().len();
        let status = client.unary(echo("hello")).await.expect_err("the dependency is down");
        assert_eq!(status.code(), Code::Unavailable);
        copies.push(server.calls().len() - before);
    }
    // Ten tokens, half of them the threshold: every failed copy takes one,
    // so a handful of hedges go out, then each call sends its first copy only.
    let hedges: usize = copies.iter().map(|c| c - 1).sum();
    eprintln!("copies per call under a dead dependency: {copies:?}");
    assert!(hedges > 0 && hedges <= 5, "{copies:?}");
    assert!(copies[5..].iter().all(|&c| c == 1), "{copies:?}");
    // The caller is told why the call was not hedged further.
    let status = client.unary(echo("hello")).await.expect_err("still down");
    let why = status.metadata().get(NOT_RETRIED).and_then(|v| v.to_str().ok());
    assert_eq!(why, Some(NOT_RETRIED_THROTTLED), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_given_its_own_policy_is_retried_not_hedged() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Delay(Duration::from_millis(600))]).await;
    let mut client = client(&server, &telemetry, hedged(3, "0.1s"));

    let mut request = tonic::Request::new(echo("hello"));
    request.extensions_mut().insert(retryscope_tower::RetryOptions::new().policy(support::quick_policy()));
    client.unary(request).await.expect("the one attempt answers");
    assert_eq!(server.calls().len(), 1);
}

/// The "Hedging over gRPC" service config of docs/guide/hedging.md, as written there.
const README_CONFIG: &str = r#"{"methodConfig": [{"name": [{"service": "helloworld.Greeter", "method": "SayHello"}],
                   "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "1s"}}],
 "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_hedging_config_hedges_and_grpc_metrics_count_the_hedge() {
    let telemetry = Telemetry::install();
    let retry = GrpcRetry::from_service_config(README_CONFIG).expect("the guide's config is valid");
    let server = EchoServer::start(vec![Behaviour::Delay(Duration::from_secs(30))]).await;
    let layer = RetryLayer::grpc(retry).origin(server.uri()).meter(&telemetry.meter).grpc_metrics().build();
    let mut client = EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()));

    client.say_hello(echo("hello")).await.expect("the second copy answers");
    assert_eq!(server.calls().len(), 2);
    assert_eq!(cancelled(&server, 1).await, [0]);

    // A96: one hedge, no retry; A66: two attempts, the loser CANCELLED.
    let hedges = telemetry.histogram("grpc.client.call.hedges");
    assert_eq!(hedges.iter().map(|p| (p.count, p.sum)).collect::<Vec<_>>(), [(1, 1.0)]);
    assert!(telemetry.histogram("grpc.client.call.retries").is_empty());
    let method = ("grpc.method", "helloworld.Greeter/SayHello");
    assert_eq!(telemetry.counter("grpc.client.attempt.started", &[method]), 2);
    let cancelled_attempts = [method, ("grpc.status", "CANCELLED")];
    assert_eq!(telemetry.histogram_count("grpc.client.attempt.duration", &cancelled_attempts), 1);
    let answered = [method, ("grpc.status", "OK")];
    assert_eq!(telemetry.histogram_count("grpc.client.attempt.duration", &answered), 1);
    assert_eq!(telemetry.histogram_count("grpc.client.call.duration", &answered), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stream_that_cannot_be_sent_again_is_sent_once_not_hedged() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(Vec::new()).await;
    let mut client = client(&server, &telemetry, hedged(3, "0.05s"));

    // The messages come later than the hedging delay: the body is a live
    // stream, which no copy could send again (A6 commits such a call).
    let (sender, receiver) = tokio::sync::mpsc::channel(2);
    let feeder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for word in ["one", "two"] {
            sender.send(echo(word)).await.expect("the call is listening");
        }
    });
    let reply = client
        .collect(tokio_stream::wrappers::ReceiverStream::new(receiver))
        .await
        .expect("the one attempt answers");
    assert_eq!(reply.into_inner().message, "one two");
    feeder.await.expect("fed");
    assert_eq!(server.calls().len(), 1, "{:?}", server.calls());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_commits_at_its_response_headers_and_is_never_hedged_after() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(Vec::new()).await;
    let mut client = client(&server, &telemetry, hedged(3, "0.2s"));

    // `Watch` sends its headers at once and its first message only after
    // 1.5 s: the headers commit the call (A6), so no copy follows.
    let mut stream = client.watch(echo("config")).await.expect("the headers arrive").into_inner();
    let first = stream.message().await.expect("a message").expect("not the end");
    assert_eq!(first.message, "config changed");
    assert_eq!(server.calls().len(), 1, "{:?}", server.calls());
}
