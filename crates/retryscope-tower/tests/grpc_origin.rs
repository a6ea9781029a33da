//! Which server a gRPC call is reported and guarded as: a tonic channel sends
//! only the path, so the gRPC builder offers `build` only once it has the
//! channel's origin (`build` without one does not compile: see the
//! `GrpcRetryLayerBuilder` docs), and no call says `unknown`. Two real tonic
//! servers on 127.0.0.1, on tokio's paused clock.

use retryscope_test_support as support;

use opentelemetry_sdk::trace::SpanData;
use retryscope::Policy;
use retryscope_tower::RetryLayer;
use retryscope_tower::grpc::GrpcRetry;
use retryscope_tower::prelude::*;
use std::collections::BTreeSet;
use std::time::Duration;
use support::echo::{Behaviour, EchoClient, EchoServer, echo};
use support::telemetry::{Telemetry, attr};
use tonic::Code;
use tonic::transport::Endpoint;
use tower::Layer;

fn policy() -> Policy {
    Policy::builder().max_attempts(3).base_delay(Duration::from_millis(10)).build().expect("valid policy")
}

/// The attempt spans that went to `server`, by the port they name.
fn spans_to(spans: &[SpanData], server: &EchoServer) -> Vec<SpanData> {
    let port = server.addr.port().to_string();
    spans.iter().filter(|s| attr(s, "server.port").as_deref() == Some(port.as_str())).cloned().collect()
}

#[tokio::test(start_paused = true)]
async fn each_channel_s_calls_name_its_own_server_and_none_is_unknown() {
    let telemetry = Telemetry::install();
    let first = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None)]).await;
    let second = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None)]).await;
    for server in [&first, &second] {
        // What a user writes: the endpoint's own URI is the layer's origin.
        let endpoint = Endpoint::from(server.uri());
        let layer = RetryLayer::grpc(GrpcRetry::new(policy()))
            .origin(endpoint.uri().clone())
            .meter(&telemetry.meter)
            .build();
        let mut client = EchoClient::new(layer.layer(endpoint.connect_lazy()));
        client.unary(echo("hello")).await.expect("the retry succeeds");
        assert_eq!(server.calls().len(), 2);
    }

    let spans: Vec<SpanData> = telemetry
        .spans()
        .into_iter()
        .filter(|s| s.span_kind == opentelemetry::trace::SpanKind::Client)
        .collect();
    assert_eq!(spans.len(), 4, "{spans:#?}");
    for server in [&first, &second] {
        let to = spans_to(&spans, server);
        assert_eq!(to.len(), 2, "two attempts to {}: {spans:#?}", server.addr);
        let dependency = server.addr.to_string();
        for span in &to {
            assert_eq!(attr(span, "server.address").as_deref(), Some("127.0.0.1"));
            assert_eq!(attr(span, "retryscope.dependency").as_deref(), Some(dependency.as_str()));
        }
        let of = [("retryscope.dependency", dependency.as_str())];
        assert_eq!(telemetry.counter("retryscope.requests", &of), 1, "{dependency}");
        assert_eq!(telemetry.counter("retryscope.retries", &of), 1, "{dependency}");
    }
    let (dependencies, _) = telemetry.series("retryscope.requests", "retryscope.dependency");
    let expected: BTreeSet<String> = [first.addr.to_string(), second.addr.to_string()].into();
    assert_eq!(dependencies, expected, "one dependency per server, and no `unknown`");
}
