//! A real HTTP/1.1 server (hyper) on 127.0.0.1 whose answers' bodies the test
//! shapes: whole JSON documents, streams the test feeds chunk by chunk (or
//! never), and bodies that break off halfway.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

type Body = BoxBody<Bytes, std::io::Error>;

/// One scripted answer, always status 200.
pub enum Answer {
    /// `application/json`, the whole body at once, with its `content-length`.
    Json(&'static str),
    /// This content type and these chunks, without a `content-length`
    /// (chunked on the wire).
    Chunked(&'static str, Vec<Bytes>),
    /// This content type, then whatever the test sends on the channel, chunk
    /// by chunk, as it sends it; the body ends when the sender is dropped,
    /// and never while the test holds it and sends nothing.
    Fed(&'static str, mpsc::Receiver<Bytes>),
    /// This content type and this first chunk; then the connection breaks
    /// off before the body's end.
    BrokenAfter(&'static str, Bytes),
}

/// A channel for [`Answer::Fed`]: the sender stays with the test.
pub fn feed() -> (mpsc::Sender<Bytes>, mpsc::Receiver<Bytes>) {
    mpsc::channel(4)
}

#[derive(Default)]
struct State {
    script: Mutex<VecDeque<Answer>>,
    methods: Mutex<Vec<String>>,
}

/// The running server; it stops when the test's runtime does.
#[derive(Clone)]
pub struct BodyServer {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl BodyServer {
    /// Answers with `script` in turn, then `200 done`.
    pub async fn start(script: Vec<Answer>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State { script: Mutex::new(script.into()), methods: Mutex::default() });
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

    /// The method of every request received, in order.
    pub fn methods(&self) -> Vec<String> {
        self.state.methods.lock().expect("lock").clone()
    }
}

async fn answer(state: Arc<State>, request: Request<Incoming>) -> Result<Response<Body>, std::io::Error> {
    let (parts, body) = request.into_parts();
    let _ = body.collect().await;
    state.methods.lock().expect("lock").push(parts.method.to_string());
    let next = state.script.lock().expect("lock").pop_front();
    let (content_type, body): (&str, Body) = match next {
        None => ("text/plain", Full::new(Bytes::from_static(b"done")).map_err(|e| match e {}).boxed()),
        Some(Answer::Json(json)) => (
            "application/json",
            Full::new(Bytes::from_static(json.as_bytes())).map_err(|e| match e {}).boxed(),
        ),
        Some(Answer::Chunked(content_type, chunks)) => {
            let frames = tokio_stream::iter(chunks.into_iter().map(|c| Ok(Frame::data(c))));
            (content_type, BodyExt::boxed(StreamBody::new(frames)))
        }
        Some(Answer::Fed(content_type, receiver)) => {
            let frames = ReceiverStream::new(receiver).map(|c| Ok(Frame::data(c)));
            (content_type, BodyExt::boxed(StreamBody::new(frames)))
        }
        Some(Answer::BrokenAfter(content_type, first)) => {
            let broken = std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "broken off");
            let frames = tokio_stream::iter([Ok(Frame::data(first)), Err(broken)]);
            (content_type, BodyExt::boxed(StreamBody::new(frames)))
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    Ok(response)
}
