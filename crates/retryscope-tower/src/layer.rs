//! The layer and its builder.

use crate::body::DEFAULT_REPLAY_LIMIT;
use crate::service::RetryService;
use http::{HeaderName, Uri};
use opentelemetry::metrics::Meter;
use retryscope::classify::HttpClassifier;
use retryscope::throttle::Throttle;
use retryscope::{CircuitBreaker, Policy, RetryBudget, TokenBucket};
use retryscope_otel::{ATTEMPT_HEADER, DependencyGuards, Factory, OtelObserver};
use std::fmt;
use std::sync::Arc;
use tower_layer::Layer;

/// Retries the requests of a tower service over `http::Request`, correctly and
/// visibly: a hyper-util client, a tonic channel (feature `grpc`), anything
/// whose futures are `'static` and `Send`.
///
/// ```
/// use retryscope::Policy;
/// use retryscope_tower::RetryLayer;
///
/// let layer = RetryLayer::new(Policy::interactive());
/// // let client = tower::ServiceBuilder::new().layer(layer).service(client);
/// # let _ = layer;
/// ```
///
/// - **What is retried**: statuses 408, 429, 500, 502, 503, 504 (configurable
///   through [`HttpClassifier`]) and transport failures; with the `grpc`
///   feature and `RetryLayerBuilder::grpc`, the retryable gRPC status codes (A6).
/// - **Only when safe**: idempotent methods, requests with an `Idempotency-Key`,
///   requests marked [`safe_to_retry`](crate::RetryOptions::safe_to_retry), and —
///   for any method — a refused connection, where nothing reached the server.
///   gRPC calls are retried whatever their method, as A6 specifies.
/// - **Only when possible**: the body is kept in memory while it is there at
///   once and fits the replay limit (256 KiB by default); a streamed or larger
///   body is sent once and never retried — the attempt span says so, and a
///   failure that would have been retried comes back as [`NotRetried`](crate::NotRetried).
/// - **Server hints**: `Retry-After` and `RateLimit`; with `grpc`,
///   `grpc-retry-pushback-ms`.
/// - **Guards**: a [`RetryBudget`] (with `grpc` and retry throttling, a
///   [`TokenBucket`]) and a [`CircuitBreaker`] per dependency — `host`, or
///   `host:port` when the port is not the scheme's default — shared by every
///   clone of the service.
/// - **Every attempt** gets a fresh `poll_ready` on its own clone of the inner
///   service; dropping the response future cancels the running attempt or the
///   wait, and no attempt starts after.
/// - **Telemetry** through the global OpenTelemetry providers (install them
///   before building the layer), per `docs/telemetry.md`: an operation span with
///   one CLIENT span per attempt, the W3C `traceparent` of each attempt on the
///   wire, and the retry metrics.
#[derive(Clone)]
pub struct RetryLayer {
    settings: Arc<Settings>,
}

/// What every request of a layer shares.
pub(crate) struct Settings {
    pub(crate) policy: Policy,
    pub(crate) classifier: HttpClassifier,
    pub(crate) telemetry: Option<OtelObserver>,
    pub(crate) guards: DependencyGuards<Guard>,
    pub(crate) replay_limit: usize,
    pub(crate) origin: Option<Uri>,
    /// Tells the next hop which attempt an HTTP retry is; `None` sends nothing.
    /// (gRPC calls always send `grpc-previous-rpc-attempts`, as A6 says.)
    pub(crate) attempt_header: Option<HeaderName>,
    /// Retry only where no other layer of the call chain retries.
    pub(crate) one_layer: bool,
    #[cfg(feature = "grpc")]
    pub(crate) grpc: Option<crate::grpc::GrpcRetry>,
}

impl RetryLayer {
    /// Retries with `policy`, instrumented through the global OpenTelemetry
    /// providers, with a default [`RetryBudget`] and [`CircuitBreaker`] per
    /// dependency.
    pub fn new(policy: Policy) -> Self {
        Self::builder(policy).build()
    }

    /// Retries gRPC calls as `retry` says (A6), with the layer's defaults
    /// otherwise. For a tonic channel, prefer the builder with
    /// [`origin`](RetryLayerBuilder::origin): tonic sends only the path, and
    /// without an origin every call is reported and guarded as `unknown`.
    #[cfg(feature = "grpc")]
    #[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
    pub fn grpc(retry: crate::grpc::GrpcRetry) -> Self {
        Self::builder(Policy::interactive()).grpc(retry).build()
    }

    /// Configures a layer.
    pub fn builder(policy: Policy) -> RetryLayerBuilder {
        RetryLayerBuilder {
            policy,
            classifier: HttpClassifier::new(),
            telemetry: Telemetry::Global,
            budget: Some(Arc::new(RetryBudget::new)),
            breaker: Some(Arc::new(CircuitBreaker::new)),
            replay_limit: DEFAULT_REPLAY_LIMIT,
            origin: None,
            attempt_header: Some(ATTEMPT_HEADER),
            one_layer: false,
            #[cfg(feature = "grpc")]
            grpc: None,
        }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = RetryService<S>;

    fn layer(&self, inner: S) -> RetryService<S> {
        RetryService::new(inner, Arc::clone(&self.settings))
    }
}

impl fmt::Debug for RetryLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &*self.settings;
        let mut d = f.debug_struct("RetryLayer");
        d.field("policy", &s.policy)
            .field("classifier", &s.classifier)
            .field("guards", &s.guards)
            .field("replay_limit", &s.replay_limit)
            .field("origin", &s.origin);
        #[cfg(feature = "grpc")]
        d.field("grpc", &s.grpc);
        d.finish_non_exhaustive()
    }
}

/// Builds a [`RetryLayer`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct RetryLayerBuilder {
    policy: Policy,
    classifier: HttpClassifier,
    telemetry: Telemetry,
    budget: Option<Factory<RetryBudget>>,
    breaker: Option<Factory<CircuitBreaker>>,
    replay_limit: usize,
    origin: Option<Uri>,
    attempt_header: Option<HeaderName>,
    one_layer: bool,
    #[cfg(feature = "grpc")]
    grpc: Option<crate::grpc::GrpcRetry>,
}

impl fmt::Debug for RetryLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayerBuilder")
            .field("policy", &self.policy)
            .field("replay_limit", &self.replay_limit)
            .finish_non_exhaustive()
    }
}

/// Where the layer's metrics go.
enum Telemetry {
    Global,
    Meter(Meter),
    Off,
}

impl RetryLayerBuilder {
    /// Which HTTP statuses are retried.
    pub fn classifier(mut self, classifier: HttpClassifier) -> Self {
        self.classifier = classifier;
        self
    }

    /// Records metrics, and each dependency's budget and breaker gauges, with
    /// `meter` instead of the global meter provider's.
    pub fn meter(mut self, meter: &Meter) -> Self {
        self.telemetry = Telemetry::Meter(meter.clone());
        self
    }

    /// Records no telemetry at all.
    pub fn without_telemetry(mut self) -> Self {
        self.telemetry = Telemetry::Off;
        self
    }

    /// Gives each dependency a budget made by `make` (default:
    /// [`RetryBudget::new`]). With `grpc` and retry throttling, the token bucket
    /// takes its place.
    pub fn budget_per_dependency(mut self, make: impl Fn() -> RetryBudget + Send + Sync + 'static) -> Self {
        self.budget = Some(Arc::new(make));
        self
    }

    /// Retries without a budget: only the policy bounds them.
    pub fn no_budget(mut self) -> Self {
        self.budget = None;
        self
    }

    /// Gives each dependency a circuit breaker made by `make` (default:
    /// [`CircuitBreaker::new`]).
    pub fn breaker_per_dependency(
        mut self,
        make: impl Fn() -> CircuitBreaker + Send + Sync + 'static,
    ) -> Self {
        self.breaker = Some(Arc::new(make));
        self
    }

    /// Calls every dependency, however often it fails: no circuit breaker.
    pub fn no_breaker(mut self) -> Self {
        self.breaker = None;
        self
    }

    /// Keeps request bodies of up to `bytes` in memory for retries (default
    /// 256 KiB); a larger body is sent once and never retried.
    pub fn replay_limit(mut self, bytes: usize) -> Self {
        self.replay_limit = bytes;
        self
    }

    /// The server called, for requests whose URI carries no authority — tonic
    /// clients send only the path, and the channel adds its origin below this
    /// layer. Names the dependency (and so picks its budget and breaker) and
    /// fills `server.address`/`server.port`. Without it such requests share the
    /// dependency `unknown`.
    pub fn origin(mut self, origin: Uri) -> Self {
        self.origin = Some(origin);
        self
    }

    /// Names the header that tells an HTTP server which attempt a retry is
    /// (default [`retry-attempt`](retryscope_otel::ATTEMPT_HEADER), sent from the
    /// second attempt on). gRPC calls send `grpc-previous-rpc-attempts` instead.
    pub fn attempt_header(mut self, name: HeaderName) -> Self {
        self.attempt_header = Some(name);
        self
    }

    /// Sends no attempt header on HTTP retries.
    pub fn no_attempt_header(mut self) -> Self {
        self.attempt_header = None;
        self
    }

    /// Retries only where no other layer of the call chain retries (off by
    /// default): inside a request served behind [`IncomingLayer`](crate::IncomingLayer),
    /// a request that is itself a retry makes one attempt downstream, and a
    /// failed response carrying [`retry-exhausted`](retryscope_otel::EXHAUSTED_HEADER)
    /// (the layer below already retried) is not retried. Either is reported as
    /// throttled, reason `upstream_retry`. When this layer's own retries run
    /// out, the server it runs in says so to its caller.
    pub fn retry_at_one_layer(mut self) -> Self {
        self.one_layer = true;
        self
    }

    /// Follows gRPC's retry design (A6) as `retry` configures it: statuses from
    /// `grpc-status`, its policies per method, pushback, throttling and
    /// `grpc-timeout`. The builder's policy then applies to no call: every call
    /// takes the policy of its method, or none.
    #[cfg(feature = "grpc")]
    #[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
    pub fn grpc(mut self, retry: crate::grpc::GrpcRetry) -> Self {
        self.grpc = Some(retry);
        self
    }

    /// The layer.
    pub fn build(self) -> RetryLayer {
        let meter = match self.telemetry {
            Telemetry::Global => Some(opentelemetry::global::meter_with_scope(retryscope_otel::scope())),
            Telemetry::Meter(meter) => Some(meter),
            Telemetry::Off => None,
        };
        let budget: Option<Factory<Guard>> = match self.budget {
            Some(make) => Some(Arc::new(move || Guard::Budget(make()))),
            None => None,
        };
        #[cfg(feature = "grpc")]
        let budget = match self.grpc.clone().filter(crate::grpc::GrpcRetry::is_throttled) {
            Some(grpc) => {
                let bucket: Factory<Guard> = Arc::new(move || {
                    grpc.token_bucket().map_or_else(|| Guard::Bucket(TokenBucket::new()), Guard::Bucket)
                });
                Some(bucket)
            }
            None => budget,
        };
        let guards = DependencyGuards::builder().budget_factory(budget).breaker_factory(self.breaker);
        let guards = match &meter {
            Some(meter) => guards.meter(meter.clone()),
            None => guards,
        };
        RetryLayer {
            settings: Arc::new(Settings {
                policy: self.policy,
                classifier: self.classifier,
                telemetry: meter.as_ref().map(OtelObserver::from_meter),
                guards: guards.build(),
                replay_limit: self.replay_limit,
                origin: self.origin,
                attempt_header: self.attempt_header,
                one_layer: self.one_layer,
                #[cfg(feature = "grpc")]
                grpc: self.grpc,
            }),
        }
    }
}

/// A dependency's retry guard: the default budget, or gRPC's token bucket.
#[derive(Debug, Clone)]
pub(crate) enum Guard {
    Budget(RetryBudget),
    // Only made with `grpc`; kept in the enum either way so the type is one.
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    Bucket(TokenBucket),
}

impl Throttle for Guard {
    fn request_started(&self) {
        match self {
            Guard::Budget(b) => b.request_started(),
            Guard::Bucket(b) => b.request_started(),
        }
    }

    fn attempt_finished(&self, success: bool) {
        match self {
            Guard::Budget(b) => b.attempt_finished(success),
            Guard::Bucket(b) => b.attempt_finished(success),
        }
    }

    fn try_acquire_retry(&self) -> bool {
        match self {
            Guard::Budget(b) => b.try_acquire_retry(),
            Guard::Bucket(b) => b.try_acquire_retry(),
        }
    }

    fn available(&self) -> f64 {
        match self {
            Guard::Budget(b) => b.available(),
            Guard::Bucket(b) => b.available(),
        }
    }
}
