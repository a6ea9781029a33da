//! A real axum service behind the layer on 127.0.0.1, a plain HTTP/1 client,
//! and a client that loses the response.
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use retryscope_idempotency::{IdempotencyLayer, IdempotencyStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Counts how many times the handler ran, per order.
#[derive(Clone, Default)]
pub struct Executions(Arc<AtomicUsize>);

impl Executions {
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Clone)]
struct App {
    executions: Executions,
    work: Duration,
}

/// `POST /orders`: counts, waits `work`, answers 201 with a Location and an
/// order number that differs on every execution (so a replay is visible).
async fn create(State(app): State<App>, body: Bytes) -> (StatusCode, HeaderMap, String) {
    let n = app.executions.0.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(app.work).await;
    let mut headers = HeaderMap::new();
    headers.insert("location", format!("/orders/{n}").parse().expect("a header value"));
    headers.insert("x-request-id", format!("r{n}").parse().expect("a header value"));
    (StatusCode::CREATED, headers, format!("order {n}: {}", String::from_utf8_lossy(&body)))
}

/// `POST /fail/{status}`: counts, answers that status.
async fn fail(State(app): State<App>, Path(status): Path<u16>) -> StatusCode {
    app.executions.0.fetch_add(1, Ordering::SeqCst);
    StatusCode::from_u16(status).expect("a status")
}

/// `POST /big/{bytes}`: counts, answers that many bytes.
async fn big(State(app): State<App>, Path(bytes): Path<usize>) -> Vec<u8> {
    app.executions.0.fetch_add(1, Ordering::SeqCst);
    vec![b'x'; bytes]
}

/// `POST /encoded`: counts, answers bytes said to be gzip-encoded and in French
/// (a compression layer inside the idempotency layer answers so).
async fn encoded(State(app): State<App>) -> (HeaderMap, Vec<u8>) {
    let n = app.executions.0.fetch_add(1, Ordering::SeqCst) + 1;
    let mut headers = HeaderMap::new();
    headers.insert("content-encoding", "gzip".parse().expect("a header value"));
    headers.insert("content-language", "fr".parse().expect("a header value"));
    (headers, format!("encoded {n}").into_bytes())
}

pub fn app<St: IdempotencyStore>(layer: IdempotencyLayer<St>, work: Duration) -> (Router, Executions) {
    let executions = Executions::default();
    let state = App { executions: executions.clone(), work };
    let router = Router::new()
        .route("/orders", post(create).get(|| async { "list" }))
        .route("/fail/{status}", post(fail))
        .route("/big/{bytes}", post(big))
        .route("/encoded", post(encoded))
        .with_state(state)
        .layer(layer);
    (router, executions)
}

/// Serves `router` on a free loopback port.
pub async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, router).await.expect("the server runs") });
    addr
}

#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn replayed(&self) -> bool {
        self.headers.get("idempotency-replayed").is_some_and(|v| v == "true")
    }
}

/// One request on a fresh connection; `key` is the raw header value.
pub async fn send(addr: SocketAddr, path: &str, key: Option<&str>, body: &str) -> Answer {
    send_with(
        addr,
        http::Method::POST,
        path,
        key.map(|k| vec![k.as_bytes().to_vec()]).unwrap_or_default(),
        body,
    )
    .await
}

/// One request with any number of raw key header values.
pub async fn send_with(
    addr: SocketAddr,
    method: http::Method,
    path: &str,
    keys: Vec<Vec<u8>>,
    body: &str,
) -> Answer {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("an HTTP/1 handshake");
    tokio::spawn(connection);
    let mut request = http::Request::builder().method(method).uri(path).header("host", addr.to_string());
    for key in keys {
        request =
            request.header("idempotency-key", http::HeaderValue::from_bytes(&key).expect("a header value"));
    }
    let request = request.body(Full::new(Bytes::from(body.to_owned()))).expect("a request");
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .expect("an answer within 10 s")
        .expect("a response");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("a body").to_bytes();
    Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// Sends a keyed POST, reads only the first bytes of the response (the server
/// has executed and answered) and drops the connection: the caller never sees
/// the answer.
pub async fn send_and_lose_the_response(addr: SocketAddr, key: &str, body: &str) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "POST /orders HTTP/1.1\r\nhost: {addr}\r\nidempotency-key: {key}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("the request is sent");
    let mut first = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut first))
        .await
        .expect("the server answers within 10 s")
        .expect("the first bytes");
    assert_eq!(&first, b"HTTP");
    drop(stream);
}

/// Sends a keyed POST and hangs up at once, before any answer (hyper then
/// drops the request's future).
pub async fn send_and_hang_up(addr: SocketAddr, key: &str, body: &str) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "POST /orders HTTP/1.1\r\nhost: {addr}\r\nidempotency-key: {key}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("the request is sent");
    drop(stream);
}
