//! What the layer reports: a counter of requests by outcome and route, and the
//! outcome on the server's current span.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter};
use retryscope_otel::tracing_opentelemetry::OpenTelemetrySpanExt;

/// The counter: `retryscope.idempotency.requests`.
pub const REQUESTS: &str = "retryscope.idempotency.requests";
/// The attribute holding an [`Outcome`]: `retryscope.idempotency.outcome`.
pub const OUTCOME: &str = "retryscope.idempotency.outcome";

/// What the layer did with a request of a keyed method (every value is in
/// [`Outcome::ALL`]).
///
/// ```
/// use retryscope_idempotency::telemetry::Outcome;
///
/// assert_eq!(Outcome::Replayed.as_str(), "replayed");
/// assert!(Outcome::ALL.contains(&Outcome::StoreFull));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The key was free: the request ran (and its response was kept, unless a
    /// 5xx or an error released the key).
    Executed,
    /// A completed request's response was replayed.
    Replayed,
    /// The first request with the key was still running: 409.
    Conflict,
    /// The key is used by a different request: 422.
    Mismatch,
    /// The request with the key completed but its response was too large to
    /// keep: 409, not run again.
    NotReplayable,
    /// A route requiring a key got none: 400.
    MissingKey,
    /// The key header is malformed: 400.
    InvalidKey,
    /// No key, on a route that does not require one: passed through.
    Unkeyed,
    /// The request body is over the bound (413), too slow (408) or unreadable (400).
    BodyRefused,
    /// The store holds as many keys as it may: 503 with `Retry-After`.
    StoreFull,
    /// The store failed or timed out: 503, nothing run.
    StoreError,
}

impl Outcome {
    /// Every value, for dashboards and tests.
    pub const ALL: [Self; 11] = [
        Self::Executed,
        Self::Replayed,
        Self::Conflict,
        Self::Mismatch,
        Self::NotReplayable,
        Self::MissingKey,
        Self::InvalidKey,
        Self::Unkeyed,
        Self::BodyRefused,
        Self::StoreFull,
        Self::StoreError,
    ];

    /// The attribute value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Executed => "executed",
            Self::Replayed => "replayed",
            Self::Conflict => "conflict",
            Self::Mismatch => "mismatch",
            Self::NotReplayable => "not_replayable",
            Self::MissingKey => "missing_key",
            Self::InvalidKey => "invalid_key",
            Self::Unkeyed => "unkeyed",
            Self::BodyRefused => "body_refused",
            Self::StoreFull => "store_full",
            Self::StoreError => "store_error",
        }
    }
}

/// The layer's instruments.
#[derive(Clone, Debug)]
pub(crate) struct Telemetry {
    requests: Counter<u64>,
}

impl Telemetry {
    pub(crate) fn from_meter(meter: &Meter) -> Self {
        let requests = meter
            .u64_counter(REQUESTS)
            .with_unit("{request}")
            .with_description(
                "Requests of keyed methods seen by the idempotency layer, by what it did with them.",
            )
            .build();
        Self { requests }
    }

    pub(crate) fn global() -> Self {
        Self::from_meter(&opentelemetry::global::meter_with_scope(retryscope_otel::scope()))
    }

    /// Counts `outcome` for `route` (bounded by the table `http.route` shares
    /// with `retryscope.server.requests`) and puts it on the current span.
    pub(crate) fn record(&self, outcome: Outcome, route: Option<&str>) {
        let outcome_kv = KeyValue::new(OUTCOME, outcome.as_str());
        match route.map(retryscope_otel::bounded_route) {
            Some(route) => {
                self.requests.add(1, &[outcome_kv, KeyValue::new(retryscope_otel::names::HTTP_ROUTE, route)]);
            }
            None => self.requests.add(1, &[outcome_kv]),
        }
        tracing::Span::current().set_attribute(OUTCOME, outcome.as_str());
    }
}
