//! The OpenTelemetry SDK as a user sets it up, and the hand-rolled telemetry
//! that the instrumented calls are compared with.

use crate::CallError;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram};
use retryscope_otel::{OtlpConfig, Protocol, Telemetry};
use std::net::TcpListener;

/// The SDK set up by retryscope-otel's own setup, the documented path
/// (`init_otlp`, here configured in code so no environment is needed): the
/// tracing subscriber with its OpenTelemetry bridge and log layer, the global
/// tracer and meter providers, and the propagators.
///
/// It exports over OTLP/HTTP to a loopback port nobody listens on: the export
/// threads are not counted, and what a call pays (building, ending and
/// queueing its spans, recording its metrics) does not depend on whether the
/// export later succeeds. One function, so a change of the setup API is one
/// change here.
pub(crate) fn install_sdk() -> Result<Telemetry, CallError> {
    Ok(OtlpConfig::default()
        .protocol(Protocol::HttpProtobuf)
        .endpoint(format!("http://{}", unused_port()?))
        .service_name("wholecall-bench")
        .init()?)
}

/// A loopback address nobody listens on (bound, then released).
fn unused_port() -> Result<std::net::SocketAddr, CallError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// What a careful user writes by hand around a client: one counter of calls
/// and one histogram of their durations, from the global meter provider (the
/// span is the caller's `tracing` span, bridged by the same subscriber).
pub(crate) struct HandRolled {
    pub(crate) calls: Counter<u64>,
    pub(crate) duration: Histogram<f64>,
}

impl HandRolled {
    /// Instruments named as the semantic conventions name a client's.
    pub(crate) fn new(kind: &'static str) -> Self {
        let meter = opentelemetry::global::meter("wholecall-hand-rolled");
        Self {
            calls: meter.u64_counter(format!("{kind}.client.calls")).build(),
            duration: meter.f64_histogram(format!("{kind}.client.duration")).with_unit("s").build(),
        }
    }

    /// Records one call's metrics.
    pub(crate) fn record(&self, seconds: f64, attributes: &[KeyValue]) {
        self.calls.add(1, attributes);
        self.duration.record(seconds, attributes);
    }
}
