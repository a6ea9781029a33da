//! Real servers on 127.0.0.1 and an in-memory OpenTelemetry SDK for the tests.
#![allow(dead_code, unreachable_pub)]

pub mod echo;
pub mod http_server;
pub mod telemetry;
