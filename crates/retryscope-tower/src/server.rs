//! The server side: which incoming requests are retries of their callers, for
//! axum, tonic and any other tower-based server.

use http::{HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use retryscope_otel::{EXHAUSTED_HEADER, IncomingRequests, Upstream};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

/// Names the route of a request for `http.route`: a template such as
/// `/orders/{id}`, never the raw path of an HTTP request (unbounded).
type RouteOf = Arc<dyn Fn(&http::request::Parts) -> Option<String> + Send + Sync>;

/// Counts incoming requests by the attempt their caller says they are
/// (`retryscope.server.requests`), puts that attempt on the current span, and
/// lets the clients the handler calls retry at one layer only.
///
/// Handlers run under [`Upstream::scope`]: a reqwest middleware or
/// [`RetryLayer`](crate::RetryLayer) configured with `retry_at_one_layer` makes
/// a single attempt downstream while serving a request that is itself a retry.
/// When such a client retried and gave up, the server's error response (a
/// 5xx, a 429, or a gRPC error in the headers) carries
/// [`retry-exhausted`](retryscope_otel::EXHAUSTED_HEADER), and a caller retrying
/// at one layer does not retry it.
///
/// ```
/// use retryscope_tower::IncomingLayer;
///
/// /// What a framework puts in the request's extensions once it has routed it;
/// /// with axum, `axum::extract::MatchedPath`.
/// #[derive(Clone)]
/// struct MatchedRoute(&'static str);
///
/// let layer = IncomingLayer::new()
///     .route(|parts| parts.extensions.get::<MatchedRoute>().map(|route| route.0.to_owned()));
/// // axum: `Router::new().route("/orders/{id}", get(order)).layer(layer)`;
/// // tonic: `Server::builder().layer(IncomingLayer::new())`.
/// # let _ = layer;
/// ```
///
/// gRPC requests (`content-type: application/grpc…`) are reported with their
/// path, `/package.Service/Method`, as the route; other requests with the
/// route the [`route`](Self::route) function gives, or none.
#[derive(Clone)]
pub struct IncomingLayer {
    incoming: IncomingRequests,
    route: Option<RouteOf>,
}

impl IncomingLayer {
    /// Records through the global meter provider (install it first).
    pub fn new() -> Self {
        Self::with(IncomingRequests::global())
    }

    /// Records with `incoming` (its meter and attempt header).
    pub fn with(incoming: IncomingRequests) -> Self {
        Self { incoming, route: None }
    }

    /// Names the route of each HTTP request, e.g. from the framework's matched
    /// route template.
    #[must_use]
    pub fn route(
        mut self,
        route: impl Fn(&http::request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.route = Some(Arc::new(route));
        self
    }
}

impl Default for IncomingLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for IncomingLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IncomingLayer").field("route", &self.route.is_some()).finish_non_exhaustive()
    }
}

impl<S> Layer<S> for IncomingLayer {
    type Service = IncomingService<S>;

    fn layer(&self, inner: S) -> IncomingService<S> {
        IncomingService { inner, layer: self.clone() }
    }
}

/// A server's service wrapped by [`IncomingLayer`].
#[derive(Clone, Debug)]
pub struct IncomingService<S> {
    inner: S,
    layer: IncomingLayer,
}

impl<S, B, ResB> Service<Request<B>> for IncomingService<S>
where
    S: Service<Request<B>, Response = Response<ResB>>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = IncomingFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let route = if is_grpc(&parts) {
            Some(parts.uri.path().to_owned())
        } else {
            self.layer.route.as_ref().and_then(|route| route(&parts))
        };
        let attempt = self.layer.incoming.observe(&parts.headers, route.as_deref());
        let upstream = Upstream::new(attempt);
        let inner = upstream.clone().scope(self.inner.call(Request::from_parts(parts, body)));
        IncomingFuture { inner, upstream }
    }
}

fn is_grpc(parts: &http::request::Parts) -> bool {
    parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

pin_project! {
    /// The response future of [`IncomingService`].
    pub struct IncomingFuture<F> {
        #[pin]
        inner: opentelemetry::context::WithContext<F>,
        upstream: Upstream,
    }
}

impl<F: fmt::Debug> fmt::Debug for IncomingFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IncomingFuture").field("upstream", &self.upstream).finish_non_exhaustive()
    }
}

impl<F, ResB, E> Future for IncomingFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = Result<Response<ResB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut result = std::task::ready!(this.inner.poll(cx));
        if let (Ok(response), Some(attempts)) = (&mut result, this.upstream.exhausted_below())
            && is_error(response)
        {
            response.headers_mut().insert(EXHAUSTED_HEADER, HeaderValue::from(attempts));
        }
        Poll::Ready(result)
    }
}

/// An answer a caller would retry: overload, a server error, or a gRPC error
/// status sent in the headers (a trailers-only response).
fn is_error<B>(response: &Response<B>) -> bool {
    let status = response.status();
    let grpc_error = response.headers().get("grpc-status").is_some_and(|code| code.as_bytes() != b"0");
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() || grpc_error
}
