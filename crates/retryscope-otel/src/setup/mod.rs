//! OTLP setup (feature `otlp`): SDK tracer and meter providers exporting over
//! OTLP, configured from the standard `OTEL_*` environment variables, and the
//! `tracing` layer that bridges spans to OpenTelemetry.
//!
//! Two ways in: [`init_otlp`] for a program that has no `tracing` subscriber
//! and no OpenTelemetry setup yet (it installs both), and
//! [`OtlpConfig::build`] for a service that has its own: it returns a
//! [`Telemetry`] to compose ([`Telemetry::layer`] on the service's registry,
//! [`Telemetry::install_globals`]) and installs nothing.
//!
//! Exporting never blocks an instrumented call: finished spans go into the batch
//! span processor's bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048 by default)
//! and are *dropped* when it is full; a background thread exports them.
//! Metrics are aggregated in memory and exported by the periodic reader's own
//! thread (`OTEL_METRIC_EXPORT_INTERVAL`, 60 s by default). A collector that is
//! down or slow therefore costs lost telemetry, never a slower or hung request,
//! and [`Telemetry::shutdown`]'s error is to be logged, not returned from `main`.
//! While the program runs, failed span exports are logged when they start and
//! when they stop failing (target `retryscope`), and the spans they lose are
//! counted (`retryscope.telemetry.spans.lost`).

mod error;
mod export_filter;
mod export_health;
mod propagator;
mod protocol;
mod telemetry;

pub use error::{SetupError, ShutdownError, SignalFailure};
pub use export_filter::ExportFilter;
pub use propagator::W3cPropagator;
pub use protocol::Protocol;
pub use telemetry::{SpanLayer, Telemetry};

use crate::observer::scope;
use export_health::ReportingExporter;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use protocol::{Route, Signal};
use std::sync::Arc;
use std::time::Duration;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{FilterExt as _, filter_fn};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The stderr log's filter when neither `RUST_LOG` nor the code sets one: one
/// line per retry and per give-up, and the OpenTelemetry SDK's own lines only
/// from warnings up (it says at INFO that it installed its globals).
const DEFAULT_LOG: &str = "info,opentelemetry=warn,opentelemetry_sdk=warn,opentelemetry_otlp=warn";

/// Sets up telemetry for a program that has none yet: builds the providers,
/// installs a `tracing` subscriber (retryscope's [layer](Telemetry::layer)
/// plus a stderr log), and sets the OpenTelemetry globals: the providers and
/// the W3C TraceContext and Baggage propagators, so that integrations put a
/// `traceparent` on every attempt. All from the environment:
///
/// - `OTEL_EXPORTER_OTLP_PROTOCOL` and the per-signal
///   `OTEL_EXPORTER_OTLP_{TRACES,METRICS}_PROTOCOL`: `http/protobuf` (the
///   default), `http/json`, or `grpc` (feature `otlp-grpc`); a protocol not
///   compiled in is refused, naming the feature;
/// - `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT`,
///   `_HEADERS`, `_TIMEOUT`, `_COMPRESSION` (`gzip` with `otlp-gzip` /
///   `otlp-grpc-gzip`), `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`:
///   read by opentelemetry-otlp's exporter builders, general and per signal;
/// - `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`: read by the SDK's resource;
/// - `OTEL_BSP_*`, `OTEL_METRIC_EXPORT_INTERVAL` (60 s by default; the shipped
///   alert rules are written to hold at that interval): read by the SDK's
///   processors;
/// - `RUST_LOG`: filters the log printed to stderr (default `info`: one line
///   per retry and per give-up). [`OtlpConfig::no_log`] turns it off.
///
/// OTLP/gRPC must be set up inside a multi-threaded tokio runtime: the channel's
/// worker runs on it. Keep the returned [`Telemetry`] alive; at exit, call
/// [`Telemetry::shutdown`] and log its error.
///
/// # Errors
///
/// Besides a bad configuration: a program that already has a global `tracing`
/// subscriber gets [`SetupError::SubscriberExists`], which names the way out
/// ([`OtlpConfig::build`] and [`Telemetry::layer`]).
pub fn init_otlp() -> Result<Telemetry, SetupError> {
    OtlpConfig::default().init()
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
#[derive(Debug, Clone)]
#[must_use = "an OtlpConfig does nothing until `build` or `init` is called"]
pub struct OtlpConfig {
    protocol: Option<Protocol>,
    endpoint: Option<String>,
    service_name: Option<String>,
    metric_interval: Option<Duration>,
    default_log_filter: Option<String>,
    log: bool,
    span_filter: Option<String>,
    event_filter: Option<String>,
    keep_propagator: bool,
    #[cfg(feature = "prometheus")]
    prometheus: bool,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig {
            protocol: None,
            endpoint: None,
            service_name: None,
            metric_interval: None,
            default_log_filter: None,
            log: true,
            span_filter: None,
            event_filter: None,
            keep_propagator: false,
            #[cfg(feature = "prometheus")]
            prometheus: false,
        }
    }
}

impl OtlpConfig {
    /// Selects the transport of both signals instead of reading the protocol
    /// variables.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = Some(protocol);
        self
    }

    /// The collector's base URL, e.g. `http://127.0.0.1:4317` (gRPC) or
    /// `http://127.0.0.1:4318` (HTTP; `/v1/traces` and `/v1/metrics` are
    /// appended), instead of the endpoint variables.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The `service.name` resource attribute, instead of `OTEL_SERVICE_NAME`.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// How often metrics are exported, instead of `OTEL_METRIC_EXPORT_INTERVAL`.
    pub fn metric_interval(mut self, interval: Duration) -> Self {
        self.metric_interval = Some(interval);
        self
    }

    /// The filter of [`init`](Self::init)'s stderr log when `RUST_LOG` is unset
    /// (default `info`, which prints one line per retry, with the OpenTelemetry
    /// crates at `warn`). Programs that retry a
    /// lot may prefer `warn`.
    pub fn default_log_filter(mut self, directives: impl Into<String>) -> Self {
        self.default_log_filter = Some(directives.into());
        self
    }

    /// [`init`](Self::init) installs no stderr log, only retryscope's layer.
    pub fn no_log(mut self) -> Self {
        self.log = false;
        self
    }

    /// What, besides retryscope's spans (which always pass), the
    /// [layer](Telemetry::layer) exports: `tracing` filter directives, `info`
    /// by default (every INFO span of the program, and tower-http's
    /// `TraceLayer` request spans, which it makes at DEBUG); `off` exports
    /// retryscope's spans only. A directive naming `tower_http` decides for
    /// its spans (`info,tower_http=off`).
    pub fn span_filter(mut self, directives: impl Into<String>) -> Self {
        self.span_filter = Some(directives.into());
        self
    }

    /// Which events, besides retryscope's own (which always pass), the
    /// [layer](Telemetry::layer) exports as span events: `tracing` filter
    /// directives naming the program's own targets, e.g. `checkout=info`. None
    /// by default: a log line of another crate is not telemetry retryscope
    /// was asked to export, and may carry what must not leave the process.
    ///
    /// Events of target `sqlx::query` (and its submodules) are never
    /// exported, even when the directives name them: sqlx puts the statement's
    /// text in them (`summary`, `db.statement`), and retryscope records no
    /// query text. Directives that do not parse are refused by
    /// [`build`](Self::build) ([`SetupError::Filter`]).
    pub fn event_filter(mut self, directives: impl Into<String>) -> Self {
        self.event_filter = Some(directives.into());
        self
    }

    /// Leaves the global text-map propagator as it is, for applications that
    /// install their own (B3, Jaeger, a composite). By default
    /// [`Telemetry::install_globals`] installs W3C TraceContext and Baggage.
    pub fn keep_propagator(mut self) -> Self {
        self.keep_propagator = true;
        self
    }

    /// Adds a Prometheus reader to the same meter provider, so that every
    /// metric is both exported over OTLP and scrapeable:
    /// [`Telemetry::prometheus`] renders it, to mount on the service's own
    /// router (or [`serve`](crate::PrometheusMetrics::serve) it).
    #[cfg(feature = "prometheus")]
    pub fn with_prometheus(mut self) -> Self {
        self.prometheus = true;
        self
    }

    /// Builds the providers and installs nothing: for a service that composes
    /// [`Telemetry::layer`] into its own subscriber and calls
    /// [`Telemetry::install_globals`], and for tests.
    ///
    /// The service's filter goes on its own fmt layer, so that it filters its
    /// logs only; retryscope's layer brings its own. (A filter added with
    /// `.with(filter)` on the registry filters every layer, and at `warn` drops
    /// retryscope's INFO spans.)
    ///
    /// ```no_run
    /// use tracing_subscriber::{EnvFilter, Layer as _, layer::SubscriberExt as _, util::SubscriberInitExt as _};
    ///
    /// # fn main() -> Result<(), retryscope_otel::SetupError> {
    /// let telemetry = retryscope_otel::OtlpConfig::default().build()?; // installs nothing
    /// tracing_subscriber::registry()
    ///     .with(tracing_subscriber::fmt::layer().with_filter(EnvFilter::new("warn"))) // the service's own
    ///     .with(telemetry.layer()) // retryscope's spans, with a filter of their own
    ///     .init();
    /// telemetry.install_globals(); // before building clients
    /// // … serve; at exit:
    /// if let Err(error) = telemetry.shutdown() {
    ///     tracing::warn!(error = &error as &dyn std::error::Error, "telemetry not flushed");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<Telemetry, SetupError> {
        self.build_with(|meters| meters)
    }

    /// Like [`build`](Self::build), letting `meters` add to the meter provider
    /// before it is built — e.g. a second reader that feeds an in-process report.
    pub fn build_with(
        self,
        meters: impl FnOnce(MeterProviderBuilder) -> MeterProviderBuilder,
    ) -> Result<Telemetry, SetupError> {
        let endpoint = self.endpoint.as_deref();
        let traces = Route::resolve(Signal::Traces, self.protocol, endpoint)?;
        let metrics = Route::resolve(Signal::Metrics, self.protocol, endpoint)?;
        if traces.protocol == Protocol::Grpc || metrics.protocol == Protocol::Grpc {
            check_grpc_runtime()?;
        }
        let span_filter = self.span_filter.clone().unwrap_or_else(|| "info".to_owned());
        // Refused here, loudly, rather than half-applied by the layer.
        ExportFilter::new(&span_filter, self.event_filter.as_deref())?;

        let resource = self.resource();
        // The retry log's `service`, for the observers built from here on.
        if let Some(name) = resource.get(&opentelemetry::Key::from_static_str("service.name")) {
            crate::service::set(name.as_str().as_ref());
        }
        let spans = span_exporter(&traces)?;
        let metric_exporter = metric_exporter(&metrics)?;
        let mut reader = PeriodicReader::builder(metric_exporter);
        if let Some(interval) = self.metric_interval {
            reader = reader.with_interval(interval);
        }
        let builder = SdkMeterProvider::builder().with_reader(reader.build()).with_resource(resource.clone());
        #[cfg(feature = "prometheus")]
        let (builder, registry) = match self.prometheus {
            true => {
                let registry = prometheus::Registry::new();
                let reader = crate::prometheus::reader(&registry).map_err(SetupError::Prometheus)?;
                (builder.with_reader(reader), Some(registry))
            }
            false => (builder, None),
        };
        let meter_provider = meters(builder).build();
        // The meter provider first: the span exporter counts what it loses in it.
        let span_loss = Arc::default();
        let spans = ReportingExporter::new(
            spans,
            &traces.endpoint,
            &meter_provider.meter_with_scope(scope()),
            Arc::clone(&span_loss),
        );
        let tracer_provider =
            SdkTracerProvider::builder().with_batch_exporter(spans).with_resource(resource.clone()).build();
        Ok(Telemetry {
            #[cfg(feature = "prometheus")]
            prometheus: registry
                .map(|registry| crate::PrometheusMetrics::from_parts(registry, meter_provider.clone())),
            tracer_provider,
            meter_provider,
            routes: [traces, metrics],
            span_loss,
            span_filter,
            event_filter: self.event_filter,
            keep_propagator: self.keep_propagator,
            shut_down: false,
        })
    }

    /// Builds the providers, installs the `tracing` subscriber (retryscope's
    /// [layer](Telemetry::layer), plus a stderr log filtered by `RUST_LOG`
    /// unless [`no_log`](Self::no_log)), then [installs the
    /// globals](Telemetry::install_globals).
    ///
    /// The stderr log prints events only, never spans: so the spans it does not
    /// print cost it nothing (a fmt layer that sees a span formats its fields
    /// when it opens).
    ///
    /// # Errors
    ///
    /// [`SetupError::SubscriberExists`] when the program already has a global
    /// subscriber: use [`build`](Self::build) and compose.
    pub fn init(self) -> Result<Telemetry, SetupError> {
        self.init_with(|meters| meters)
    }

    /// Like [`init`](Self::init), letting `meters` add to the meter provider
    /// before it is built.
    pub fn init_with(
        self,
        meters: impl FnOnce(MeterProviderBuilder) -> MeterProviderBuilder,
    ) -> Result<Telemetry, SetupError> {
        let log = match (self.log, &self.default_log_filter) {
            (false, _) => None,
            (true, default) => Some(match EnvFilter::try_from_default_env() {
                Ok(filter) => filter,
                Err(_) => EnvFilter::try_new(default.as_deref().unwrap_or(DEFAULT_LOG))
                    .map_err(SetupError::Filter)?,
            }),
        };
        let telemetry = self.build_with(meters)?;
        let log = log.map(|filter| {
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(filter.and(filter_fn(|metadata| metadata.is_event())))
        });
        tracing_subscriber::registry()
            .with(telemetry.layer())
            .with(log)
            .try_init()
            .map_err(SetupError::SubscriberExists)?;
        telemetry.install_globals();
        Ok(telemetry)
    }

    fn resource(&self) -> Resource {
        let builder = Resource::builder();
        match &self.service_name {
            Some(name) => builder.with_service_name(name.clone()).build(),
            None => builder.build(),
        }
    }
}

/// Builds a span or metric exporter for `route`: the transport and protocol
/// settled here, everything else (endpoint variables unless one is given in
/// code, headers, timeout, compression, temporality) left to the builder.
macro_rules! build_exporter {
    ($builder:expr, $route:expr) => {{
        let route: &Route = $route;
        match route.protocol {
            #[cfg(feature = "otlp-grpc")]
            Protocol::Grpc => {
                let mut builder = $builder.with_tonic().with_protocol(opentelemetry_otlp::Protocol::Grpc);
                if let Some(endpoint) = &route.endpoint_in_code {
                    builder = builder.with_endpoint(endpoint.clone());
                }
                #[cfg(feature = "otlp-grpc-tls")]
                if route.is_https() {
                    use opentelemetry_otlp::WithTonicConfig as _;
                    use opentelemetry_otlp::tonic_types::transport::ClientTlsConfig;
                    // The exporter's own TLS default trusts no root at all.
                    builder = builder.with_tls_config(ClientTlsConfig::new().with_enabled_roots());
                }
                builder.build()
            }
            #[cfg(not(feature = "otlp-grpc"))]
            Protocol::Grpc => {
                return Err(SetupError::FeatureMissing {
                    what: "OTLP/gRPC",
                    feature: Protocol::Grpc.feature(),
                });
            }
            Protocol::HttpProtobuf | Protocol::HttpJson => {
                let protocol = match route.protocol {
                    Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
                    _ => opentelemetry_otlp::Protocol::HttpBinary,
                };
                let mut builder = $builder.with_http().with_protocol(protocol);
                if let Some(endpoint) = &route.endpoint_in_code {
                    builder = builder.with_endpoint(endpoint.clone());
                }
                builder.build()
            }
        }
        .map_err(|e| SetupError::exporter(route.signal, &route.endpoint, e))
    }};
}

fn span_exporter(route: &Route) -> Result<SpanExporter, SetupError> {
    build_exporter!(SpanExporter::builder(), route)
}

fn metric_exporter(route: &Route) -> Result<MetricExporter, SetupError> {
    build_exporter!(MetricExporter::builder(), route)
}

/// Tonic's channel spawns its worker on the current tokio runtime, and the SDK's
/// export thread blocks on it: without a runtime that runs tasks on other
/// threads, exports would panic or never complete.
fn check_grpc_runtime() -> Result<(), SetupError> {
    #[cfg(feature = "otlp-grpc")]
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread => Err(
            SetupError::Runtime("OTLP/gRPC needs a multi-threaded tokio runtime, not a current-thread one"),
        ),
        Ok(_) => Ok(()),
        Err(_) => Err(SetupError::Runtime("OTLP/gRPC must be set up inside a tokio runtime")),
    }
    // Without the feature, resolving the route has refused gRPC already.
    #[cfg(not(feature = "otlp-grpc"))]
    Ok(())
}
