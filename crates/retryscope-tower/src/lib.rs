//! Correct, instrumented retries for tower services: HTTP clients such as
//! hyper-util's, and — with the `grpc` feature — tonic channels with gRPC's own
//! retry design (gRFC A6).
//!
//! `http::Request` is not `Clone`, which is why `tower::retry` cannot replay a
//! call on its own. [`RetryLayer`] keeps a copy of small request bodies, makes
//! the inner service ready afresh for every attempt, and reports every attempt
//! through OpenTelemetry.
//!
//! # A hyper-util client
//!
//! ```no_run
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use retryscope::Policy;
//! use retryscope_tower::RetryLayer;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # async fn demo() -> Result<(), retryscope_tower::BoxError> {
//! let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
//! let mut client = ServiceBuilder::new().layer(RetryLayer::new(Policy::interactive())).service(client);
//! let request = http::Request::get("http://127.0.0.1:8080/inventory").body(Full::default())?;
//! let response = client.ready().await?.call(request).await?;
//! println!("{}", response.status());
//! # Ok(()) }
//! ```
//!
//! # A tonic channel (feature `grpc`)
//!
//! ```no_run
//! # #[cfg(feature = "grpc")]
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use retryscope::Policy;
//! use retryscope_tower::{RetryLayer, grpc::GrpcRetry};
//!
//! let endpoint = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051");
//! let retry = GrpcRetry::new(Policy::interactive()); // or GrpcRetry::from_service_config(json)?
//! let channel = tower::ServiceBuilder::new()
//!     .layer(RetryLayer::grpc(retry).origin(endpoint.uri().clone()).build())
//!     .service(endpoint.connect_lazy());
//! // A generated client takes it as it is: `GreeterClient::new(channel)`.
//! let client = tonic::client::Grpc::new(channel);
//! # let _ = client;
//! # Ok(()) }
//! # fn main() {}
//! ```
//!
//! The runnable versions are [`examples/tower_hyper.rs`](https://github.com/retryscope/retryscope/blob/main/examples/examples/tower_hyper.rs)
//! and [`examples/tower_tonic.rs`](https://github.com/retryscope/retryscope/blob/main/examples/examples/tower_tonic.rs) in the repository.
//!
//! # Further reading
//!
//! - The telemetry contract — every metric, span, attribute and log field, and
//!   the Prometheus series they become: [docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md).
//! - The runbook — the alerts, the dashboards, and what to do when they fire:
//!   [docs/runbook.md](https://github.com/retryscope/retryscope/blob/main/docs/runbook.md).
//! - The public API and what semver covers: [docs/api.md](https://github.com/retryscope/retryscope/blob/main/docs/api.md).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod attempt;
mod builder;
mod call;
mod classify;
mod error;
pub mod fault;
#[cfg(feature = "grpc")]
mod framing;
#[cfg(feature = "grpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
pub mod grpc;
#[cfg(feature = "grpc")]
mod head;
mod http_call;
mod inner;
mod layer;
mod protocol;
mod replay;
mod response;
mod send;
mod server;
mod service;
mod settings;
mod spans;

pub use builder::RetryLayerBuilder;
pub use error::{BoxError, GaveUp, NotRetried};
pub use http_call::Http;
pub use layer::RetryLayer;
pub use replay::{DEFAULT_REPLAY_LIMIT, Replay, ReplayBody};
pub use response::ResponseBody;
/// The types both HTTP integrations share, defined once in `retryscope-http`:
/// per-request overrides, a request's idempotency-key choice and your own
/// retry rules (HTTP mode), the error of a request that could not be sent
/// again, and the redaction applied to `url.full`.
pub use retryscope_http::{
    BodyLimit, BodyLimitError, BodyRule, ConnectLimit, ConnectTimedOut, Fallback, FallbackContext,
    FallbackFailed, FallbackFuture, FallbackReason, InvalidConnectShare, KeyChoice, KeyChoiceError,
    LastAnswer, MAX_FALLBACKS, NO_DEADLINE_LIMIT, NoBudgetToShare, REDACTED, ResponseRule, RetryOptions,
    UnknownFallback, body_rule_fn, redact_url, rule_fn,
};
/// The builders' telemetry states, to name a builder after `no_telemetry()`
/// (defined in `retryscope-otel`, one pair for every integration).
#[doc(inline)]
pub use retryscope_otel::telemetry_state;
/// The builders' setters, in traits both HTTP integrations share (defined in
/// `retryscope-http`): one `use retryscope_tower::prelude::*;` brings them
/// all. The gRPC builder has no [`WithHttpSettings`](prelude::WithHttpSettings).
///
/// ```
/// use retryscope::Policy;
/// use retryscope_tower::RetryLayer;
/// use retryscope_tower::prelude::*;
///
/// let layer = RetryLayer::builder(Policy::interactive())
///     .no_breaker() // WithClientSettings: every builder
///     .no_attempt_header() // WithHttpSettings: HTTP only
///     .operation_spans() // WithTelemetry: while telemetry is on
///     .build();
/// # let _ = layer;
/// ```
pub mod prelude {
    pub use retryscope_http::{WithClientSettings, WithHttpSettings, WithTelemetry};
}
pub use server::{IncomingFuture, IncomingLayer, IncomingService};
pub use service::{ResponseFuture, RetryService};
