//! Real servers on 127.0.0.1 and an in-memory OpenTelemetry SDK for the tests.
#![allow(dead_code, unreachable_pub)]

pub mod echo;
pub mod http_server;
// The in-memory OpenTelemetry pipeline of the reqwest crate's tests: one copy.
#[path = "../../../retryscope-reqwest/tests/support/telemetry.rs"]
pub mod telemetry;
