//! The service: tower's ready-service dance, handing each request to its call
//! ([`call::run`](crate::call::run)).

use crate::call;
use crate::error::BoxError;
use crate::http_call::Http;
use crate::protocol::LayerProtocol;
use crate::replay::ReplayBody;
use crate::response::ResponseBody;
use crate::settings::Settings;
use http::{Request, Response};
use http_body::Body;
use retryscope_http::RetryOptions;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// A tower service whose requests are retried: made by [`RetryLayer`](crate::RetryLayer),
/// its calls speaking the layer's protocol `P`.
#[derive(Clone)]
pub struct RetryService<S, P = Http> {
    inner: S,
    settings: Arc<Settings>,
    protocol: P,
}

impl<S, P> RetryService<S, P> {
    pub(crate) fn new(inner: S, settings: Arc<Settings>, protocol: P) -> Self {
        Self { inner, settings, protocol }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: fmt::Debug, P> fmt::Debug for RetryService<S, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryService").field("inner", &self.inner).finish_non_exhaustive()
    }
}

/// The future of a [`RetryService`] call. Dropping it cancels the running
/// attempt (or the wait before the next one); no attempt starts after.
pub struct ResponseFuture<T> {
    inner: Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>,
}

impl<T> Future for ResponseFuture<T> {
    type Output = Result<T, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<T> fmt::Debug for ResponseFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S, P, B, ResB> Service<Request<B>> for RetryService<S, P>
where
    P: LayerProtocol,
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: ReplayBody,
    B::Error: Into<BoxError>,
    ResB: Body + Send + 'static,
    ResB::Data: Send + From<bytes::Bytes>,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = BoxError;
    type Future = ResponseFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The service made ready by `poll_ready` serves the first attempt; a clone
        // takes its place for the caller's next request (tower's usual dance).
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let settings = Arc::clone(&self.settings);
        let (parts, body) = request.into_parts();
        let options = parts.extensions.get::<RetryOptions>().cloned().unwrap_or_default();
        // The layer's protocol, fixed by its type, plans the call.
        let planned = self.protocol.plan(&settings, &parts, &options);
        // Made in its box: `Box::pin(future)` makes the future on the stack,
        // then copies the whole of it (some 3.5 kB for a gRPC call) into the
        // box; a box allocated first is written in place.
        let future =
            Box::write(Box::new_uninit(), call::run(settings, ready, (parts, body, options), planned));
        ResponseFuture { inner: Box::into_pin(future) }
    }
}
