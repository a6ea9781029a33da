//! The layer: it builds the service, which knows nothing of it.

use crate::http_call::Http;
use crate::service::RetryService;
use crate::settings::Settings;
use std::fmt;
use std::sync::Arc;
use tower_layer::Layer;

/// Retries the requests of a tower service over `http::Request`, correctly and
/// visibly: a hyper-util client, a tonic channel (feature `grpc`), anything
/// whose futures are `'static` and `Send`.
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use retryscope::Policy;
/// use retryscope_tower::RetryLayer;
/// use tower::{Service, ServiceBuilder, ServiceExt};
/// use retryscope_tower::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), retryscope_tower::BoxError> {
/// // Any tower service over `http::Request`; here one that answers at once.
/// let inner = tower::service_fn(|_: http::Request<Full<Bytes>>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
/// });
/// let layer = RetryLayer::builder(Policy::interactive()).no_telemetry().build();
/// let mut client = ServiceBuilder::new().layer(layer).service(inner);
/// let request = http::Request::get("http://127.0.0.1:8080/inventory").body(Full::default())?;
/// let response = client.ready().await?.call(request).await?;
/// assert_eq!(response.status(), http::StatusCode::OK);
/// # Ok(()) }
/// ```
///
/// - **What is retried**: statuses 408, 429, 500, 502, 503, 504 (configurable
///   through [`HttpClassifier`](retryscope::classify::HttpClassifier)) and
///   transport failures; with the `grpc` feature and `RetryLayer::grpc`, the
///   retryable gRPC status codes (A6).
/// - **Your own rule** (HTTP mode):
///   [`retry_rule`](crate::prelude::WithHttpSettings::retry_rule) asks a
///   [`ResponseRule`](crate::ResponseRule) about each response's status and
///   headers before the built-in statuses;
///   [`retry_on_body`](crate::prelude::WithHttpSettings::retry_on_body) asks a
///   [`BodyRule`](crate::BodyRule) about the bodies of the responses it
///   selects, read ahead up to a limit, before either (example below).
///   Request safety still applies to their verdicts.
/// - **Only when safe**: idempotent methods, requests with an `Idempotency-Key`,
///   requests marked [`idempotent`](crate::RetryOptions::idempotent), and —
///   for any method — a refused connection, where nothing reached the server.
///   gRPC calls are retried whatever their method, as A6 specifies.
/// - **Idempotency keys** (HTTP, opt-in:
///   [`idempotency_keys`](crate::prelude::WithHttpSettings::idempotency_keys)): a POST
///   or PATCH without a key gets a fresh one, the same on every attempt, and
///   is retried like an idempotent request; per request,
///   [`KeyChoice`](crate::KeyChoice) supplies one or suppresses it.
/// - **Only when possible**: the body is kept in memory while it is there at
///   once and fits the replay limit (256 KiB by default); a streamed or larger
///   body is sent once and never retried — the attempt span says so, and a
///   failure that would have been retried comes back as [`NotRetried`](crate::NotRetried)
///   (in gRPC mode, as the server's status marked `grpc::NOT_RETRIED`).
/// - **Server hints**: `Retry-After` and `RateLimit`; with `grpc`,
///   `grpc-retry-pushback-ms`.
/// - **Guards**: over HTTP, a [`RetryBudget`](retryscope::RetryBudget), a
///   [`CircuitBreaker`](retryscope::CircuitBreaker) (which counts no 429) and
///   a [`Pacer`](retryscope::Pacer) per dependency — `host`, or `host:port`
///   when the port is not the scheme's default — shared by every clone of the
///   service: a 429's or 503's `Retry-After`, and a quota in `RateLimit` or
///   `X-RateLimit-*` headers on any response, pace every call to that
///   dependency. With `grpc`, A6's only: the config's retry throttling
///   ([`TokenBucket`](retryscope::TokenBucket)) when it has one, and no
///   budget, breaker or pacer unless asked for (see `GrpcRetryLayerBuilder`
///   in the `grpc` module, with the `grpc` feature).
/// - **Hedging**: [`hedge`](crate::prelude::WithHttpSettings::hedge) sends further
///   copies of a slow idempotent request with a replayable body instead of
///   retrying it (the first acceptable answer wins, the others are dropped,
///   which closes their connection or resets their stream); with `grpc`, a
///   method whose service config has a `hedgingPolicy` is hedged as A6 says.
///   Each copy is its own attempt span marked `retryscope.hedge`. Each
///   dependency hedges with its own copy of the policy, so a percentile delay
///   is learned per server ([`hedge_delay`](RetryLayer::hedge_delay)), and
///   every copy asks the dependency's pacer as a retry's attempt does.
/// - **Every attempt** gets a fresh `poll_ready` on its own clone of the inner
///   service; dropping the response future cancels the running attempt or the
///   wait, and no attempt starts after.
/// - **A connect limit** when the hyper-util client's connector is wrapped in
///   [`ConnectLimit`](crate::ConnectLimit)
///   (`ConnectLimit::new().layer(HttpConnector::new())`): each attempt's
///   connect ends at a third of the attempt's time limit, so a connect that
///   hangs leaves the retry the rest. A tonic channel connects in its own
///   task, out of any attempt's reach: use `Endpoint::connect_timeout`.
/// - **Telemetry** through the global OpenTelemetry providers (install them
///   before building the layer), per `docs/telemetry.md`: an operation span with
///   one CLIENT span per attempt, the W3C `traceparent` of each attempt on the
///   wire, and the retry metrics.
///
/// **A body rule.** A server that answers `200 {"status":"try again"}` is
/// retried on what its body says; the caller gets the next answer, whole:
///
/// ```
/// use bytes::Bytes;
/// use http::StatusCode;
/// use http_body_util::{BodyExt, Full};
/// use retryscope::{ErrorType, Policy, Verdict};
/// use retryscope_tower::{BodyLimit, RetryLayer, body_rule_fn};
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
/// use tower::{Service, ServiceBuilder, ServiceExt};
/// use retryscope_tower::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), retryscope_tower::BoxError> {
/// // A server that asks to be tried again once, in the body of a 200.
/// let calls = Arc::new(AtomicU32::new(0));
/// let counted = Arc::clone(&calls);
/// let inner = tower::service_fn(move |_: http::Request<Full<Bytes>>| {
///     let body: &'static [u8] =
///         if counted.fetch_add(1, Ordering::Relaxed) == 0 { br#"{"status":"try again"}"# } else { br#"{"status":"ok"}"# };
///     async move { Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from_static(body)))) }
/// });
/// let rule = body_rule_fn(
///     |status, _headers| status == StatusCode::OK,
///     |_, _, body| body.windows(9).any(|w| w == b"try again").then_some(Verdict::retryable(ErrorType::Kind("try_again"))),
/// );
/// let policy = Policy::builder().base_delay(std::time::Duration::from_millis(1)).build()?;
/// let layer = RetryLayer::builder(policy).no_telemetry().retry_on_body(BodyLimit::new(4096)?, rule).build();
/// let mut client = ServiceBuilder::new().layer(layer).service(inner);
/// let request = http::Request::get("http://127.0.0.1:8080/report").body(Full::default())?;
/// let response = client.ready().await?.call(request).await?;
/// assert_eq!(response.into_body().collect().await?.to_bytes(), r#"{"status":"ok"}"#);
/// assert_eq!(calls.load(Ordering::Relaxed), 2);
/// # Ok(()) }
/// ```
///
/// Its type parameter is the protocol its calls speak: [`Http`] (the
/// default), or `grpc::Grpc` for a layer from `RetryLayer::grpc`.
#[derive(Clone)]
pub struct RetryLayer<P = Http> {
    pub(crate) settings: Arc<Settings>,
    pub(crate) protocol: P,
}

impl<P> RetryLayer<P> {
    /// The hedging delay `dependency` (`host`, or `host:port` off the
    /// scheme's port, as the spans name it) has learned from its own
    /// latencies, as of now: `None` without a
    /// [percentile delay](retryscope::hedge::HedgeDelay::percentile) or before
    /// the first request to it. Every service this layer made shares it. For
    /// tests and dashboards.
    pub fn hedge_delay(&self, dependency: &str) -> Option<std::time::Duration> {
        // The clock the engine times the copies with: tokio's.
        self.settings.client.guards.hedge_delay(dependency, tokio::time::Instant::now().into_std())
    }
}

impl<S, P: Clone> Layer<S> for RetryLayer<P> {
    type Service = RetryService<S, P>;

    fn layer(&self, inner: S) -> RetryService<S, P> {
        RetryService::new(inner, Arc::clone(&self.settings), self.protocol.clone())
    }
}

impl<P: fmt::Debug> fmt::Debug for RetryLayer<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &*self.settings;
        let mut d = f.debug_struct("RetryLayer");
        d.field("policy", &s.policy)
            .field("client", &s.client)
            .field("replay_limit", &s.replay_limit)
            .field("origin", &s.origin)
            .field("protocol", &self.protocol);
        d.finish_non_exhaustive()
    }
}
