//! What a gRPC layer adds to every layer's settings: its service config, the
//! methods it has called, and gRPC's own metrics.

use super::GrpcRetry;
use super::call::plan;
use super::methods::Methods;
use super::metrics::GrpcMetrics;
use crate::call::run;
use crate::error::BoxError;
use crate::replay::ReplayBody;
use crate::response::ResponseBody;
use crate::service::{Begun, ResponseFuture, RetryService};
use http::{Request, Response, Uri};
use http_body::Body;
use opentelemetry::metrics::Meter;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;

/// The protocol of a layer that retries gRPC calls as its service config
/// says (A6): a [`RetryLayer`](crate::RetryLayer)`<Grpc>`, made by
/// [`RetryLayer::grpc`](crate::RetryLayer::grpc). Cloned with its layer's
/// services: one reference count.
#[derive(Clone)]
pub struct Grpc(Arc<Layer>);

/// What every call of one gRPC layer shares.
struct Layer {
    retry: GrpcRetry,
    /// The methods the layer has called, with their settings.
    methods: Methods,
    /// gRPC's own metrics (gRFC A66, A96), when the layer records them.
    metrics: Option<GrpcMetrics>,
}

impl Grpc {
    /// `retry`'s protocol, recording gRPC's own metrics on `meter` when
    /// given one (the channel's `origin` is their `grpc.target`).
    pub(crate) fn new(retry: GrpcRetry, meter: Option<&Meter>, origin: Option<&Uri>) -> Self {
        let metrics = meter.map(|meter| GrpcMetrics::new(meter, origin));
        Self(Arc::new(Layer { retry, methods: Methods::default(), metrics }))
    }
}

/// A gRPC layer's service: each call planned with gRPC's semantics.
impl<S, B, ResB> Service<Request<B>> for RetryService<S, Grpc>
where
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
        let Begun { ready, settings, protocol, request } = self.begin(request);
        let Layer { retry, methods, metrics } = &*protocol.0;
        let planned = plan(retry, methods, metrics.as_ref(), &settings, &request.0, &request.2);
        ResponseFuture { inner: Box::pin(run(settings, ready, request, planned)) }
    }
}

impl fmt::Debug for Grpc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Grpc").field(&self.0.retry).finish()
    }
}
