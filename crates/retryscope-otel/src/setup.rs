//! OTLP setup (feature `otlp`): SDK tracer and meter providers exporting over
//! OTLP, configured from the standard `OTEL_*` environment variables, plus the
//! `tracing` subscriber that bridges spans to OpenTelemetry.
//!
//! Exporting never blocks an instrumented call: finished spans go into the batch
//! span processor's bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048 by default)
//! and are *dropped* when it is full; a background thread exports them.
//! Metrics are aggregated in memory and exported by the periodic reader's own
//! thread (`OTEL_METRIC_EXPORT_INTERVAL`, 60 s by default). A collector that is
//! down or slow therefore costs lost telemetry, never a slower or hung request.

use crate::observer::scope;
use opentelemetry::propagation::TextMapCompositePropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::error::Error;
use std::fmt;
use std::time::Duration;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt as log_fmt};

/// The environment variable that selects the OTLP transport.
const PROTOCOL_VAR: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";

/// How long [`TelemetryGuard::shutdown`] waits for the last spans to go out.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Crates whose own `tracing` output must not reach the OpenTelemetry layer: they
/// carry the exports, and tracing the exporter would feed it its own spans.
const EXPORTER_CRATES: &str = "h2=off,hyper=off,hyper_util=off,tonic=off,tower=off,reqwest=off,opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off";

/// Builds the providers, sets them as the OpenTelemetry globals, installs the
/// W3C TraceContext and Baggage propagators (so integrations put a `traceparent`
/// on every attempt) and a `tracing` subscriber, all from the environment:
///
/// - `OTEL_EXPORTER_OTLP_PROTOCOL`: `grpc` or `http/protobuf` (the default);
/// - `OTEL_EXPORTER_OTLP_ENDPOINT` (and the per-signal variants), `_HEADERS`,
///   `_TIMEOUT`, `_COMPRESSION`: read by the exporters;
/// - `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`: read by the SDK's resource;
/// - `OTEL_BSP_*`, `OTEL_METRIC_EXPORT_INTERVAL` (60 s by default; the shipped
///   alert rules are written to hold at that interval): read by the SDK's
///   processors;
/// - `RUST_LOG`: filters the log lines printed to stderr (default `info`).
///
/// gRPC must be set up inside a multi-threaded tokio runtime: the channel's
/// worker runs on it. Keep the returned guard alive: dropping it flushes and
/// shuts down both providers. See [`OtlpConfig`] to configure in code.
pub fn init_otlp() -> Result<TelemetryGuard, SetupError> {
    OtlpConfig::default().init()
}

/// An OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// OTLP over gRPC (port 4317 by convention).
    Grpc,
    /// OTLP over HTTP with protobuf bodies (port 4318 by convention).
    HttpProtobuf,
}

impl Protocol {
    /// The protocol named by `OTEL_EXPORTER_OTLP_PROTOCOL`, `http/protobuf` when
    /// unset (the specification's default).
    pub fn from_env() -> Result<Self, SetupError> {
        match std::env::var(PROTOCOL_VAR) {
            Ok(value) => value.parse(),
            Err(_) => Ok(Protocol::HttpProtobuf),
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = SetupError;

    fn from_str(value: &str) -> Result<Self, SetupError> {
        match value.trim() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" | "" => Ok(Protocol::HttpProtobuf),
            other => Err(SetupError::UnsupportedProtocol(other.to_owned())),
        }
    }
}

/// OTLP setup configured in code; anything not set comes from the environment
/// as described for [`init_otlp`].
///
/// ```no_run
/// use retryscope_otel::{OtlpConfig, Protocol};
///
/// # fn main() -> Result<(), retryscope_otel::SetupError> {
/// let telemetry = OtlpConfig::default()
///     .protocol(Protocol::HttpProtobuf)
///     .endpoint("http://127.0.0.1:4318")
///     .service_name("checkout")
///     .init()?;
/// # drop(telemetry);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct OtlpConfig {
    protocol: Option<Protocol>,
    endpoint: Option<String>,
    service_name: Option<String>,
    metric_interval: Option<Duration>,
    default_log_filter: Option<String>,
    keep_propagator: bool,
}

impl OtlpConfig {
    /// Selects the transport instead of reading `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = Some(protocol);
        self
    }

    /// The collector's base URL, e.g. `http://127.0.0.1:4317` (gRPC) or
    /// `http://127.0.0.1:4318` (HTTP; `/v1/traces` and `/v1/metrics` are
    /// appended), instead of `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The `service.name` resource attribute, instead of `OTEL_SERVICE_NAME`.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// The log filter used when `RUST_LOG` is unset (default `info`, which prints
    /// one line per retry). Programs that retry a lot may prefer `warn`.
    pub fn default_log_filter(mut self, directives: impl Into<String>) -> Self {
        self.default_log_filter = Some(directives.into());
        self
    }

    /// Leaves the global text-map propagator as it is, for applications that
    /// install their own (B3, Jaeger, a composite). By default [`init`](Self::init)
    /// installs W3C TraceContext and Baggage.
    pub fn keep_propagator(mut self) -> Self {
        self.keep_propagator = true;
        self
    }

    /// How often metrics are exported, instead of `OTEL_METRIC_EXPORT_INTERVAL`.
    pub fn metric_interval(mut self, interval: Duration) -> Self {
        self.metric_interval = Some(interval);
        self
    }

    /// Builds the providers without installing anything globally: for tests and
    /// applications that assemble their own subscriber. Use
    /// [`TelemetryGuard::tracer_provider`] and [`TelemetryGuard::meter_provider`].
    pub fn build(self) -> Result<TelemetryGuard, SetupError> {
        self.build_with(|meters| meters)
    }

    /// Like [`build`](Self::build), letting `meters` add to the meter provider
    /// before it is built — e.g. a second reader that feeds an in-process report.
    pub fn build_with(
        self,
        meters: impl FnOnce(MeterProviderBuilder) -> MeterProviderBuilder,
    ) -> Result<TelemetryGuard, SetupError> {
        let protocol = match self.protocol {
            Some(protocol) => protocol,
            None => Protocol::from_env()?,
        };
        if protocol == Protocol::Grpc {
            check_grpc_runtime()?;
        }
        let resource = self.resource();
        let spans = self.span_exporter(protocol)?;
        let metrics = self.metric_exporter(protocol)?;
        let tracer_provider =
            SdkTracerProvider::builder().with_batch_exporter(spans).with_resource(resource.clone()).build();
        let mut reader = PeriodicReader::builder(metrics);
        if let Some(interval) = self.metric_interval {
            reader = reader.with_interval(interval);
        }
        let meter_provider =
            meters(SdkMeterProvider::builder().with_reader(reader.build()).with_resource(resource)).build();
        Ok(TelemetryGuard { tracer_provider, meter_provider, shut_down: false })
    }

    /// Builds the providers, installs the `tracing` subscriber (OpenTelemetry
    /// layer plus a stderr log layer filtered by `RUST_LOG`), then sets the
    /// providers and (unless [`keep_propagator`](Self::keep_propagator)) the W3C
    /// TraceContext and Baggage propagators as the OpenTelemetry globals.
    pub fn init(self) -> Result<TelemetryGuard, SetupError> {
        self.init_with(|meters| meters)
    }

    /// Like [`init`](Self::init), letting `meters` add to the meter provider
    /// before it is built.
    pub fn init_with(
        self,
        meters: impl FnOnce(MeterProviderBuilder) -> MeterProviderBuilder,
    ) -> Result<TelemetryGuard, SetupError> {
        let default_log = self.default_log_filter.clone().unwrap_or_else(|| "info".to_owned());
        let keep_propagator = self.keep_propagator;
        let guard = self.build_with(meters)?;
        guard.install_subscriber(&default_log)?;
        opentelemetry::global::set_tracer_provider(guard.tracer_provider.clone());
        opentelemetry::global::set_meter_provider(guard.meter_provider.clone());
        if !keep_propagator {
            // Without a propagator, OpenTelemetry's default injects nothing and
            // downstream spans never join the attempts that caused them.
            opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
                Box::new(TraceContextPropagator::new()),
                Box::new(BaggagePropagator::new()),
            ]));
        }
        Ok(guard)
    }

    fn resource(&self) -> Resource {
        let builder = Resource::builder();
        match &self.service_name {
            Some(name) => builder.with_service_name(name.clone()).build(),
            None => builder.build(),
        }
    }

    fn span_exporter(&self, protocol: Protocol) -> Result<SpanExporter, SetupError> {
        let builder = SpanExporter::builder();
        let exporter = match protocol {
            Protocol::Grpc => match &self.endpoint {
                Some(endpoint) => builder.with_tonic().with_endpoint(endpoint.clone()).build(),
                None => builder.with_tonic().build(),
            },
            Protocol::HttpProtobuf => match &self.endpoint {
                Some(endpoint) => builder.with_http().with_endpoint(signal_url(endpoint, "traces")).build(),
                None => builder.with_http().build(),
            },
        };
        exporter.map_err(SetupError::exporter)
    }

    fn metric_exporter(&self, protocol: Protocol) -> Result<MetricExporter, SetupError> {
        let builder = MetricExporter::builder();
        let exporter = match protocol {
            Protocol::Grpc => match &self.endpoint {
                Some(endpoint) => builder.with_tonic().with_endpoint(endpoint.clone()).build(),
                None => builder.with_tonic().build(),
            },
            Protocol::HttpProtobuf => match &self.endpoint {
                Some(endpoint) => builder.with_http().with_endpoint(signal_url(endpoint, "metrics")).build(),
                None => builder.with_http().build(),
            },
        };
        exporter.map_err(SetupError::exporter)
    }
}

/// An OTLP/HTTP endpoint given in code is used as is by the exporter, so the
/// signal's path is added here, as the exporter does for the environment variable.
fn signal_url(base: &str, signal: &str) -> String {
    format!("{}/v1/{signal}", base.trim_end_matches('/'))
}

/// Tonic's channel spawns its worker on the current tokio runtime, and the SDK's
/// export thread blocks on it: without a runtime that runs tasks on other
/// threads, exports would panic or never complete.
fn check_grpc_runtime() -> Result<(), SetupError> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread => Err(
            SetupError::Runtime("OTLP/gRPC needs a multi-threaded tokio runtime, not a current-thread one"),
        ),
        Ok(_) => Ok(()),
        Err(_) => Err(SetupError::Runtime("OTLP/gRPC must be set up inside a tokio runtime")),
    }
}

/// Owns the SDK providers. Dropping it flushes and shuts them down; call
/// [`shutdown`](Self::shutdown) to see errors.
#[derive(Debug)]
#[must_use = "dropping the guard shuts telemetry down"]
pub struct TelemetryGuard {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    shut_down: bool,
}

impl TelemetryGuard {
    /// The tracer provider.
    pub fn tracer_provider(&self) -> &SdkTracerProvider {
        &self.tracer_provider
    }

    /// The meter provider.
    pub fn meter_provider(&self) -> &SdkMeterProvider {
        &self.meter_provider
    }

    /// Flushes and shuts down both providers, reporting what failed (an
    /// unreachable collector, typically). Both are shut down even if one fails.
    pub fn shutdown(mut self) -> Result<(), SetupError> {
        self.shut_down = true;
        let traces = self.tracer_provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        let metrics = self.meter_provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        match (traces.err(), metrics.err()) {
            (None, None) => Ok(()),
            (traces, metrics) => Err(SetupError::Shutdown { traces, metrics }),
        }
    }

    fn install_subscriber(&self, default_log: &str) -> Result<(), SetupError> {
        let tracer = self.tracer_provider.tracer_with_scope(scope());
        let otel_filter = EnvFilter::try_new(format!("info,{EXPORTER_CRATES}"))
            .map_err(|e| SetupError::Subscriber(Box::new(e)))?;
        let log_filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_log));
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(tracer).with_filter(otel_filter))
            .with(log_fmt::layer().with_writer(std::io::stderr).with_filter(log_filter))
            .try_init()
            .map_err(|e| SetupError::Subscriber(Box::new(e)))
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if !self.shut_down {
            // Errors have nowhere to go from a destructor; `shutdown` reports them.
            let _ = self.tracer_provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
            let _ = self.meter_provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        }
    }
}

/// Why telemetry could not be set up or shut down.
#[derive(Debug)]
#[non_exhaustive]
pub enum SetupError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names a protocol this crate does not export
    /// (only `grpc` and `http/protobuf` are built in).
    UnsupportedProtocol(String),
    /// gRPC was requested outside a suitable tokio runtime.
    Runtime(&'static str),
    /// An exporter could not be built (e.g. an invalid endpoint); the
    /// exporter's error is the [`source`](Error::source).
    Exporter(opentelemetry_otlp::ExporterBuildError),
    /// A global `tracing` subscriber is already installed, or the filter is
    /// invalid; `tracing-subscriber`'s error is the [`source`](Error::source).
    Subscriber(Box<dyn Error + Send + Sync + 'static>),
    /// Flushing or shutting down failed; the providers are shut down anyway.
    /// The [`source`](Error::source) is the traces' error, else the metrics'.
    Shutdown {
        /// Why the tracer provider's shutdown failed, if it did.
        traces: Option<opentelemetry_sdk::error::OTelSdkError>,
        /// Why the meter provider's shutdown failed, if it did.
        metrics: Option<opentelemetry_sdk::error::OTelSdkError>,
    },
}

impl SetupError {
    fn exporter(error: opentelemetry_otlp::ExporterBuildError) -> Self {
        SetupError::Exporter(error)
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::UnsupportedProtocol(p) => {
                write!(f, "unsupported OTLP protocol {p:?} (use grpc or http/protobuf)")
            }
            SetupError::Runtime(why) => f.write_str(why),
            // The causes are the sources: printing them here too would repeat
            // them in every report that walks the chain.
            SetupError::Exporter(_) => f.write_str("cannot build the OTLP exporter"),
            SetupError::Subscriber(_) => f.write_str("cannot install the tracing subscriber"),
            SetupError::Shutdown { traces, metrics } => {
                let failed = match (traces.is_some(), metrics.is_some()) {
                    (true, true) => "traces and metrics",
                    (true, false) => "traces",
                    _ => "metrics",
                };
                write!(f, "telemetry shutdown failed for {failed}")
            }
        }
    }
}

impl Error for SetupError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            SetupError::Exporter(e) => Some(e),
            SetupError::Subscriber(e) => Some(&**e),
            SetupError::Shutdown { traces, metrics } => {
                traces.as_ref().or(metrics.as_ref()).map(|e| e as &(dyn Error + 'static))
            }
            SetupError::UnsupportedProtocol(_) | SetupError::Runtime(_) => None,
        }
    }
}
