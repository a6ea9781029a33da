//! The layer around a plain hyper service (no axum): a tower `service_fn`
//! reading the request body the layer hands on, served by hyper on 127.0.0.1.

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use retryscope_idempotency::{IdempotencyLayer, MemoryStore, RequestBody};
use support::{send, send_and_lose_the_response};
use tower::{ServiceBuilder, ServiceExt};

async fn serve_hyper(executions: Arc<AtomicUsize>) -> SocketAddr {
    let handler = tower::service_fn(move |request: Request<RequestBody<Incoming>>| {
        let executions = Arc::clone(&executions);
        async move {
            let body = request.into_body().collect().await.map(|body| body.to_bytes()).unwrap_or_default();
            let n = executions.fetch_add(1, Ordering::SeqCst) + 1;
            let mut response = Response::new(Full::new(Bytes::from(format!("order {n}: {}", body.len()))));
            *response.status_mut() = StatusCode::CREATED;
            Ok::<_, Infallible>(response)
        }
    });
    let service = ServiceBuilder::new().layer(IdempotencyLayer::new(MemoryStore::default())).service(handler);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service.clone();
            tokio::spawn(async move {
                let hyper_service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let service = service.clone();
                    async move { service.oneshot(request).await }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), hyper_service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_hyper_service_behind_the_layer_runs_a_lost_post_once() {
    let executions = Arc::new(AtomicUsize::new(0));
    let addr = serve_hyper(Arc::clone(&executions)).await;
    send_and_lose_the_response(addr, "\"h-1\"", "sku=7").await;
    let retry = send(addr, "/orders", Some("\"h-1\""), "sku=7").await;
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (201, "order 1: 5", true));
    assert_eq!(send(addr, "/orders", Some("\"h-1\""), "sku=8").await.status, 422);
    assert_eq!(executions.load(Ordering::SeqCst), 1);
}
