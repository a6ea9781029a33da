//! The tower layer and its settings.

use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderName;
use http::{Method, request::Parts};
use opentelemetry::metrics::Meter;
use tower_layer::Layer;

use crate::IdempotencyService;
use crate::config::{MIN_DURATION, Settings};
use crate::service::Shared;
use crate::store::IdempotencyStore;
use crate::telemetry::Telemetry;

/// A tower layer that runs each keyed request once and answers its repeats
/// from a store (draft-ietf-httpapi-idempotency-key-header).
///
/// ```
/// use axum::{Router, routing::post};
/// use retryscope_idempotency::{IdempotencyLayer, MemoryStore};
///
/// async fn create() -> &'static str { "created" }
///
/// let app: Router = Router::new()
///     .route("/orders", post(create))
///     .layer(IdempotencyLayer::new(MemoryStore::default()).require_key());
/// # drop(app);
/// ```
#[derive(Debug)]
#[must_use = "a layer does nothing until it wraps a service"]
pub struct IdempotencyLayer<St> {
    store: Arc<St>,
    settings: Settings,
    meter: Option<Meter>,
}

impl<St> Clone for IdempotencyLayer<St> {
    fn clone(&self) -> Self {
        Self { store: Arc::clone(&self.store), settings: self.settings.clone(), meter: self.meter.clone() }
    }
}

impl<St: IdempotencyStore> IdempotencyLayer<St> {
    /// A layer keeping keys in `store`, with the defaults: header
    /// `Idempotency-Key`; methods POST and PATCH; key optional; entries kept
    /// 24 h; claims leased for 5 min; bodies up to 1 MiB; kept headers
    /// `content-type`, `location`, `content-location`, `etag`; request bodies
    /// read within 30 s; store calls answered within 2 s.
    pub fn new(store: St) -> Self {
        Self { store: Arc::new(store), settings: Settings::default(), meter: None }
    }

    /// Answers 400 to a request of a keyed method that has no key (the draft's
    /// "required" resource). Without it such a request passes through, unkeyed.
    pub fn require_key(mut self) -> Self {
        self.settings.require_key = true;
        self
    }

    /// Keeps and replays 5xx responses like any other, as the draft asks ("the
    /// result of the previously completed operation, success or an error").
    /// By default a 5xx frees the key instead, so that the retry runs again:
    /// a service that answers 5xx has said the operation failed, and a
    /// replayed 5xx would make every retry of it fail the same way.
    pub fn keep_server_errors(mut self) -> Self {
        self.settings.keep_server_errors = true;
        self
    }

    /// Reads the key from `name` instead of `Idempotency-Key`.
    pub fn header_name(mut self, name: HeaderName) -> Self {
        self.settings.header = name;
        self
    }

    /// The methods whose requests are keyed (default POST and PATCH); requests
    /// of other methods pass through untouched.
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.settings.methods = methods.into_iter().collect();
        self
    }

    /// How long a completed request's entry is kept, from its completion
    /// (default 24 h, at least 1 ms). Later, the key is free again.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.settings.ttl = ttl.max(MIN_DURATION);
        self
    }

    /// How long a claim holds a key while its request runs (default 5 min, at
    /// least 1 ms, at most the [`ttl`](Self::ttl)). The claim is renewed every
    /// third of it while the request runs and its response is read, so a
    /// request slower than the lease keeps its key; a process that dies
    /// while running frees its keys a lease after its last renewal. A
    /// completion the store failed to record is tried again until a lease
    /// has passed: after that, a repeat runs the request again.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.settings.lease = lease.max(MIN_DURATION);
        self
    }

    /// The largest request body fingerprinted (larger: 413) and the largest
    /// response body kept (larger: sent, then not replayable), in bytes
    /// (default 1 MiB).
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.settings.max_body = bytes;
        self
    }

    /// The response headers kept and replayed (default `content-type`,
    /// `content-encoding`, `content-language`, `location`, `content-location`,
    /// `etag`). Others are not replayed: `set-cookie`, dates and per-response
    /// ids should not be. `content-encoding` is kept whatever the list says:
    /// the body is kept as it was sent, encoded, and replayed without it a
    /// compressed body would reach the client as garbage.
    pub fn store_headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        self.settings.store_headers = names.into_iter().collect();
        self
    }

    /// How long the layer waits for a keyed request's body (default 30 s, at
    /// least 1 ms; later: 408).
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.settings.body_timeout = timeout.max(MIN_DURATION);
        self
    }

    /// How long the layer waits for the store (default 2 s, at least 1 ms;
    /// later: 503, and the request does not run).
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.settings.store_timeout = timeout.max(MIN_DURATION);
        self
    }

    /// The `Retry-After` of a 409 `#conflict`, the answer to a repeat that
    /// arrives while the first request with its key still runs (default 1 s;
    /// rounded up to whole seconds, as `Retry-After` carries them). A key in
    /// flight is not a failure: retryscope's clients retry a keyed request's
    /// 409 that carries a `Retry-After` after that wait (within their
    /// deadline, charged to their budget) and get the first request's
    /// response replayed; set it near the route's usual running time.
    pub fn in_flight_retry_after(mut self, wait: Duration) -> Self {
        self.settings.in_flight_retry_after = wait;
        self
    }

    /// Names each request's route for `http.route` on
    /// `retryscope.idempotency.requests` (bounded like the route of
    /// `retryscope.server.requests`), e.g. from axum's `MatchedRoute` when the
    /// layer is a `route_layer`.
    pub fn route(mut self, route: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Self {
        self.settings.route = Some(Arc::new(route));
        self
    }

    /// Records with `meter` instead of the global meter provider's.
    pub fn meter(mut self, meter: &Meter) -> Self {
        self.meter = Some(meter.clone());
        self
    }
}

impl<S, St: IdempotencyStore> Layer<S> for IdempotencyLayer<St> {
    type Service = IdempotencyService<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        let telemetry = self.meter.as_ref().map_or_else(Telemetry::global, Telemetry::from_meter);
        let shared = Shared {
            store: Arc::clone(&self.store),
            settings: self.settings.clone(),
            telemetry,
            late_completions: Default::default(),
        };
        IdempotencyService::new(inner, Arc::new(shared))
    }
}
