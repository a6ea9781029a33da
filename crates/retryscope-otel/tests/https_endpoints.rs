//! An https endpoint is accepted when the build has TLS for that transport,
//! and refused at setup otherwise, naming the feature of this crate to enable
//! (not one of a crate the user does not depend on).

#![cfg(feature = "otlp")]
#![allow(clippy::unwrap_used)]

use retryscope_otel::{OtlpConfig, Protocol};

#[test]
fn an_https_endpoint_over_http_needs_otlp_tls() {
    let result =
        OtlpConfig::default().protocol(Protocol::HttpProtobuf).endpoint("https://127.0.0.1:1").build();
    match cfg!(feature = "otlp-tls") {
        true => drop(result.unwrap()),
        false => {
            let error = result.unwrap_err();
            assert!(
                error.to_string().contains("enable the `otlp-tls` feature of retryscope-otel"),
                "{error}"
            );
        }
    }
}

#[cfg(feature = "otlp-grpc")]
#[test]
fn an_https_endpoint_over_grpc_needs_otlp_grpc_tls() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let _context = runtime.enter();
    let result = OtlpConfig::default().protocol(Protocol::Grpc).endpoint("https://127.0.0.1:1").build();
    match cfg!(feature = "otlp-grpc-tls") {
        // The exporter is given the platform's trust roots (its own default has none).
        true => drop(result.unwrap()),
        false => {
            let error = result.unwrap_err();
            assert!(
                error.to_string().contains("enable the `otlp-grpc-tls` feature of retryscope-otel"),
                "{error}"
            );
        }
    }
}
