//! The fixtures the integrations' tests share: real servers on 127.0.0.1 and
//! an in-memory OpenTelemetry SDK. Unpublished; a dev-dependency only.
//!
//! - [`scripted`]: a hand-rolled HTTP/1.1 server that plays a script (drops a
//!   response halfway, stalls), re-exported at the root as [`Server`] and [`Reply`];
//! - [`body_server`]: a hyper server whose bodies the test shapes (JSON, fed
//!   streams, stalls, bodies broken off halfway);
//! - [`http_server`]: a hyper server answering from a queue of statuses;
//! - [`echo`]: a tonic echo service with scripted gRPC failures, a slow watch
//!   stream and a bidirectional chat;
//! - [`h2_server`]: a raw HTTP/2 server that resets streams with a chosen reason;
//! - [`telemetry`]: the in-memory trace and metric pipeline;
//! - [`keys`]: what an idempotency key on the wire must look like;
//! - [`net`]: a port nobody listens on, and a server that never answers;
//! - [`external`]: services named by environment variables (rotel, PostgreSQL, Redis),
//!   skipped outside CI when unset.
// Fixtures, not an API: their names and their tests say what they do.
#![allow(missing_docs)]

pub mod body_server;
pub mod echo;
pub mod external;
pub mod h2_server;
pub mod http_server;
pub mod keys;
pub mod net;
pub mod rotel;
pub mod scripted;
pub mod telemetry;

pub use scripted::{Reply, Seen, Server};

use retryscope::Policy;
use std::time::Duration;

/// Three attempts 10 ms apart, capped at 100 ms: fast on the paused clock, and
/// enough to see a retry and a give-up.
pub fn quick_policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(100))
        .build()
        .expect("valid policy")
}
