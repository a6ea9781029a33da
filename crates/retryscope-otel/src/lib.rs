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
//!   boundaries). The gauges of a dependency's guards (`retryscope.breaker.state`,
//!   `retryscope.budget.available`, whatever its guards publish) are registered
//!   separately, once per registry or dependency ([`publish_dependency_gauges`],
//!   [`publish_guard_gauges`]). Every attribute is bounded; the names are in
//!   [`names`].
//! - **Spans** through `tracing`, bridged to OpenTelemetry by
//!   tracing-opentelemetry: one CLIENT span per attempt, a child of the span
//!   current when the operation starts (the attempts of one operation are
//!   siblings, as in the OpenTelemetry HTTP conventions' retry example, so a call
//!   that succeeds at once costs one span), entered for every poll of the
//!   attempt, so code inside the attempt sees it as [`tracing::Span::current()`].
//!   [`MakeAttemptSpan`] lets integrations shape attempt spans (HTTP names and
//!   attributes); [`OtelObserver::with_operation_spans`] adds an INTERNAL span
//!   per operation above its attempts.
//! - **Logs**: one `retryscope.backoff` event per retry (target `retryscope`,
//!   level INFO), which is also an event of the failed attempt's span, and one
//!   WARN `retryscope.gave_up` event per operation that gave up.
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
//!     if let Err(error) = telemetry.shutdown() {
//!         // The collector was down or slow: the telemetry is lost, not the work.
//!         tracing::warn!(error = &error as &dyn std::error::Error, "telemetry not flushed");
//!     }
//!     Ok(())
//! }
//! # }
//! # fn main() {}
//! ```
//!
//! # An existing service
//!
//! A service with its own `tracing` subscriber keeps it: `OtlpConfig::build`
//! installs nothing and returns a `Telemetry` whose `layer()` joins the
//! service's `registry()` with a filter of its own (retryscope's spans are INFO,
//! target `retryscope`; keep the service's filter on its fmt layer), then
//! `install_globals()` sets the providers and the propagator. `init_otlp` in
//! such a program fails with `SetupError::SubscriberExists`, which says so. See
//! `OtlpConfig::build` for the snippet, and `OtlpConfig::with_prometheus` for a
//! Prometheus scrape beside OTLP, to mount on the service's router (features
//! `otlp` and `prometheus`).
//!
//! # Versions
//!
//! This crate is bound to opentelemetry 0.33, opentelemetry_sdk 0.33,
//! opentelemetry-otlp 0.33 and tracing-opentelemetry 0.34, re-exported here
//! ([`opentelemetry`], `opentelemetry_sdk`, [`tracing_opentelemetry`],
//! `tracing_subscriber`): providers or layers of another version are other
//! types, and telemetry sent through them never reaches retryscope's.
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
//! [`MAX_DEPENDENCIES`](retryscope::dependency::MAX_DEPENDENCIES) names each (the rest are `_OTHER`): a name seen before
//! costs a lookup and no allocation. Only the labels fold: a
//! [`Dependencies`](retryscope::dependency::Dependencies) keeps guards of their own for hosts past the bound
//! (the 1,000 it used last). Attempt numbers are clamped to the policy's
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

mod gauges;
mod incoming;
mod labels;
mod log;
mod meter_choice;
mod metrics;
pub mod names;
mod observer;
mod operation;
mod outcome_slot;
#[cfg(feature = "prometheus")]
mod prometheus;
mod propagate;
mod service;
#[cfg(feature = "otlp")]
mod setup;
mod spans;
pub mod telemetry_state;
mod upstream;

pub use gauges::{publish_dependency_gauges, publish_guard_gauges, register_guard_gauges};
pub use incoming::{
    ATTEMPT_HEADER, ENVOY_ATTEMPT_HEADER, EXHAUSTED_HEADER, GRPC_PREVIOUS_ATTEMPTS, IncomingAttempt,
    IncomingRequests, MAX_TRUSTED_ATTEMPT, bounded_route,
};
pub use labels::{bounded_operation, error_type_str};
pub use log::{REQUEST_ID_HEADER, RetryLog, RetryLogOperation, request_id, stop_reason_str};
pub use meter_choice::MeterChoice;
pub use metrics::RetryMetrics;
pub use observer::{OtelObserver, scope};
pub use operation::{OtelAttempt, OtelOperation};
pub use outcome_slot::OutcomeSlot;
#[cfg(feature = "prometheus")]
pub use prometheus::{MetricsServer, PrometheusMetrics, PrometheusSetupError};
pub use propagate::{inject_context, inject_span_context};
#[cfg(feature = "otlp")]
pub use setup::{
    ExportFilter, OtlpConfig, Protocol, SetupError, ShutdownError, SignalFailure, SpanLayer, Telemetry,
    W3cPropagator, init_otlp,
};
pub use spans::{AttemptInfo, DefaultAttemptSpan, MakeAttemptSpan, default_attempt_span};
pub use upstream::Upstream;

// The OpenTelemetry crates this API is bound to, re-exported so that a program
// uses the same versions: an `opentelemetry` one minor version apart is another
// crate to the compiler, and its global providers are not ours (telemetry
// through them goes nowhere, silently).
pub use opentelemetry;
#[cfg(any(feature = "otlp", feature = "prometheus"))]
pub use opentelemetry_sdk;
pub use tracing_opentelemetry;
#[cfg(feature = "otlp")]
pub use tracing_subscriber;
