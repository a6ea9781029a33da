//! gRPC's own client metrics, beside the `retryscope.*` ones, so that gRPC
//! dashboards work: the per-attempt and per-call instruments of gRFC A66
//! ("OpenTelemetry Metrics") and the retry instruments of gRFC A96 ("OTel
//! Metrics for Retries"), with their names, units, attributes and bucket
//! boundaries (docs/telemetry.md lists them).
//!
//! A call is followed by a [`CallMetrics`]: the engine's observer hooks start
//! and end its attempts, the request body counts what each attempt sends, and
//! the response body handed to the caller counts what it receives and ends the
//! call when the status reaches the caller (the trailers of a stream). A call
//! dropped before its status arrives ends `CANCELLED`, as gRPC records it.

mod call;
pub(crate) mod names;

pub(crate) use call::CallMetrics;

use http::Uri;
use opentelemetry::metrics::{Counter, Histogram, Meter};
use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

/// Distinct `grpc.method` values kept before the rest are [`names::OTHER_METHOD`]:
/// A66 asks that method names not blow up a meter's cardinality.
const MAX_METHODS: usize = 1_000;

/// The instruments of one layer, made once from its meter.
#[derive(Clone)]
pub(crate) struct GrpcMetrics {
    instruments: Arc<Instruments>,
    /// `grpc.target` from the layer's `origin`, when it has one.
    target: Option<Arc<str>>,
}

impl fmt::Debug for GrpcMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcMetrics").field("target", &self.target).finish_non_exhaustive()
    }
}

pub(super) struct Instruments {
    pub(super) attempt_started: Counter<u64>,
    pub(super) attempt_duration: Histogram<f64>,
    pub(super) attempt_sent: Histogram<u64>,
    pub(super) attempt_rcvd: Histogram<u64>,
    pub(super) call_duration: Histogram<f64>,
    pub(super) call_retries: Histogram<u64>,
    pub(super) call_transparent_retries: Histogram<u64>,
    pub(super) call_hedges: Histogram<u64>,
    pub(super) call_retry_delay: Histogram<f64>,
}

impl GrpcMetrics {
    /// The A66 and A96 client instruments on `meter`; `origin` is the channel's
    /// target (the layer's `origin`), if known.
    pub(crate) fn new(meter: &Meter, origin: Option<&Uri>) -> Self {
        let seconds = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(names::LATENCY_BUCKETS.to_vec())
                .build()
        };
        let counts = |name: &'static str, unit: &'static str, description: &'static str, buckets: &[f64]| {
            meter
                .u64_histogram(name)
                .with_unit(unit)
                .with_description(description)
                .with_boundaries(buckets.to_vec())
                .build()
        };
        let instruments = Instruments {
            attempt_started: meter
                .u64_counter(names::ATTEMPT_STARTED)
                .with_unit("{attempt}")
                .with_description(
                    "The total number of RPC attempts started, including those that have not completed.",
                )
                .build(),
            attempt_duration: seconds(
                names::ATTEMPT_DURATION,
                "End-to-end time taken to complete an RPC attempt.",
            ),
            attempt_sent: counts(
                names::ATTEMPT_SENT_SIZE,
                "By",
                "Total bytes (compressed but not encrypted) sent across all request messages per RPC attempt.",
                &names::SIZE_BUCKETS,
            ),
            attempt_rcvd: counts(
                names::ATTEMPT_RCVD_SIZE,
                "By",
                "Total bytes (compressed but not encrypted) received across all response messages per RPC attempt.",
                &names::SIZE_BUCKETS,
            ),
            call_duration: seconds(
                names::CALL_DURATION,
                "End-to-end time taken to complete an RPC, as the application sees it.",
            ),
            call_retries: counts(
                names::CALL_RETRIES,
                "{retry}",
                "Number of retries during the client call, when there were any.",
                &names::RETRY_BUCKETS,
            ),
            call_transparent_retries: counts(
                names::CALL_TRANSPARENT_RETRIES,
                "{transparent_retry}",
                "Number of transparent retries during the client call, when there were any.",
                &names::TRANSPARENT_RETRY_BUCKETS,
            ),
            call_hedges: counts(
                names::CALL_HEDGES,
                "{hedge}",
                "Number of hedges during the client call, when there were any.",
                &names::RETRY_BUCKETS,
            ),
            call_retry_delay: seconds(
                names::CALL_RETRY_DELAY,
                "Total time of delay while there is no active attempt during the client call.",
            ),
        };
        Self { instruments: Arc::new(instruments), target: origin.map(|o| target_of(o).into()) }
    }

    /// Starts following one call to `path` (`/package.Service/Method`); `uri`
    /// is its request URI, whose authority names the target when the layer has
    /// no `origin`.
    pub(crate) fn call(&self, path: &str, uri: &Uri) -> CallMetrics {
        let target = self.target.clone().unwrap_or_else(|| match uri.authority() {
            Some(_) => bounded(&TARGETS, &target_of(uri), "unknown"),
            None => "unknown".into(),
        });
        let method = bounded(&METHODS, path.strip_prefix('/').unwrap_or(path), names::OTHER_METHOD);
        CallMetrics::new(Arc::clone(&self.instruments), method, target)
    }
}

/// `scheme://authority` of `uri`: the target a tonic channel was made for.
fn target_of(uri: &Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("http");
    match uri.authority() {
        Some(authority) => format!("{scheme}://{authority}"),
        None => "unknown".to_owned(),
    }
}

static METHODS: LazyLock<RwLock<HashSet<Arc<str>>>> = LazyLock::new(RwLock::default);
static TARGETS: LazyLock<RwLock<HashSet<Arc<str>>>> = LazyLock::new(RwLock::default);

/// `name` interned in `table` while it holds fewer than [`MAX_METHODS`]
/// names, else `overflow`.
fn bounded(table: &RwLock<HashSet<Arc<str>>>, name: &str, overflow: &'static str) -> Arc<str> {
    if let Some(known) = table.read().unwrap_or_else(PoisonError::into_inner).get(name) {
        return Arc::clone(known);
    }
    let mut names = table.write().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = names.get(name) {
        return Arc::clone(known);
    }
    if names.len() >= MAX_METHODS {
        return overflow.into();
    }
    let name: Arc<str> = name.into();
    names.insert(Arc::clone(&name));
    name
}
