//! One attempt on the wire: a fresh readiness check, then the request with
//! the attempt span's W3C context.

use crate::error::BoxError;
use http::{Request, Response};
use std::future::{Future, poll_fn};
use tower_service::Service;
use tracing::Span;

/// A fresh readiness check before every send: a retry must not bypass the
/// inner service's backpressure (a buffer, a concurrency limit).
pub(crate) async fn ready<S, B>(service: &mut S) -> Result<(), BoxError>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
{
    poll_fn(|cx| service.poll_ready(cx)).await.map_err(Into::into)
}

/// One attempt on the wire, once the service is [`ready`]: the W3C context of
/// the attempt span (`span`, the current one), and the call. Not an `async
/// fn`: its future holds only the inner service's, not the request a second
/// time (it is moved many times with the attempt's).
pub(crate) fn send<S, B, ResB>(
    service: &mut S,
    mut request: Request<B>,
    span: &Span,
) -> impl Future<Output = Result<Response<ResB>, BoxError>> + use<S, B, ResB>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
{
    // A span no subscriber took has no context to propagate.
    if !span.is_disabled() {
        retryscope_otel::inject_span_context(span, request.headers_mut());
    }
    let call = service.call(request);
    async move { call.await.map_err(Into::into) }
}
