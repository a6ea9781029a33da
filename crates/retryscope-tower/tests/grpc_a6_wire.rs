//! gRFC A6's details over the wire: the backoff restarts at `initialBackoff`
//! after a pushback (a real tonic server), and `grpc-status` values tonic reads
//! as UNKNOWN are not retried as the code they resemble (a raw HTTP/2 server,
//! since tonic never sends them). On tokio's paused clock.

use retryscope_test_support as support;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use retryscope_tower::grpc::Grpc;
use retryscope_tower::grpc::GrpcRetry;
use retryscope_tower::prelude::*;
use retryscope_tower::{RetryLayer, RetryService};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::echo::{Behaviour, EchoClient, EchoServer, echo};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tower::Layer;

/// Five attempts on UNAVAILABLE, 100 ms growing fourfold to 10 s, A6's jitter.
const CONFIG: &str = r#"{"methodConfig": [{"name": [{"service": "test.Echo"}], "retryPolicy": {
    "maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "10s", "backoffMultiplier": 4,
    "retryableStatusCodes": ["unavailable"]}}]}"#;

fn client(uri: http::Uri) -> EchoClient<RetryService<Channel, Grpc>> {
    let retry = GrpcRetry::from_service_config(CONFIG).expect("valid config");
    let layer = RetryLayer::grpc(retry).origin(uri.clone()).no_telemetry().build();
    EchoClient::new(layer.layer(Endpoint::from(uri).connect_lazy()))
}

/// A6: after a pushback, "for subsequent retries, the delay period will be
/// reset to the `initialBackoff` setting". Without the reset the third wait
/// would be 1.6 s ± 20 % (the third step of the curve), with it 100 ms ± 20 %.
#[tokio::test(start_paused = true)]
async fn the_waits_after_a_pushback_restart_at_initial_backoff() {
    let unavailable = |pushback| Behaviour::Fail(Code::Unavailable, pushback);
    for round in 0..5 {
        let server = EchoServer::start(vec![
            unavailable(None),
            unavailable(Some("50")),
            unavailable(None),
            unavailable(None),
        ])
        .await;
        let reply = client(server.uri()).unary(echo("hello")).await.expect("the fifth attempt succeeds");
        assert_eq!(reply.into_inner().message, "hello");
        let at: Vec<_> = server.calls().iter().map(|c| c.at).collect();
        assert_eq!(at.len(), 5);
        let waits: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        let within = |wait: Duration, ms: f64| {
            let ratio = wait.as_secs_f64() * 1e3 / ms;
            (0.8..=1.2 + 1e-6).contains(&ratio)
        };
        assert!(within(waits[0], 100.0), "round {round}: first wait {waits:?}");
        assert!(waits[1] >= Duration::from_millis(50) && waits[1] < Duration::from_millis(55), "{waits:?}");
        // The curve starts again: 100 ms, then 400 ms.
        assert!(within(waits[2], 100.0), "round {round}: after the pushback {waits:?}");
        assert!(within(waits[3], 400.0), "round {round}: {waits:?}");
    }
}

/// A raw HTTP/2 server answering every call Trailers-Only with `grpc-status`
/// set to `status`; counts the calls.
async fn trailers_only(status: &'static str) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let calls = Arc::clone(&counted);
            tokio::spawn(async move {
                let service = service_fn(move |_request: http::Request<hyper::body::Incoming>| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let response = http::Response::builder()
                        .header("content-type", "application/grpc")
                        .header("grpc-status", status)
                        .body(Full::new(Bytes::new()))
                        .expect("valid response");
                    std::future::ready(Ok::<_, Infallible>(response))
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, calls)
}

/// tonic's `Code::from_bytes` reads anything but the exact digits as UNKNOWN,
/// so the layer, configured to retry UNAVAILABLE only, sends each call once.
#[tokio::test(start_paused = true)]
async fn statuses_tonic_reads_as_unknown_are_not_retried() {
    for (value, expected) in [
        (" 14", Code::Unknown),
        ("14 ", Code::Unknown),
        ("+14", Code::Unknown),
        ("014", Code::Unknown),
        ("14", Code::Unavailable),
    ] {
        let (addr, calls) = trailers_only(value).await;
        let uri: http::Uri = format!("http://{addr}").parse().expect("valid uri");
        let status = client(uri).unary(echo("hello")).await.expect_err("the server always fails");
        assert_eq!(status.code(), expected, "{value:?}: {status:?}");
        let sent = calls.load(Ordering::SeqCst);
        if expected == Code::Unavailable {
            assert_eq!(sent, 5, "{value:?}: UNAVAILABLE is retried to maxAttempts");
        } else {
            assert_eq!(sent, 1, "{value:?}: sent {sent} times");
        }
    }
}
