//! Fault injection for tower services: a client layer placed *below*
//! [`RetryLayer`](crate::RetryLayer), so that its retries, budgets, breakers
//! and pacers meet injected failures as real ones, and the same layer for
//! servers (axum or hyper services), for game days on staging.
//!
//! What to inject, how often, the live switch, the header control and the
//! marks on spans and metrics are [`Faults`]' (`retryscope_http::fault`, shared
//! with `retryscope-reqwest`); this layer only applies its decisions.
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use retryscope::Policy;
//! use retryscope_tower::RetryLayer;
//! use retryscope_tower::fault::{FaultKind, FaultLayer, FaultRate, FaultRule, Faults};
//! use tower::{Service, ServiceBuilder, ServiceExt};
//! use retryscope_tower::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), retryscope_tower::BoxError> {
//! let faults = Faults::builder().rule(FaultRule::new(FaultKind::unavailable(), FaultRate::ALWAYS)).no_metrics().build();
//! let inner = tower::service_fn(|_: http::Request<Full<Bytes>>| async {
//!     Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
//! });
//! let mut client = ServiceBuilder::new()
//!     .layer(RetryLayer::builder(Policy::interactive()).no_telemetry().build())
//!     .layer(FaultLayer::new(faults.clone())) // below the retries
//!     .service(inner);
//! let get = || http::Request::get("http://127.0.0.1:8080/inventory").body(Full::default());
//! assert_eq!(client.ready().await?.call(get()?).await?.status(), 200, "built off");
//! faults.enable();
//! assert_eq!(client.ready().await?.call(get()?).await?.status(), 503, "every attempt injected");
//! # Ok(()) }
//! ```

mod future;
mod server;

pub use future::FaultFuture;
pub use retryscope_http::fault::{
    FAULT_KIND_HEADER, FAULT_PERCENTAGE_HEADER, FaultBody, FaultKind, FaultRate, FaultRule, FaultSpec,
    FaultSpecError, Faults, FaultsBuilder, InjectedFault,
};
pub use server::ServerFaultError;

use crate::error::BoxError;
use http::{Request, Response, Uri};
use http_body::Body;
use retryscope_http::fault::Target;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_layer::Layer;
use tower_service::Service;

/// Injects [`Faults`] into the calls of the service it wraps.
#[derive(Debug, Clone)]
pub struct FaultLayer {
    faults: Faults,
    origin: Option<Arc<Uri>>,
    side: Side,
}

/// Which end of the call the layer is at: how it names a call's dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

impl FaultLayer {
    /// Client side: below a [`RetryLayer`](crate::RetryLayer). Each call's
    /// dependency is named as the retry layer names it (`host`, or
    /// `host:port` off the scheme's port).
    pub fn new(faults: Faults) -> Self {
        Self { faults, origin: None, side: Side::Client }
    }

    /// The origin of requests without an authority (a tonic channel's), as
    /// given to the retry layer's `origin`.
    #[must_use]
    pub fn origin(mut self, origin: Uri) -> Self {
        self.origin = Some(Arc::new(origin));
        self
    }
}

impl<S> Layer<S> for FaultLayer {
    type Service = FaultService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FaultService { inner, faults: self.faults.clone(), origin: self.origin.clone(), side: self.side }
    }
}

/// The service of a [`FaultLayer`].
#[derive(Debug, Clone)]
pub struct FaultService<S> {
    inner: S,
    faults: Faults,
    origin: Option<Arc<Uri>>,
    side: Side,
}

impl<S, B, ResB> Service<Request<B>> for FaultService<S>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Send + 'static,
    ResB: Body,
{
    type Response = Response<FaultBody<ResB>>;
    type Error = BoxError;
    type Future = FaultFuture<S, Request<B>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // Off, one atomic load and the inner call: nothing named or built.
        if !self.faults.is_enabled() {
            return FaultFuture::pass(self.inner.call(request));
        }
        let kind = match self.side {
            Side::Client => {
                let server = crate::spans::server(request.uri(), self.origin.as_deref());
                let dependency = retryscope::dependency::dependency_name(
                    server.address,
                    server.uri.port_u16(),
                    server.default_port,
                );
                self.faults
                    .decide(&Target::new(&dependency, request.uri().path()).with_headers(request.headers()))
            }
            Side::Server => {
                let target = Target::new(server::dependency(&request), request.uri().path());
                let kind = self.faults.decide(&target.with_headers(request.headers()));
                // A server cannot refuse the connection it answers on.
                kind.map(|kind| if kind == FaultKind::Refused { FaultKind::Reset } else { kind })
            }
        };
        match kind {
            None => FaultFuture::pass(self.inner.call(request)),
            Some(kind) => FaultFuture::inject(kind, &mut self.inner, request),
        }
    }
}
