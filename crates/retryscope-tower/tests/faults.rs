//! The fault layer where the shared conformance suite does not reach it: below
//! the gRPC retry layer on a tonic channel, and on the server side, in front
//! of a real hyper server on 127.0.0.1. Injected faults are retried as real
//! ones and counted exactly as often as they were injected.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use retryscope::Policy;
use retryscope_test_support::echo::{EchoClient, EchoServer, echo};
use retryscope_test_support::telemetry::Telemetry;
use retryscope_tower::RetryLayer;
use retryscope_tower::fault::{FAULT_KIND_HEADER, FaultLayer, Faults};
use retryscope_tower::grpc::GrpcRetry;
use retryscope_tower::prelude::*;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tonic::transport::Endpoint;
use tower::Layer;

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(4)
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(100))
        .build()
        .expect("valid policy")
}

#[tokio::test(start_paused = true)]
async fn injected_grpc_statuses_are_retried_and_counted_exactly_as_often_as_injected() {
    let telemetry = Telemetry::install();
    let server = EchoServer::start(Vec::new()).await;
    let faults = Faults::builder()
        .spec("grpc=14@30".parse().expect("a valid spec"))
        .seed(5)
        .meter(telemetry.meter.clone())
        .enabled()
        .build();
    let channel = Endpoint::from(server.uri()).connect_lazy();
    let retry =
        RetryLayer::grpc(GrpcRetry::new(policy())).origin(server.uri()).meter(&telemetry.meter).build();
    let mut client =
        EchoClient::new(retry.layer(FaultLayer::new(faults).origin(server.uri()).layer(channel)));
    let mut answered = 0;
    for _ in 0..100 {
        answered += usize::from(client.unary(echo("hi")).await.is_ok());
    }
    let dependency = server.addr.to_string();
    let injected = telemetry.faults_injected(&dependency, Some("grpc_status"));
    let attempts = telemetry.attempt_spans(&dependency).len() as u64;
    assert!(injected > 0, "some UNAVAILABLE injected");
    assert_eq!(
        attempts,
        server.calls().len() as u64 + injected,
        "every attempt reached the server or met a fault"
    );
    assert_eq!(telemetry.fault_marks(&dependency), vec!["grpc_status".to_owned(); injected as usize]);
    assert_eq!(telemetry.retries(&dependency), attempts - 100, "each injected UNAVAILABLE retried");
    // Four attempts at 30 %: a call fails only when all four are injected (0.8 %).
    assert!(answered >= 97, "{answered} of 100 answered");
}

/// A hyper server on 127.0.0.1 whose service answers 200 `ok` behind
/// `FaultLayer::server(faults)`; it counts the requests that reach the service.
/// Its tasks are local (the caller runs it in a `LocalSet`): spawned with
/// `tokio::spawn`, the layer's future over a `service_fn` trips a known limit
/// of rustc's higher-ranked inference for async blocks ("implementation of
/// `From` is not general enough").
async fn faulty_server(faults: Faults) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let reached = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&reached);
    let inner = tower::service_fn(move |_: http::Request<hyper::body::Incoming>| {
        counted.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok")))) }
    });
    let service = FaultLayer::server(faults).expect("no refusal rule").layer(inner);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("an address");
    tokio::task::spawn_local(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service.clone();
            tokio::task::spawn_local(async move {
                let hyper_service = hyper::service::service_fn(move |request| {
                    let mut service = service.clone();
                    async move {
                        let ready: Result<(), retryscope_tower::BoxError> =
                            std::future::poll_fn(|cx| tower::Service::poll_ready(&mut service, cx)).await;
                        match ready {
                            Ok(()) => tower::Service::call(&mut service, request).await,
                            Err(e) => Err(e),
                        }
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, hyper_service).await;
            });
        }
    });
    (addr, reached)
}

#[tokio::test]
async fn the_server_layer_answers_injected_503s_and_counts_each_once() {
    tokio::task::LocalSet::new().run_until(server_side()).await;
}

async fn server_side() {
    let telemetry = Telemetry::install();
    let faults = Faults::builder()
        .spec("503@40".parse().expect("a valid spec"))
        .seed(11)
        .header_control()
        .meter(telemetry.meter.clone())
        .build();
    let (addr, reached) = faulty_server(faults.clone()).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let get = |header: Option<&str>| {
        let mut request = http::Request::get(format!("http://{addr}/inventory"));
        if let Some(kind) = header {
            request = request.header(FAULT_KIND_HEADER, kind);
        }
        client.request(request.body(Full::default()).expect("a request"))
    };

    // Off: nothing injected, not even when a header asks.
    for header in [None, Some("503")] {
        let response = get(header).await.expect("an answer");
        assert_eq!(response.status(), 200);
    }
    assert_eq!(reached.load(Ordering::Relaxed), 2);

    faults.enable();
    let mut refused = 0;
    for _ in 0..200 {
        let response = get(None).await.expect("an answer");
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.expect("a body").to_bytes();
        match status {
            503 => refused += 1,
            200 => assert_eq!(body, "ok"),
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(
        reached.load(Ordering::Relaxed),
        2 + 200 - refused,
        "an injected 503 never reaches the service"
    );
    assert!((50..=110).contains(&refused), "{refused} of 200 at 40 %");
    let dependency = addr.to_string(); // the request's Host
    assert_eq!(telemetry.faults_injected(&dependency, Some("status")), refused as u64);
    assert_eq!(telemetry.faults_injected(&dependency, None), refused as u64, "no other kind");
}
