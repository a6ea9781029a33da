//! Why telemetry could not be set up, and why its last export failed.
//!
//! Every `Display` here says what failed and where, never why: the cause is
//! the [`source`](Error::source), so that a report walking the chain (anyhow,
//! eyre, `tracing`'s `%error` with sources) prints each cause once.

use super::protocol::Signal;
use opentelemetry_sdk::error::OTelSdkError;
use std::error::Error;
use std::fmt;

/// Why telemetry could not be set up.
#[derive(Debug)]
#[non_exhaustive]
pub enum SetupError {
    /// A protocol variable (or a string parsed as a [`Protocol`](super::Protocol))
    /// names no OTLP protocol; `grpc`, `http/protobuf` and `http/json` are.
    UnknownProtocol {
        /// The variable read (`OTEL_EXPORTER_OTLP_PROTOCOL` or a per-signal
        /// one), `None` when the value was parsed in code.
        variable: Option<&'static str>,
        /// The value found.
        value: String,
    },
    /// The configuration asks for something this build does not compile in.
    FeatureMissing {
        /// What was asked for, e.g. `OTLP/gRPC to an https endpoint`.
        what: &'static str,
        /// The feature of `retryscope-otel` that compiles it in.
        feature: &'static str,
    },
    /// OTLP/gRPC was requested outside a suitable tokio runtime.
    Runtime(&'static str),
    /// An exporter could not be built (e.g. an invalid endpoint); the
    /// exporter's error is the [`source`](Error::source).
    Exporter {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// The endpoint it was built for.
        endpoint: String,
        /// The exporter's error.
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// A span or log filter given in code does not parse; the parser's error
    /// is the [`source`](Error::source).
    Filter(tracing_subscriber::filter::ParseError),
    /// [`init`](super::OtlpConfig::init) found a global `tracing` subscriber
    /// already installed. Build with [`OtlpConfig::build`](super::OtlpConfig::build)
    /// and add [`Telemetry::layer`](super::Telemetry::layer) to that subscriber.
    SubscriberExists(tracing_subscriber::util::TryInitError),
    /// The Prometheus reader of a combined setup could not be built.
    #[cfg(feature = "prometheus")]
    Prometheus(crate::PrometheusSetupError),
}

impl SetupError {
    pub(crate) fn exporter(
        signal: Signal,
        endpoint: &str,
        source: opentelemetry_otlp::ExporterBuildError,
    ) -> Self {
        SetupError::Exporter { signal: signal.as_str(), endpoint: endpoint.to_owned(), source }
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::UnknownProtocol { variable: Some(variable), value } => {
                write!(
                    f,
                    "{variable}={value:?} names no OTLP protocol (use grpc, http/protobuf or http/json)"
                )
            }
            SetupError::UnknownProtocol { variable: None, value } => {
                write!(f, "{value:?} names no OTLP protocol (use grpc, http/protobuf or http/json)")
            }
            SetupError::FeatureMissing { what, feature } => {
                write!(f, "{what} is not compiled in: enable the `{feature}` feature of retryscope-otel")
            }
            SetupError::Runtime(why) => f.write_str(why),
            SetupError::Exporter { signal, endpoint, .. } => {
                write!(f, "cannot build the OTLP {signal} exporter for {endpoint}")
            }
            SetupError::Filter(_) => f.write_str("invalid tracing filter directives"),
            SetupError::SubscriberExists(_) => f.write_str(
                "cannot install the tracing subscriber: this program already has one. \
                 Keep it, and add retryscope's layer to it: `OtlpConfig::default().build()`, \
                 then `.with(telemetry.layer())` on your `tracing_subscriber::registry()` and \
                 `telemetry.install_globals()` (see the retryscope-otel docs, \"An existing service\")",
            ),
            #[cfg(feature = "prometheus")]
            SetupError::Prometheus(_) => f.write_str("cannot set up the Prometheus reader"),
        }
    }
}

impl Error for SetupError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            SetupError::Exporter { source, .. } => Some(source),
            SetupError::Filter(e) => Some(e),
            SetupError::SubscriberExists(e) => Some(e),
            #[cfg(feature = "prometheus")]
            SetupError::Prometheus(e) => Some(e),
            SetupError::UnknownProtocol { .. }
            | SetupError::FeatureMissing { .. }
            | SetupError::Runtime(_) => None,
        }
    }
}

/// The last export of a signal failed at shutdown: the collector was
/// unreachable, slow, or refused it. Returned by
/// [`Telemetry::shutdown`](super::Telemetry::shutdown); both providers are
/// shut down anyway.
///
/// A program should log it and go on exiting normally: the telemetry is lost,
/// the work is not. The first failure is the [`source`](Error::source); all
/// are in [`failures`](Self::failures).
#[derive(Debug)]
pub struct ShutdownError {
    /// One per signal that failed, traces first: at most two.
    failures: Vec<SignalFailure>,
}

impl ShutdownError {
    pub(crate) fn new(failures: Vec<SignalFailure>) -> Option<Self> {
        (!failures.is_empty()).then_some(ShutdownError { failures })
    }

    /// Every signal whose last export failed.
    pub fn failures(&self) -> &[SignalFailure] {
        &self.failures
    }
}

impl fmt::Display for ShutdownError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("telemetry was not flushed: ")?;
        for (i, failure) in self.failures.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{} to {}", failure.signal, failure.endpoint)?;
            if let Some(lost) = failure.lost_spans {
                write!(f, " ({lost} spans lost)")?;
            }
        }
        Ok(())
    }
}

impl Error for ShutdownError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.failures.first().map(|f| f as &(dyn Error + 'static))
    }
}

/// One signal's failed flush: where it was going, and the SDK's error as the
/// [`source`](Error::source).
#[derive(Debug)]
pub struct SignalFailure {
    signal: &'static str,
    endpoint: String,
    lost_spans: Option<u64>,
    source: OTelSdkError,
}

impl SignalFailure {
    pub(crate) fn new(signal: Signal, endpoint: &str, source: OTelSdkError) -> Self {
        SignalFailure { signal: signal.as_str(), endpoint: endpoint.to_owned(), lost_spans: None, source }
    }

    pub(crate) fn with_lost_spans(mut self, lost: Option<u64>) -> Self {
        self.lost_spans = lost;
        self
    }

    /// For traces: the spans lost since span exports began failing, the last
    /// flush's included (the ones lost before are also counted in
    /// `retryscope.telemetry.spans.lost`). `None` for metrics, or when the
    /// exporter failed no batch (the SDK's own shutdown failed).
    pub fn lost_spans(&self) -> Option<u64> {
        self.lost_spans
    }

    /// `traces` or `metrics`.
    pub fn signal(&self) -> &'static str {
        self.signal
    }

    /// The endpoint the signal was exported to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl fmt::Display for SignalFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the last {} export to {} failed", self.signal, self.endpoint)?;
        match self.lost_spans {
            Some(lost) => write!(f, "; {lost} spans were lost"),
            None => Ok(()),
        }
    }
}

impl Error for SignalFailure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.source)
    }
}
