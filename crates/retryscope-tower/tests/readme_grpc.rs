//! The README's tonic quickstart, literally, against a real collector:
//! `init_otlp()` with the standard environment, the service config, the layer
//! on a tonic channel, one call that a loopback tonic server answers
//! UNAVAILABLE twice, then OK. Nothing here installs a propagator, a meter or a
//! subscriber: what the wire and the collector show comes from the documented
//! path alone.
//!
//! It proves that the server saw three attempts with `grpc-previous-rpc-attempts`
//! 1 and 2 on the retries, that every attempt's `traceparent` names the CLIENT
//! span rotel printed for it, and that those spans carry the RPC attributes. A
//! test binary of its own with a plain `main`: it sets the process environment
//! (as a user's shell would) before any thread starts.

#![allow(clippy::unwrap_used)]

use retryscope_test_support as support;
use retryscope_test_support::rotel;

use support::echo::{Behaviour, Call, EchoClient, EchoServer, echo};
use tonic::Code;

fn main() {
    let Some(binary) = rotel::binary() else { return };
    let collector = rotel::Collector::start(&binary, "readme-grpc");
    // SAFETY: no other thread of this process exists yet, so nothing reads the
    // environment while it changes.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{}", collector.http));
        std::env::set_var("OTEL_SERVICE_NAME", "readme-grpc-test");
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (calls, port) = runtime.block_on(readme());

    let printed = collector
        .wait_for(&["-> rpc.grpc.status_code: Int(0)"])
        .unwrap_or_else(|missing| panic!("{missing}"));
    let previous: Vec<Option<&str>> = calls.iter().map(|c| c.previous_attempts.as_deref()).collect();
    assert_eq!(previous, [None, Some("1"), Some("2")]);
    // Each span's block ends where the next span or the next resource's output
    // (the metrics that follow the last span) begins.
    let spans: Vec<&str> = printed
        .split("Span #")
        .skip(1)
        .map(|block| block.split("\nResource").next().unwrap_or(block))
        .filter(|b| b.contains("Kind           : SPAN_KIND_CLIENT"))
        .collect();
    for (attempt, call) in (1..).zip(&calls) {
        let traceparent =
            call.traceparent.as_deref().unwrap_or_else(|| panic!("attempt {attempt}: no traceparent"));
        let span_id = traceparent.split('-').nth(2).unwrap();
        let span = spans
            .iter()
            .find(|s| s.lines().any(|l| l.trim() == format!("ID             : {span_id}")))
            .unwrap_or_else(|| panic!("{traceparent} names no client span:\n{printed}"));
        let code = if attempt < 3 { 14 } else { 0 };
        for line in [
            "Name           : helloworld.Greeter/SayHello".to_owned(),
            format!("-> retryscope.attempt: Int({attempt})"),
            "-> rpc.system: Str(grpc)".to_owned(),
            "-> rpc.service: Str(helloworld.Greeter)".to_owned(),
            "-> rpc.method: Str(SayHello)".to_owned(),
            "-> server.address: Str(127.0.0.1)".to_owned(),
            format!("-> server.port: Int({port})"),
            format!("-> rpc.grpc.status_code: Int({code})"),
        ] {
            assert!(span.contains(&line), "attempt {attempt}: no `{line}` in\n{span}");
        }
        assert_eq!(span.contains("-> error.type: Str(UNAVAILABLE)"), code == 14, "{span}");
        if attempt == 2 {
            println!("attempt span as rotel printed it:\nSpan #{span}");
        }
    }
    println!("readme_grpc: 1 passed, 0 failed");
}

/// The README, line for line (the server's port instead of 50051, the test's
/// client instead of a generated `GreeterClient`), then one call.
async fn readme() -> (Vec<Call>, u16) {
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None); 2]).await;

    use retryscope_tower::{RetryLayer, grpc::GrpcRetry};

    let telemetry = retryscope_otel::init_otlp().unwrap(); // before building the layer
    let retry = GrpcRetry::from_service_config(
        r#"{
  "methodConfig": [{
    "name": [{"service": "helloworld.Greeter"}],
    "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
  }],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
}"#,
    )
    .unwrap();
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr)).unwrap();
    let channel = tower::ServiceBuilder::new()
        .layer(RetryLayer::grpc(retry).origin(endpoint.uri().clone()).build())
        .service(endpoint.connect_lazy());
    let mut client = EchoClient::new(channel);

    let reply = client.say_hello(echo("readme")).await.unwrap();
    assert_eq!(reply.into_inner().message, "readme");
    telemetry.shutdown().unwrap();
    (server.calls(), server.addr.port())
}
