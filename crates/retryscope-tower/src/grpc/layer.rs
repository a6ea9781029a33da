//! What a gRPC layer adds to every layer's settings: its service config, the
//! methods it has called, and gRPC's own metrics.

use super::GrpcRetry;
use super::call::{GrpcCall, plan};
use super::methods::Methods;
use super::metrics::GrpcMetrics;
use crate::protocol::{LayerProtocol, Planned};
use crate::settings::Settings;
use http::Uri;
use http::request::Parts;
use opentelemetry::metrics::Meter;
use retryscope_http::RetryOptions;
use std::fmt;
use std::sync::Arc;

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
    /// Whether the config's token bucket is asked beside a budget given in
    /// code (a further guard of the dependency), rather than being its budget.
    beside_budget: bool,
}

impl Grpc {
    /// `retry`'s protocol, recording gRPC's own metrics on `meter` when
    /// given one (the channel's `origin` is their `grpc.target`);
    /// `beside_budget`: its token bucket is asked beside a budget of code's.
    pub(crate) fn new(
        retry: GrpcRetry,
        meter: Option<&Meter>,
        origin: Option<&Uri>,
        beside_budget: bool,
    ) -> Self {
        let metrics = meter.map(|meter| GrpcMetrics::new(meter, origin));
        Self(Arc::new(Layer { retry, methods: Methods::default(), metrics, beside_budget }))
    }
}

impl LayerProtocol for Grpc {
    type Call = GrpcCall;

    #[inline]
    fn plan(&self, settings: &Settings, parts: &Parts, options: &RetryOptions) -> Planned<GrpcCall> {
        let Layer { retry, methods, metrics, beside_budget } = &*self.0;
        plan((retry, *beside_budget), methods, metrics.as_ref(), settings, parts, options)
    }
}

impl fmt::Debug for Grpc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Grpc").field(&self.0.retry).finish()
    }
}
