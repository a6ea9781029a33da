//! The fixtures the integrations' tests share: real servers on 127.0.0.1 and
//! an in-memory OpenTelemetry SDK. Unpublished; a dev-dependency only.
//!
//! - [`scripted`]: a hand-rolled HTTP/1.1 server that plays a script (drops a
//!   response halfway, stalls), re-exported at the root as [`Server`] and [`Reply`];
//! - [`http_server`]: a hyper server answering from a queue of statuses;
//! - [`echo`]: a tonic echo service with scripted gRPC failures;
//! - [`telemetry`]: the in-memory trace and metric pipeline;
//! - [`net`]: a port nobody listens on, and a server that never answers.
// Fixtures, not an API: their names and their tests say what they do.
#![allow(missing_docs)]

pub mod echo;
pub mod http_server;
pub mod net;
pub mod scripted;
pub mod telemetry;

pub use scripted::{Reply, Seen, Server};
