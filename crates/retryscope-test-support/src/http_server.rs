//! A real HTTP/1.1 server (hyper) on 127.0.0.1 that plays a script of statuses
//! and records every request it reads, with the paused clock's time.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub headers: http::HeaderMap,
    pub body_len: usize,
    pub at: tokio::time::Instant,
}

/// One scripted answer: a status and its extra headers.
pub type Reply = (u16, Vec<(&'static str, &'static str)>);

#[derive(Default)]
struct State {
    script: Mutex<VecDeque<Reply>>,
    seen: Mutex<Vec<Seen>>,
}

/// The running server; it stops when the test's runtime does.
#[derive(Clone)]
pub struct HttpServer {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl HttpServer {
    /// Answers with `statuses` in turn, then 200.
    pub async fn start(statuses: &[u16]) -> Self {
        Self::start_with(statuses.iter().map(|s| (*s, Vec::new())).collect()).await
    }

    /// Answers with each status and its headers in turn, then 200.
    pub async fn start_with(script: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State { script: Mutex::new(script.into()), seen: Mutex::default() });
        let server = Self { addr, state: Arc::clone(&state) };
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = Arc::clone(&state);
                tokio::spawn(async move {
                    let service = service_fn(move |request| answer(Arc::clone(&state), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().expect("lock").clone()
    }
}

async fn answer(state: Arc<State>, request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let body_len = body.collect().await.map(|b| b.to_bytes().len()).unwrap_or(0);
    state.seen.lock().expect("lock").push(Seen {
        method: parts.method.to_string(),
        headers: parts.headers,
        body_len,
        at: tokio::time::Instant::now(),
    });
    let (status, headers) = state.script.lock().expect("lock").pop_front().unwrap_or((200, Vec::new()));
    let mut response = Response::new(Full::new(Bytes::from_static(b"done")));
    *response.status_mut() = StatusCode::from_u16(status).expect("valid status");
    for (name, value) in headers {
        response.headers_mut().insert(name, http::HeaderValue::from_static(value));
    }
    Ok(response)
}
