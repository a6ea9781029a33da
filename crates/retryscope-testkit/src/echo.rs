//! The scripted gRPC dependency: a real tonic server on 127.0.0.1 and its
//! client, written by hand (the generated code of a small service, without
//! needing protoc).
//!
//! `test.Echo/Unary` and `test.Echo/Stream` (server streaming) play a script of
//! behaviours, one per call, and record what each call's metadata said.
//! `test.Echo/Watch` (server streaming) sends its headers at once and its
//! first message only after [`WATCH_FIRST_MESSAGE`]; `test.Echo/Chat`
//! (bidirectional) answers each message it receives with `"<message> back"`,
//! and says nothing before the client's first message; `test.Echo/Collect`
//! (client streaming) answers once the client's stream ends, with its
//! messages joined by spaces.
//!
//! ```
//! use retryscope_testkit::echo::{Behaviour, EchoClient, EchoServer, echo};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let server = EchoServer::start(vec![Behaviour::Fail(tonic::Code::Unavailable, Some("250"))]).await;
//! let channel = tonic::transport::Endpoint::from(server.uri()).connect().await.unwrap();
//! let mut client = EchoClient::new(channel);
//! let refused = client.unary(echo("hi")).await.unwrap_err();
//! assert_eq!(refused.code(), tonic::Code::Unavailable);
//! assert_eq!(refused.metadata().get("grpc-retry-pushback-ms").unwrap(), "250");
//! assert_eq!(client.unary(echo("hi")).await.unwrap().into_inner().message, "hi");
//! assert_eq!(server.calls().len(), 2);
//! # }
//! ```

use bytes::Bytes;
use http_body::Body as HttpBody;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::net::TcpListener;
use tokio_stream::Stream;
use tonic::body::Body;
use tonic::codegen::{BoxFuture, StdError};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, IntoRequest, Status};

/// The request of every `test.Echo` method.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoRequest {
    /// What to echo.
    #[prost(string, tag = "1")]
    pub message: String,
    /// Bytes that make the request as large as a test needs (a message too
    /// large to buffer for a retry, say).
    #[prost(bytes = "vec", tag = "2")]
    pub padding: Vec<u8>,
}

/// The reply of every `test.Echo` method.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoReply {
    /// The request's message, as the method words it.
    #[prost(string, tag = "1")]
    pub message: String,
}

/// What the server does with one call.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// Answer OK (unary: one reply; streaming: two replies).
    Ok,
    /// Fail with this code before any message, with an optional
    /// `grpc-retry-pushback-ms`.
    Fail(Code, Option<&'static str>),
    /// Fail with this code before any message, with a `google.rpc.RetryInfo`
    /// of this delay in `grpc-status-details-bin`, as tonic-types' richer
    /// error model writes it.
    FailRetryInfo(Code, std::time::Duration),
    /// Streaming only: one reply, then fail with this code.
    ReplyThenFail(Code),
    /// Streaming only: send the headers, then fail with this code in the
    /// trailers, before any message.
    FailAfterHeaders(Code),
    /// Unary only: answer OK after this long. A call the client cancels first
    /// (its HTTP/2 stream reset, so that the server drops the handler) is
    /// recorded: see [`EchoServer::cancelled`].
    Delay(std::time::Duration),
}

/// How long `test.Echo/Watch` takes to send its first message.
pub const WATCH_FIRST_MESSAGE: std::time::Duration = std::time::Duration::from_millis(1_500);

/// One call as the server saw it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Call {
    /// Which method (`unary`, `/test.Echo/Stream`, …).
    pub path: String,
    /// Its `grpc-previous-rpc-attempts` metadata: retries say how many came before.
    pub previous_attempts: Option<String>,
    /// Its `grpc-timeout` metadata.
    pub timeout: Option<String>,
    /// Its `traceparent` metadata.
    pub traceparent: Option<String>,
    /// Its `content-length` header: tonic sends none.
    pub content_length: Option<String>,
    /// When it arrived, on tokio's clock (paused or not).
    pub at: tokio::time::Instant,
}

#[derive(Default)]
struct State {
    script: Mutex<VecDeque<Behaviour>>,
    calls: Mutex<Vec<Call>>,
    /// The indices (in `calls`) of the delayed calls whose handler was
    /// dropped before it answered.
    cancelled: Mutex<Vec<usize>>,
}

/// The running server; it stops when the test's runtime does.
#[derive(Clone)]
pub struct EchoServer {
    /// Where it listens (127.0.0.1, a free port).
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl EchoServer {
    /// Plays `script`, one behaviour per call, then answers OK.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound.
    pub async fn start(script: Vec<Behaviour>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State {
            script: Mutex::new(script.into()),
            calls: Mutex::default(),
            cancelled: Mutex::default(),
        });
        let service = EchoService { state: Arc::clone(&state) };
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(service, incoming));
        Self { addr, state }
    }

    /// `http://127.0.0.1:PORT`, for a tonic `Endpoint`.
    pub fn uri(&self) -> http::Uri {
        format!("http://{}", self.addr).parse().expect("valid uri")
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().expect("lock").clone()
    }

    /// The calls (their indices in [`calls`](Self::calls)) whose
    /// [`Behaviour::Delay`] handler the server dropped before it answered:
    /// the client reset their stream.
    pub fn cancelled(&self) -> Vec<usize> {
        self.state.cancelled.lock().expect("lock").clone()
    }

    /// Replaces the rest of the script.
    pub fn script(&self, script: Vec<Behaviour>) {
        *self.state.script.lock().expect("lock") = script.into();
    }
}

#[derive(Clone)]
struct EchoService {
    state: Arc<State>,
}

impl State {
    fn record(&self, path: &str, metadata: &MetadataMap) -> Behaviour {
        self.record_indexed(path, metadata).1
    }

    /// Records the call; returns its index in `calls` and what to do.
    fn record_indexed(&self, path: &str, metadata: &MetadataMap) -> (usize, Behaviour) {
        let text = |key: &str| metadata.get(key).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let mut calls = self.calls.lock().expect("lock");
        calls.push(Call {
            path: path.to_owned(),
            previous_attempts: text("grpc-previous-rpc-attempts"),
            timeout: text("grpc-timeout"),
            traceparent: text("traceparent"),
            content_length: text("content-length"),
            at: tokio::time::Instant::now(),
        });
        let index = calls.len() - 1;
        (index, self.script.lock().expect("lock").pop_front().unwrap_or(Behaviour::Ok))
    }
}

fn failure(code: Code, pushback: Option<&'static str>) -> Status {
    let mut metadata = MetadataMap::new();
    if let Some(ms) = pushback {
        metadata.insert("grpc-retry-pushback-ms", MetadataValue::from_static(ms));
    }
    Status::with_metadata(code, "scripted failure", metadata)
}

fn retry_info(code: Code, delay: std::time::Duration) -> Status {
    use tonic_types::{ErrorDetails, StatusExt};
    Status::with_error_details(code, "scripted failure", ErrorDetails::with_retry_info(Some(delay)))
}

struct Unary(Arc<State>);

/// Records its call as cancelled if dropped while still armed.
struct CancelGuard {
    state: Arc<State>,
    index: usize,
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            self.state.cancelled.lock().expect("lock").push(self.index);
        }
    }
}

impl tonic::server::UnaryService<EchoRequest> for Unary {
    type Response = EchoReply;
    type Future = BoxFuture<tonic::Response<EchoReply>, Status>;

    fn call(&mut self, request: tonic::Request<EchoRequest>) -> Self::Future {
        let (index, behaviour) = self.0.record_indexed("unary", request.metadata());
        let state = Arc::clone(&self.0);
        let message = request.into_inner().message;
        Box::pin(async move {
            match behaviour {
                Behaviour::Ok => Ok(tonic::Response::new(EchoReply { message })),
                Behaviour::Fail(code, pushback) => Err(failure(code, pushback)),
                Behaviour::FailRetryInfo(code, delay) => Err(retry_info(code, delay)),
                Behaviour::ReplyThenFail(code) | Behaviour::FailAfterHeaders(code) => {
                    Err(failure(code, None))
                }
                Behaviour::Delay(delay) => {
                    let mut guard = CancelGuard { state, index, armed: true };
                    tokio::time::sleep(delay).await;
                    guard.armed = false;
                    Ok(tonic::Response::new(EchoReply { message }))
                }
            }
        })
    }
}

type ReplyStream = Pin<Box<dyn Stream<Item = Result<EchoReply, Status>> + Send>>;

struct ServerStream(Arc<State>);

impl tonic::server::ServerStreamingService<EchoRequest> for ServerStream {
    type Response = EchoReply;
    type ResponseStream = ReplyStream;
    type Future = BoxFuture<tonic::Response<ReplyStream>, Status>;

    fn call(&mut self, request: tonic::Request<EchoRequest>) -> Self::Future {
        let behaviour = self.0.record("/test.Echo/Stream", request.metadata());
        let message = request.into_inner().message;
        let reply = |n: u32| Ok(EchoReply { message: format!("{message} {n}") });
        let items: Vec<Result<EchoReply, Status>> = match behaviour {
            Behaviour::Ok | Behaviour::Delay(_) => vec![reply(1), reply(2)],
            // The handler fails: a Trailers-Only answer, the status in the headers.
            Behaviour::Fail(code, pushback) => {
                return Box::pin(async move { Err(failure(code, pushback)) });
            }
            Behaviour::FailRetryInfo(code, delay) => {
                return Box::pin(async move { Err(retry_info(code, delay)) });
            }
            // Headers go out first, so the status travels in the trailers.
            Behaviour::FailAfterHeaders(code) => vec![Err(failure(code, None))],
            Behaviour::ReplyThenFail(code) => vec![reply(1), Err(failure(code, None))],
        };
        Box::pin(async move { Ok(tonic::Response::new(Box::pin(tokio_stream::iter(items)) as ReplyStream)) })
    }
}

struct Watch(Arc<State>);

impl tonic::server::ServerStreamingService<EchoRequest> for Watch {
    type Response = EchoReply;
    type ResponseStream = ReplyStream;
    type Future = BoxFuture<tonic::Response<ReplyStream>, Status>;

    fn call(&mut self, request: tonic::Request<EchoRequest>) -> Self::Future {
        self.0.record("/test.Echo/Watch", request.metadata());
        let message = request.into_inner().message;
        let (sender, receiver) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            tokio::time::sleep(WATCH_FIRST_MESSAGE).await;
            let _ = sender.send(Ok(EchoReply { message: format!("{message} changed") })).await;
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
        Box::pin(async move { Ok(tonic::Response::new(Box::pin(stream) as ReplyStream)) })
    }
}

struct Collect(Arc<State>);

impl tonic::server::ClientStreamingService<EchoRequest> for Collect {
    type Response = EchoReply;
    type Future = BoxFuture<tonic::Response<EchoReply>, Status>;

    fn call(&mut self, request: tonic::Request<tonic::Streaming<EchoRequest>>) -> Self::Future {
        self.0.record("/test.Echo/Collect", request.metadata());
        let mut inbound = request.into_inner();
        Box::pin(async move {
            let mut words = Vec::new();
            while let Some(request) = inbound.message().await? {
                words.push(request.message);
            }
            Ok(tonic::Response::new(EchoReply { message: words.join(" ") }))
        })
    }
}

struct Chat(Arc<State>);

impl tonic::server::StreamingService<EchoRequest> for Chat {
    type Response = EchoReply;
    type ResponseStream = ReplyStream;
    type Future = BoxFuture<tonic::Response<ReplyStream>, Status>;

    fn call(&mut self, request: tonic::Request<tonic::Streaming<EchoRequest>>) -> Self::Future {
        self.0.record("/test.Echo/Chat", request.metadata());
        let inbound = request.into_inner();
        let replies = tokio_stream::StreamExt::map(inbound, |next| {
            next.map(|request| EchoReply { message: format!("{} back", request.message) })
        });
        Box::pin(async move { Ok(tonic::Response::new(Box::pin(replies) as ReplyStream)) })
    }
}

impl tower_service::Service<http::Request<Body>> for EchoService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let state = Arc::clone(&self.state);
        Box::pin(async move {
            let mut grpc =
                tonic::server::Grpc::new(tonic_prost::ProstCodec::<EchoReply, EchoRequest>::default());
            Ok(match request.uri().path() {
                "/test.Echo/Unary" | "/helloworld.Greeter/SayHello" => {
                    grpc.unary(Unary(state), request).await
                }
                "/test.Echo/Stream" => grpc.server_streaming(ServerStream(state), request).await,
                "/test.Echo/Watch" => grpc.server_streaming(Watch(state), request).await,
                "/test.Echo/Chat" => grpc.streaming(Chat(state), request).await,
                "/test.Echo/Collect" => grpc.client_streaming(Collect(state), request).await,
                _ => Status::unimplemented("no such method").into_http(),
            })
        })
    }
}

/// The client of `test.Echo`, over any gRPC service (a channel, or the retry
/// layer around one).
pub struct EchoClient<T> {
    inner: tonic::client::Grpc<T>,
}

impl<T> EchoClient<T>
where
    T: tonic::client::GrpcService<Body>,
    T::Error: Into<StdError>,
    T::ResponseBody: HttpBody<Data = Bytes> + Send + 'static,
    <T::ResponseBody as HttpBody>::Error: Into<StdError> + Send,
{
    /// A client over `inner`.
    pub fn new(inner: T) -> Self {
        Self { inner: tonic::client::Grpc::new(inner) }
    }

    async fn ready(&mut self) -> Result<(), Status> {
        self.inner.ready().await.map_err(|e| Status::unknown(format!("service was not ready: {}", e.into())))
    }

    /// `test.Echo/Unary`: the script's next behaviour.
    pub async fn unary(
        &mut self,
        request: impl IntoRequest<EchoRequest>,
    ) -> Result<tonic::Response<EchoReply>, Status> {
        self.ready().await?;
        let path = http::uri::PathAndQuery::from_static("/test.Echo/Unary");
        self.inner.unary(request.into_request(), path, tonic_prost::ProstCodec::default()).await
    }

    /// `helloworld.Greeter/SayHello`, answered like `Unary`: the README's service.
    pub async fn say_hello(
        &mut self,
        request: impl IntoRequest<EchoRequest>,
    ) -> Result<tonic::Response<EchoReply>, Status> {
        self.ready().await?;
        let path = http::uri::PathAndQuery::from_static("/helloworld.Greeter/SayHello");
        self.inner.unary(request.into_request(), path, tonic_prost::ProstCodec::default()).await
    }

    /// `test.Echo/Stream` (server streaming): the script's next behaviour.
    pub async fn stream(
        &mut self,
        request: impl IntoRequest<EchoRequest>,
    ) -> Result<tonic::Response<tonic::codec::Streaming<EchoReply>>, Status> {
        self.ready().await?;
        let path = http::uri::PathAndQuery::from_static("/test.Echo/Stream");
        self.inner.server_streaming(request.into_request(), path, tonic_prost::ProstCodec::default()).await
    }
}

impl<T> EchoClient<T>
where
    T: tonic::client::GrpcService<Body>,
    T::Error: Into<StdError>,
    T::ResponseBody: HttpBody<Data = Bytes> + Send + 'static,
    <T::ResponseBody as HttpBody>::Error: Into<StdError> + Send,
{
    /// `test.Echo/Watch`: the headers at once, the first message after
    /// [`WATCH_FIRST_MESSAGE`].
    pub async fn watch(
        &mut self,
        request: impl IntoRequest<EchoRequest>,
    ) -> Result<tonic::Response<tonic::codec::Streaming<EchoReply>>, Status> {
        self.ready().await?;
        let path = http::uri::PathAndQuery::from_static("/test.Echo/Watch");
        self.inner.server_streaming(request.into_request(), path, tonic_prost::ProstCodec::default()).await
    }

    /// `test.Echo/Collect`: one reply, once the messages end.
    pub async fn collect(
        &mut self,
        messages: impl tonic::IntoStreamingRequest<Message = EchoRequest>,
    ) -> Result<tonic::Response<EchoReply>, Status> {
        self.ready().await?;
        let path = http::uri::PathAndQuery::from_static("/test.Echo/Collect");
        self.inner
            .client_streaming(messages.into_streaming_request(), path, tonic_prost::ProstCodec::default())
            .await
    }

    /// `test.Echo/Chat`: one reply per message sent.
    pub async fn chat(
        &mut self,
        messages: impl tonic::IntoStreamingRequest<Message = EchoRequest>,
    ) -> Result<tonic::Response<tonic::codec::Streaming<EchoReply>>, Status> {
        self.ready().await?;
        let path = http::uri::PathAndQuery::from_static("/test.Echo/Chat");
        self.inner
            .streaming(messages.into_streaming_request(), path, tonic_prost::ProstCodec::default())
            .await
    }
}

/// A request with `message`.
pub fn echo(message: &str) -> EchoRequest {
    EchoRequest { message: message.to_owned(), padding: Vec::new() }
}
