//! Where the storm's telemetry goes: always an in-process reader for the report;
//! OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set; a Prometheus scrape endpoint
//! with `--prometheus ADDR`.

use crate::storm::metrics::InProcessReader;
use crate::storm::server::SLICE;
use crate::storm::{StormError, error};
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use retryscope_otel::{MetricsServer, OtlpConfig, PrometheusMetrics, Telemetry as OtlpTelemetry};

/// The storm's telemetry, alive as long as this value is.
pub(crate) struct Telemetry {
    /// The meter the middleware records with.
    pub(crate) meter: Meter,
    /// The report's view of the metrics.
    pub(crate) reader: InProcessReader,
    provider: SdkMeterProvider,
    _otlp: Option<OtlpTelemetry>,
    _scrape: Option<(PrometheusMetrics, MetricsServer)>,
}

impl Telemetry {
    /// Sets up the readers. With both OTLP and `--prometheus`, metrics go to the
    /// scrape endpoint and traces over OTLP.
    pub(crate) fn start(prometheus: Option<&str>) -> Result<Telemetry, StormError> {
        let (in_process, reader) = InProcessReader::new(SLICE);
        let otlp_wanted = std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
        let (provider, otlp, scrape) = match (prometheus, otlp_wanted) {
            (Some(addr), _) => {
                let metrics = PrometheusMetrics::with_readers(|m| m.with_reader(in_process))
                    .map_err(|e| error("setting up Prometheus", e))?;
                let server = metrics.serve(addr).map_err(|e| error("serving --prometheus", e))?;
                eprintln!("storm: metrics at http://{}/metrics", server.local_addr());
                let otlp = if otlp_wanted {
                    Some(otlp_config().init().map_err(|e| error("OTLP", e))?)
                } else {
                    None
                };
                (metrics.meter_provider().clone(), otlp, Some((metrics, server)))
            }
            (None, true) => {
                let guard =
                    otlp_config().init_with(|m| m.with_reader(in_process)).map_err(|e| error("OTLP", e))?;
                (guard.meter_provider().clone(), Some(guard), None)
            }
            (None, false) => (SdkMeterProvider::builder().with_reader(in_process).build(), None, None),
        };
        let meter = provider.meter_with_scope(retryscope_otel::scope());
        Ok(Telemetry { meter, reader, provider, _otlp: otlp, _scrape: scrape })
    }

    /// Makes the storm's meter provider the global one, for libraries that
    /// record through `opentelemetry::global::meter` (retryscope-jobs).
    pub(crate) fn install_global_meter(&self) {
        opentelemetry::global::set_meter_provider(self.provider.clone());
    }

    /// Flushes what is buffered (the OTLP guard flushes when dropped).
    pub(crate) fn flush(&self) {
        let _ = self.provider.force_flush();
    }
}

fn otlp_config() -> OtlpConfig {
    // One log line per retry is too much during a storm.
    OtlpConfig::default().default_log_filter("warn")
}
