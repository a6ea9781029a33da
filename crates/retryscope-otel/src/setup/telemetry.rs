//! What a setup hands back: the providers, the propagator and the `tracing`
//! layer, for a service to compose with its own subscriber, or installed in one
//! call by [`init`](super::OtlpConfig::init).

use super::error::{ShutdownError, SignalFailure};
use super::export_filter::ExportFilter;
use super::export_health::SpanLoss;
use super::propagator::W3cPropagator;
use super::protocol::Route;
use crate::observer::{OtelObserver, scope};
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::sync::Arc;
use std::time::Duration;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Filtered;
use tracing_subscriber::registry::LookupSpan;

/// How long [`Telemetry::shutdown`] waits for each provider's last export.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Crates whose own `tracing` output must not reach the OpenTelemetry layer: they
/// carry the exports, and tracing the exporter would feed it its own spans.
pub(crate) const EXPORTER_CRATES: &str = "h2=off,hyper=off,hyper_util=off,tonic=off,tower=off,reqwest=off,opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off";

/// The layer [`Telemetry::layer`] returns: tracing-opentelemetry's, behind a
/// filter of its own ([`ExportFilter`]).
pub type SpanLayer<S> = Filtered<OpenTelemetryLayer<S, SdkTracer>, ExportFilter, S>;

/// The telemetry a setup built: SDK tracer and meter providers exporting over
/// OTLP (and to Prometheus, if asked), plus what a service needs to wire them
/// into its own `tracing` subscriber.
///
/// [`OtlpConfig::build`](super::OtlpConfig::build) installs nothing: add
/// [`layer`](Self::layer) to your subscriber and call
/// [`install_globals`](Self::install_globals).
/// [`init_otlp`](super::init_otlp) does both. Keep the value alive as long as
/// the program exports; at exit call [`shutdown`](Self::shutdown) and log its
/// error (dropping the value shuts down too, silently).
#[derive(Debug)]
#[must_use = "dropping the telemetry shuts its providers down"]
pub struct Telemetry {
    pub(crate) tracer_provider: SdkTracerProvider,
    pub(crate) meter_provider: SdkMeterProvider,
    /// Where traces, then metrics, go: named by shutdown errors.
    pub(crate) routes: [Route; 2],
    /// What failed span exports lost: the batch processor's shutdown does not
    /// say when its last export failed, so the shutdown asks this.
    pub(crate) span_loss: Arc<SpanLoss>,
    /// The directives of [`layer`](Self::layer)'s filter, checked at build.
    pub(crate) span_filter: String,
    /// The events the program opted in to export, checked at build.
    pub(crate) event_filter: Option<String>,
    pub(crate) keep_propagator: bool,
    #[cfg(feature = "prometheus")]
    pub(crate) prometheus: Option<crate::PrometheusMetrics>,
    pub(crate) shut_down: bool,
}

impl Telemetry {
    /// The tracer provider.
    pub fn tracer_provider(&self) -> &SdkTracerProvider {
        &self.tracer_provider
    }

    /// The meter provider: the OTLP reader's, and the Prometheus reader's when
    /// the setup asked for one.
    pub fn meter_provider(&self) -> &SdkMeterProvider {
        &self.meter_provider
    }

    /// A meter with this crate's instrumentation scope.
    pub fn meter(&self) -> Meter {
        self.meter_provider.meter_with_scope(scope())
    }

    /// An observer recording into this meter provider, for engine retries
    /// (`.observe(..)`) in a program that does not install the globals.
    pub fn observer(&self) -> OtelObserver {
        OtelObserver::from_meter(&self.meter())
    }

    /// The W3C TraceContext and Baggage propagators, as one
    /// ([`W3cPropagator`]): what [`install_globals`](Self::install_globals)
    /// installs unless told to keep the program's own.
    pub fn propagator() -> W3cPropagator {
        W3cPropagator::new()
    }

    /// The `tracing` layer that turns spans into OpenTelemetry spans exported
    /// by this tracer provider, for the program's own
    /// `tracing_subscriber::registry()`.
    ///
    /// It carries a filter of its own (a per-layer filter, [`ExportFilter`]), so
    /// what the program filters for its logs does not decide what is exported:
    ///
    /// - **Spans**: retryscope's (target `retryscope`, level INFO) always pass,
    ///   the exporter's own crates (hyper, reqwest, tonic, h2, tower,
    ///   opentelemetry) never do, tower-http's request spans (`TraceLayer`'s,
    ///   made at DEBUG) pass when the span filter names no `tower_http`
    ///   target and admits INFO by default, and the rest passes at the span
    ///   filter ([`OtlpConfig::span_filter`], `info` by default).
    /// - **Events** (they become span events of the span current when they are
    ///   emitted): only retryscope's own — the retry log and the export-health
    ///   lines, target `retryscope` — and those the program opts in to with
    ///   [`OtlpConfig::event_filter`]. Another crate's log line is never
    ///   exported by default, even when it is logged inside an attempt span;
    ///   sqlx's statement log (target `sqlx::query`, which holds the statement's
    ///   text) never is, even when opted in.
    ///
    /// A filter added to the registry *globally* (`.with(EnvFilter)`
    /// rather than `.with(fmt.with_filter(EnvFilter))`) still applies to every
    /// layer: put it on the fmt layer, or give it a `retryscope=info` directive
    /// *and* the targets of the spans the calls run in (`checkout=info` for a
    /// crate `checkout`, `tower_http=debug` under tower-http's `TraceLayer`).
    /// With `retryscope=info` alone the caller's span is filtered out, and each
    /// attempt span is exported as the root of a trace of its own.
    ///
    /// What the layer records, on purpose, is only what the telemetry contract
    /// names: no source locations (`code.*`), thread names or ids, nor busy and
    /// idle times (`busy_ns`, `idle_ns`, which cost two clock reads per poll of
    /// an attempt).
    ///
    /// [`OtlpConfig::span_filter`]: super::OtlpConfig::span_filter
    /// [`OtlpConfig::event_filter`]: super::OtlpConfig::event_filter
    pub fn layer<S>(&self) -> SpanLayer<S>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        let tracer = self.tracer_provider.tracer_with_scope(scope());
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(ExportFilter::checked(&self.span_filter, self.event_filter.as_deref()))
    }

    /// Sets the tracer and meter providers as the OpenTelemetry globals, and the
    /// [`propagator`](Self::propagator) as the global text-map propagator unless
    /// the setup said [`keep_propagator`](super::OtlpConfig::keep_propagator).
    ///
    /// Call it before building clients and observers: their instruments bind to
    /// the meter provider that is global when they are created. Without a
    /// propagator no `traceparent` leaves the process.
    pub fn install_globals(&self) {
        opentelemetry::global::set_tracer_provider(self.tracer_provider.clone());
        opentelemetry::global::set_meter_provider(self.meter_provider.clone());
        if !self.keep_propagator {
            opentelemetry::global::set_text_map_propagator(Self::propagator());
        }
    }

    /// The Prometheus side of a setup made with
    /// [`OtlpConfig::with_prometheus`](super::OtlpConfig::with_prometheus): render
    /// or mount it on the service's router. `None` otherwise.
    #[cfg(feature = "prometheus")]
    pub fn prometheus(&self) -> Option<&crate::PrometheusMetrics> {
        self.prometheus.as_ref()
    }

    /// Flushes and shuts down both providers, waiting at most 5 s for each.
    /// Both are shut down even if one fails.
    ///
    /// # Errors
    ///
    /// A signal's last export failed (the collector is down, slow, or refused
    /// it). The error names each signal and its endpoint, and for traces the
    /// number of spans lost since exports began failing
    /// ([`SignalFailure::lost_spans`]), with the SDK's error as the source:
    /// `telemetry was not flushed: traces to http://…/v1/traces (4 spans
    /// lost), metrics to http://…/v1/metrics`. Log it and exit normally: no
    /// program should fail because its collector is down.
    pub fn shutdown(mut self) -> Result<(), ShutdownError> {
        self.shut_down = true;
        let [traces, metrics] = &self.routes;
        let mut failures = Vec::with_capacity(2);
        // The batch processor's shutdown succeeds even when its final export
        // failed: what the exporter saw decides whether traces were flushed.
        let flushed = self.tracer_provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        let lost = self.span_loss.unresolved();
        let traces_failure = match (flushed, lost) {
            (Err(error), lost) => Some((error, lost.map(|(spans, _)| spans))),
            (Ok(()), Some((spans, error))) => Some((error, Some(spans))),
            (Ok(()), None) => None,
        };
        if let Some((error, lost)) = traces_failure {
            failures.push(SignalFailure::new(traces.signal, &traces.endpoint, error).with_lost_spans(lost));
        }
        if let Err(e) = self.meter_provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            failures.push(SignalFailure::new(metrics.signal, &metrics.endpoint, e));
        }
        match ShutdownError::new(failures) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if !self.shut_down {
            // Errors have nowhere to go from a destructor; `shutdown` reports them.
            let _ = self.tracer_provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
            let _ = self.meter_provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        }
    }
}
