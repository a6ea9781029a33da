//! `init` in a program that already has a global `tracing` subscriber refuses,
//! and its error names the composable path. A file of its own: it installs the
//! process-wide subscriber.

#![cfg(feature = "otlp")]
#![allow(clippy::unwrap_used)]

use retryscope_otel::{OtlpConfig, Protocol, SetupError};
use tracing_subscriber::util::SubscriberInitExt as _;

#[test]
fn init_over_an_installed_subscriber_names_the_composable_path() {
    tracing_subscriber::registry().init();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let error = OtlpConfig::default()
        .protocol(Protocol::HttpProtobuf)
        .endpoint(format!("http://{closed}"))
        .init()
        .expect_err("a subscriber is installed");
    assert!(matches!(error, SetupError::SubscriberExists(_)), "{error:?}");
    let message = error.to_string();
    for path in ["OtlpConfig::default().build()", "telemetry.layer()", "telemetry.install_globals()"] {
        assert!(message.contains(path), "{message:?} does not name {path}");
    }
    // The cause is the source, not repeated in the message.
    let source = std::error::Error::source(&error).expect("tracing-subscriber's error");
    assert!(!message.contains(&source.to_string()), "{message:?} repeats {source}");
}

#[test]
fn a_protocol_variable_naming_no_protocol_is_refused_with_its_name() {
    let error = "http/xml".parse::<Protocol>().expect_err("no such protocol");
    assert!(matches!(error, SetupError::UnknownProtocol { .. }), "{error:?}");
    assert!(error.to_string().contains("http/json"), "{error}");
}
