//! OpenTelemetry instrumentation for [`retryscope`]: per-attempt spans, retry
//! metrics and one structured log event per retry.
//!
//! [`OtelObserver`] implements the engine's [`Observer`](retryscope::observe::Observer)
//! interface. For every logical operation it emits what the telemetry contract
//! ([docs/telemetry.md]) names:
//!
//! - **Metrics** through the OpenTelemetry metrics API: the counters
//!   `retryscope.requests`, `retryscope.retries` and `retryscope.throttled`, and
//!   the histograms `retryscope.attempt.duration`, `retryscope.request.duration`
//!   and `retryscope.backoff.delay` (seconds, with the contract's bucket
//!   boundaries). The gauges `retryscope.breaker.state` and
//!   `retryscope.budget.available` are registered separately, once per breaker or
//!   budget ([`register_breaker_gauge`], [`register_budget_gauge`],
//!   [`register_throttle_gauge`]). Every attribute is bounded; the names are in
//!   [`names`].
//! - **Spans** through `tracing`, bridged to OpenTelemetry by
//!   tracing-opentelemetry: one INTERNAL span per operation (named after the
//!   operation, else `retry {dependency}`), a child of the span current when the
//!   operation starts, and under it one CLIENT span per attempt that is entered
//!   for every poll of the attempt, so code inside the attempt sees it as
//!   [`tracing::Span::current()`]. [`MakeAttemptSpan`] lets integrations shape
//!   attempt spans (HTTP names and attributes).
//! - **Logs**: one `retryscope.backoff` event per retry (target `retryscope`,
//!   level INFO), which is also the operation span's event for the wait.
//!
//! The library depends on the OpenTelemetry *API* only. The `otlp` feature adds
//! a setup helper that builds SDK providers exporting over OTLP; the
//! `prometheus` feature, a Prometheus exposition of the metrics.
//!
//! # Quickstart
//!
//! ```no_run
//! # #[cfg(feature = "otlp")]
//! # mod with_otlp {
//! use retryscope::{Policy, Retryable};
//! use retryscope_otel::OtelObserver;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Reads OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
//!     // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and RUST_LOG.
//!     let telemetry = retryscope_otel::init_otlp()?;
//!     // Create once, after the providers are installed; clone per call.
//!     let observer = OtelObserver::global();
//!
//!     let stock = (|| async { Ok::<u32, std::io::Error>(7) })
//!         .retry(Policy::interactive())
//!         .observe(observer.clone())
//!         .dependency("inventory")
//!         .operation("count_stock")
//!         .await?;
//!     println!("{stock} in stock");
//!
//!     // Flushes and shuts down the providers (dropping the guard does too).
//!     telemetry.shutdown()?;
//!     Ok(())
//! }
//! # }
//! # fn main() {}
//! ```
//!
//! Without the `otlp` feature, install any OpenTelemetry SDK yourself and pass a
//! [`Meter`](opentelemetry::metrics::Meter) to [`OtelObserver::from_meter`]; add
//! `tracing_opentelemetry::layer()` to your subscriber for the spans, and install a
//! propagator (`opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new())`)
//! so that integrations put a `traceparent` on every attempt — `init_otlp` does all
//! three.
//!
//! # Cost and cardinality
//!
//! Attribute values are `&'static str`, integers, or the operation's dependency
//! and operation names, interned in process-wide tables that admit at most
//! [`MAX_DEPENDENCIES`] names each (the rest are `_OTHER`): a name seen before
//! costs a lookup and no allocation. Attempt numbers are clamped to the policy's
//! attempt limit; an HTTP status is reported as its code only within 100..=599,
//! else `_OTHER`.
//!
//! # Further reading
//!
//! - The telemetry contract — every metric, span, attribute and log field, and
//!   the Prometheus series they become: [docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md).
//! - The runbook — the alerts, the dashboards, and what to do when they fire:
//!   [docs/runbook.md](https://github.com/retryscope/retryscope/blob/main/docs/runbook.md).
//! - The public API and what semver covers: [docs/api.md](https://github.com/retryscope/retryscope/blob/main/docs/api.md).
//!
//! [docs/telemetry.md]: https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md
#![cfg_attr(docsrs, feature(doc_cfg))]

mod dependency;
mod gauges;
mod incoming;
mod labels;
mod log;
mod metrics;
pub mod names;
mod observer;
#[cfg(feature = "prometheus")]
mod prometheus;
mod propagate;
#[cfg(feature = "otlp")]
mod setup;
mod spans;
mod upstream;

pub use dependency::{
    DependencyGuards, DependencyGuardsBuilder, Factory, Guards, MAX_DEPENDENCIES, MAX_PORTS_PER_HOST,
    OVERFLOW, bounded_dependency, bounded_operation, dependency_name,
};
pub use gauges::{register_breaker_gauge, register_budget_gauge, register_throttle_gauge};
pub use incoming::{
    ATTEMPT_HEADER, ENVOY_ATTEMPT_HEADER, EXHAUSTED_HEADER, GRPC_PREVIOUS_ATTEMPTS, IncomingAttempt,
    IncomingRequests, MAX_TRUSTED_ATTEMPT,
};
pub use labels::error_type_str;
pub use log::{RetryLog, RetryLogOperation, stop_reason_str};
pub use metrics::RetryMetrics;
pub use observer::{OtelAttempt, OtelObserver, OtelOperation, scope};
#[cfg(feature = "prometheus")]
pub use prometheus::{MetricsServer, PrometheusMetrics, PrometheusSetupError};
pub use propagate::inject_context;
#[cfg(feature = "otlp")]
pub use setup::{OtlpConfig, Protocol, SetupError, TelemetryGuard, init_otlp};
pub use spans::{AttemptInfo, DefaultAttemptSpan, MakeAttemptSpan, default_attempt_span};
pub use upstream::Upstream;
