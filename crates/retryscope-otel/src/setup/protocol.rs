//! Which transport each signal uses, where it goes, and whether this build can
//! send it there.
//!
//! opentelemetry-otlp's builders read every `OTEL_EXPORTER_OTLP_*` variable
//! themselves (endpoints, headers, timeouts, compression, protocols), and this
//! crate lets them. It reads three things before them, for reasons of its own:
//!
//! - the **protocol** (per signal, then general), because the builders fall back
//!   *silently* when a protocol's feature is missing, and their fallback with
//!   `http/json` compiled in is `http/json`, not the specification's
//!   `http/protobuf`; here a missing feature is refused, naming *our* feature;
//! - the **endpoint**, only to name it in errors and to decide whether OTLP/gRPC
//!   needs TLS roots (the builder would configure TLS without any);
//! - the **compression**, only to refuse a compression whose feature is missing
//!   with the name of our feature rather than opentelemetry-otlp's.

use super::error::SetupError;
use std::fmt;

/// An OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// OTLP over gRPC (port 4317 by convention); feature `otlp-grpc`.
    Grpc,
    /// OTLP over HTTP with protobuf bodies (port 4318 by convention); the
    /// specification's default. Feature `otlp`.
    HttpProtobuf,
    /// OTLP over HTTP with JSON bodies (port 4318 by convention). Feature `otlp`.
    HttpJson,
}

impl Protocol {
    /// The value of `OTEL_EXPORTER_OTLP_PROTOCOL` that names this protocol.
    pub const fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::HttpJson => "http/json",
        }
    }

    /// The feature of this crate that compiles the protocol in.
    pub const fn feature(self) -> &'static str {
        match self {
            Protocol::Grpc => "otlp-grpc",
            Protocol::HttpProtobuf | Protocol::HttpJson => "otlp",
        }
    }

    /// Whether this build can export with the protocol.
    pub const fn is_compiled(self) -> bool {
        match self {
            Protocol::Grpc => cfg!(feature = "otlp-grpc"),
            Protocol::HttpProtobuf | Protocol::HttpJson => true,
        }
    }

    fn is_http(self) -> bool {
        !matches!(self, Protocol::Grpc)
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Protocol {
    type Err = SetupError;

    /// Parses an `OTEL_EXPORTER_OTLP_PROTOCOL` value (case-insensitive, as
    /// opentelemetry-otlp reads it).
    fn from_str(value: &str) -> Result<Self, SetupError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            "http/json" => Ok(Protocol::HttpJson),
            _ => Err(SetupError::UnknownProtocol { variable: None, value: value.to_owned() }),
        }
    }
}

/// A signal, with the names of its own variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Traces,
    Metrics,
}

impl Signal {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
        }
    }

    const fn protocol_var(self) -> &'static str {
        match self {
            Signal::Traces => "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            Signal::Metrics => "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        }
    }

    const fn endpoint_var(self) -> &'static str {
        match self {
            Signal::Traces => "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            Signal::Metrics => "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        }
    }

    const fn compression_var(self) -> &'static str {
        match self {
            Signal::Traces => "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
            Signal::Metrics => "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
        }
    }
}

const PROTOCOL_VAR: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const COMPRESSION_VAR: &str = "OTEL_EXPORTER_OTLP_COMPRESSION";

/// Where one signal goes and how: settled before its exporter is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) signal: Signal,
    pub(crate) protocol: Protocol,
    /// The URL the exporter sends to, as it resolves it.
    pub(crate) endpoint: String,
    /// The endpoint given in code, passed to the builder (which then ignores
    /// the endpoint variables); `None` leaves them to the builder.
    pub(crate) endpoint_in_code: Option<String>,
}

impl Route {
    /// Settles `signal`'s protocol and endpoint: what the code says, else the
    /// signal's variable, else the general one, else the specification's
    /// default, and refuses what this build cannot send.
    pub(crate) fn resolve(
        signal: Signal,
        protocol: Option<Protocol>,
        endpoint: Option<&str>,
    ) -> Result<Route, SetupError> {
        let protocol = match protocol {
            Some(protocol) => protocol,
            None => protocol_from_env(signal)?,
        };
        if !protocol.is_compiled() {
            return Err(SetupError::FeatureMissing {
                what: match protocol {
                    Protocol::Grpc => "OTLP/gRPC",
                    _ => "this OTLP protocol",
                },
                feature: protocol.feature(),
            });
        }
        let endpoint_in_code = endpoint.filter(|e| !e.is_empty()).map(|base| match protocol.is_http() {
            // An HTTP endpoint given in code is used as is by the exporter, so
            // the signal's path is added here, as the exporter does for the
            // general variable.
            true => signal_url(base, signal),
            false => base.to_owned(),
        });
        let endpoint = match &endpoint_in_code {
            Some(url) => url.clone(),
            None => endpoint_from_env(signal, protocol),
        };
        let https = endpoint.trim_start().to_ascii_lowercase().starts_with("https:");
        if https && protocol.is_http() && !cfg!(feature = "otlp-tls") {
            return Err(SetupError::FeatureMissing {
                what: "OTLP/HTTP to an https endpoint",
                feature: "otlp-tls",
            });
        }
        if https && !protocol.is_http() && !cfg!(feature = "otlp-grpc-tls") {
            return Err(SetupError::FeatureMissing {
                what: "OTLP/gRPC to an https endpoint",
                feature: "otlp-grpc-tls",
            });
        }
        check_compression(signal, protocol)?;
        Ok(Route { signal, protocol, endpoint, endpoint_in_code })
    }

    /// Whether the exporter must be given TLS roots.
    #[cfg(feature = "otlp-grpc-tls")]
    pub(crate) fn is_https(&self) -> bool {
        self.endpoint.trim_start().to_ascii_lowercase().starts_with("https:")
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

fn protocol_from_env(signal: Signal) -> Result<Protocol, SetupError> {
    for variable in [signal.protocol_var(), PROTOCOL_VAR] {
        if let Some(value) = var(variable) {
            return value
                .parse()
                .map_err(|_| SetupError::UnknownProtocol { variable: Some(variable), value });
        }
    }
    Ok(Protocol::HttpProtobuf)
}

/// The endpoint the exporter will resolve from the environment, as
/// opentelemetry-otlp does: the signal's variable as is, else the general
/// one (plus `/v1/{signal}` over HTTP), else the default port on localhost.
fn endpoint_from_env(signal: Signal, protocol: Protocol) -> String {
    if let Some(url) = var(signal.endpoint_var()) {
        return url;
    }
    match (var(ENDPOINT_VAR), protocol.is_http()) {
        (Some(base), true) => signal_url(&base, signal),
        (Some(base), false) => base,
        (None, true) => signal_url("http://localhost:4318", signal),
        (None, false) => "http://localhost:4317".to_owned(),
    }
}

fn signal_url(base: &str, signal: Signal) -> String {
    format!("{}/v1/{}", base.trim_end_matches('/'), signal.as_str())
}

/// Refuses a compression the exporter could not apply, naming our feature.
fn check_compression(signal: Signal, protocol: Protocol) -> Result<(), SetupError> {
    let Some(value) = var(signal.compression_var()).or_else(|| var(COMPRESSION_VAR)) else {
        return Ok(());
    };
    let (gzip, feature) = match protocol {
        Protocol::Grpc => (cfg!(feature = "otlp-grpc-gzip"), "otlp-grpc-gzip"),
        _ => (cfg!(feature = "otlp-gzip"), "otlp-gzip"),
    };
    match value.to_ascii_lowercase().as_str() {
        "gzip" if !gzip => Err(SetupError::FeatureMissing { what: "gzip compression", feature }),
        // `none`, a compiled-in `gzip`, and anything else: the exporter's
        // builder accepts or refuses it.
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_values_parse_as_the_specification_spells_them() {
        assert_eq!("grpc".parse::<Protocol>().ok(), Some(Protocol::Grpc));
        assert_eq!("http/protobuf".parse::<Protocol>().ok(), Some(Protocol::HttpProtobuf));
        assert_eq!("HTTP/JSON".parse::<Protocol>().ok(), Some(Protocol::HttpJson));
        assert!("http".parse::<Protocol>().is_err());
        for p in [Protocol::Grpc, Protocol::HttpProtobuf, Protocol::HttpJson] {
            assert_eq!(p.as_str().parse::<Protocol>().ok(), Some(p));
        }
    }

    #[test]
    fn an_http_endpoint_given_in_code_gets_the_signal_path() {
        let route = Route::resolve(Signal::Metrics, Some(Protocol::HttpJson), Some("http://127.0.0.1:4318/"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(route.endpoint, "http://127.0.0.1:4318/v1/metrics");
        assert_eq!(route.endpoint_in_code.as_deref(), Some("http://127.0.0.1:4318/v1/metrics"));
    }

    #[cfg(not(feature = "otlp-grpc"))]
    #[test]
    fn grpc_without_its_feature_is_refused_naming_the_feature() {
        let error = Route::resolve(Signal::Traces, Some(Protocol::Grpc), Some("http://127.0.0.1:4317"))
            .expect_err("no tonic in this build");
        assert!(error.to_string().contains("`otlp-grpc`"), "{error}");
    }

    #[cfg(not(feature = "otlp-tls"))]
    #[test]
    fn https_without_tls_is_refused_naming_the_feature() {
        let error =
            Route::resolve(Signal::Traces, Some(Protocol::HttpProtobuf), Some("https://collector:4318"))
                .expect_err("no TLS in this build");
        assert!(error.to_string().contains("`otlp-tls`"), "{error}");
    }
}
