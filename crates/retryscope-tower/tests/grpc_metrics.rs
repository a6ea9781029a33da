//! gRPC's own metrics (gRFC A66 per-attempt and per-call, gRFC A96 retries)
//! for calls through the layer to a real tonic server on 127.0.0.1, read from
//! an in-memory OpenTelemetry SDK: names, units, attributes and values.

use retryscope_test_support as support;

use retryscope::{Jitter, Policy};
use retryscope_tower::grpc::Grpc;
use retryscope_tower::grpc::GrpcRetry;
use retryscope_tower::prelude::*;
use retryscope_tower::{RetryLayer, RetryService};
use std::collections::BTreeMap;
use std::time::Duration;
use support::echo::{Behaviour, EchoClient, EchoServer, echo};
use support::telemetry::{HistogramPoint, Telemetry};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tower::Layer;

/// A66's latency buckets.
const LATENCY: [f64; 41] = [
    0.0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008,
    0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4,
    0.5, 0.65, 0.8, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0,
];
/// A66's size buckets.
const SIZES: [f64; 14] = [
    0.0,
    1024.0,
    2048.0,
    4096.0,
    16384.0,
    65536.0,
    262144.0,
    1048576.0,
    4194304.0,
    16777216.0,
    67108864.0,
    268435456.0,
    1073741824.0,
    4294967296.0,
];

/// 10 ms then 20 ms, exactly: four attempts on UNAVAILABLE.
fn policy() -> Policy {
    Policy::builder()
        .max_attempts(4)
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(100))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid policy")
}

fn client(server: &EchoServer, telemetry: &Telemetry) -> EchoClient<RetryService<Channel, Grpc>> {
    let layer = RetryLayer::grpc(GrpcRetry::new(policy()))
        .origin(server.uri())
        .meter(&telemetry.meter)
        .grpc_metrics()
        .build();
    EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()))
}

fn labels(server: &EchoServer, status: Option<&str>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        ("grpc.method".to_owned(), "test.Echo/Unary".to_owned()),
        ("grpc.target".to_owned(), format!("http://{}", server.addr)),
    ]);
    if let Some(status) = status {
        labels.insert("grpc.status".to_owned(), status.to_owned());
    }
    labels
}

/// The one point of `name` with `labels`, after checking the unit and buckets
/// of every point.
fn point(
    telemetry: &Telemetry,
    name: &str,
    unit: &str,
    bounds: &[f64],
    labels: &BTreeMap<String, String>,
) -> HistogramPoint {
    let points = telemetry.histogram(name);
    for p in &points {
        assert_eq!(p.unit, unit, "{name}");
        assert_eq!(p.bounds, bounds, "{name}");
    }
    let mut matching = points.into_iter().filter(|p| &p.attributes == labels);
    let found = matching.next().unwrap_or_else(|| panic!("{name}: no point with {labels:?}"));
    assert!(matching.next().is_none(), "{name}: two points with {labels:?}");
    found
}

#[tokio::test(start_paused = true)]
async fn grpc_metrics_are_recorded_only_when_asked() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None)]).await;
    let layer =
        RetryLayer::grpc(GrpcRetry::new(policy())).origin(server.uri()).meter(&telemetry.meter).build();
    let mut client = EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()));
    client.unary(echo("hello")).await.expect("the second attempt succeeds");
    assert_eq!(server.calls().len(), 2);

    // retryscope's own metrics, and none of gRPC's.
    assert_eq!(telemetry.counter("retryscope.requests", &[]), 1);
    assert_eq!(telemetry.counter("retryscope.retries", &[]), 1);
    for name in ["grpc.client.attempt.started", "grpc.client.attempt.duration", "grpc.client.call.duration"] {
        assert_eq!(telemetry.unit(name), None, "{name} is recorded without .grpc_metrics()");
    }
}

#[tokio::test(start_paused = true)]
async fn a_three_attempt_call_records_a66_and_a96_metrics() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::Unavailable, None); 2]).await;
    let mut client = client(&server, &telemetry);
    let reply = client.unary(echo("hello")).await.expect("the third attempt succeeds");
    assert_eq!(reply.into_inner().message, "hello");
    assert_eq!(server.calls().len(), 3);

    // A66 per attempt. `EchoRequest { message: "hello" }` and the reply are 7
    // bytes each once encoded, without the 5 bytes of gRPC framing.
    assert_eq!(telemetry.unit("grpc.client.attempt.started").as_deref(), Some("{attempt}"));
    let started = telemetry.series("grpc.client.attempt.started", "grpc.method");
    assert_eq!(started.1, 1, "one series: method and target, no status");
    let unavailable = labels(&server, Some("UNAVAILABLE"));
    let ok = labels(&server, Some("OK"));
    assert_eq!(telemetry.counter("grpc.client.attempt.started", &[("grpc.method", "test.Echo/Unary")]), 3);
    let duration = |labels| point(&telemetry, "grpc.client.attempt.duration", "s", &LATENCY, labels);
    assert_eq!(duration(&unavailable).count, 2);
    assert_eq!(duration(&ok).count, 1);
    let sent = |labels| {
        point(&telemetry, "grpc.client.attempt.sent_total_compressed_message_size", "By", &SIZES, labels)
    };
    assert_eq!((sent(&unavailable).count, sent(&unavailable).sum), (2, 14.0));
    assert_eq!((sent(&ok).count, sent(&ok).sum), (1, 7.0));
    let rcvd = |labels| {
        point(&telemetry, "grpc.client.attempt.rcvd_total_compressed_message_size", "By", &SIZES, labels)
    };
    assert_eq!((rcvd(&unavailable).count, rcvd(&unavailable).sum), (2, 0.0));
    assert_eq!((rcvd(&ok).count, rcvd(&ok).sum), (1, 7.0));

    // A66 per call: one call, OK.
    let call = point(&telemetry, "grpc.client.call.duration", "s", &LATENCY, &ok);
    assert_eq!(call.count, 1);
    assert!(call.sum >= 0.030, "the call includes both waits: {}", call.sum);
    assert_eq!(telemetry.histogram("grpc.client.call.duration").len(), 1);

    // A96: two retries, no transparent retry (0 is not reported), 30 ms of delay.
    let call_labels = labels(&server, None);
    let retries =
        point(&telemetry, "grpc.client.call.retries", "{retry}", &[1.0, 2.0, 3.0, 4.0, 5.0], &call_labels);
    assert_eq!((retries.count, retries.sum), (1, 2.0));
    assert!(telemetry.histogram("grpc.client.call.transparent_retries").is_empty());
    let delay = point(&telemetry, "grpc.client.call.retry_delay", "s", &LATENCY, &call_labels);
    assert_eq!(delay.count, 1);
    assert!((0.030..0.5).contains(&delay.sum), "10 ms + 20 ms of backoff: {}", delay.sum);
    assert!(delay.sum <= call.sum, "{} > {}", delay.sum, call.sum);
}

#[tokio::test(start_paused = true)]
async fn a_call_without_retries_reports_no_retry_count_and_a_failure_its_status() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::Fail(Code::InvalidArgument, None)]).await;
    let mut client = client(&server, &telemetry);
    let status = client.unary(echo("hello")).await.expect_err("INVALID_ARGUMENT is not retried");
    assert_eq!(status.code(), Code::InvalidArgument);

    let invalid = labels(&server, Some("INVALID_ARGUMENT"));
    assert_eq!(point(&telemetry, "grpc.client.attempt.duration", "s", &LATENCY, &invalid).count, 1);
    assert_eq!(point(&telemetry, "grpc.client.call.duration", "s", &LATENCY, &invalid).count, 1);
    assert!(telemetry.histogram("grpc.client.call.retries").is_empty(), "A96: 0 retries is not reported");
    let delay = point(&telemetry, "grpc.client.call.retry_delay", "s", &LATENCY, &labels(&server, None));
    assert_eq!((delay.count, delay.sum), (1, 0.0));
}

/// A server stream's call ends when its trailers reach the caller, and counts
/// every message it received.
#[tokio::test(start_paused = true)]
async fn a_stream_ends_its_call_at_the_trailers_with_every_message_counted() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(vec![Behaviour::ReplyThenFail(Code::Aborted)]).await;
    let mut client = client(&server, &telemetry);
    let mut stream = client.stream(echo("hi")).await.expect("the stream starts").into_inner();
    // Not ended while the caller has not read the status.
    assert!(telemetry.histogram("grpc.client.call.duration").is_empty());
    let first = stream.message().await.expect("a reply").expect("one message");
    assert_eq!(first.message, "hi 1");
    let status = stream.message().await.expect_err("then ABORTED");
    assert_eq!(status.code(), Code::Aborted);

    let aborted = BTreeMap::from([
        ("grpc.method".to_owned(), "test.Echo/Stream".to_owned()),
        ("grpc.target".to_owned(), format!("http://{}", server.addr)),
        ("grpc.status".to_owned(), "ABORTED".to_owned()),
    ]);
    assert_eq!(point(&telemetry, "grpc.client.call.duration", "s", &LATENCY, &aborted).count, 1);
    // "hi 1" encoded: 6 bytes.
    let rcvd =
        point(&telemetry, "grpc.client.attempt.rcvd_total_compressed_message_size", "By", &SIZES, &aborted);
    assert_eq!((rcvd.count, rcvd.sum), (1, 6.0));
}
