//! The fixtures the integrations' tests share: real servers on 127.0.0.1 and
//! an in-memory OpenTelemetry SDK. Unpublished; a dev-dependency only.
//!
//! What users need too lives in the published `retryscope-testkit` and is
//! re-exported here under the same names, so there is one copy:
//!
//! - [`scripted`] (kit): a hand-rolled HTTP/1.1 server that plays a script (drops a
//!   response halfway, stalls, resets), re-exported at the root as [`Server`] and [`Reply`];
//! - [`body_server`]: a hyper server whose bodies the test shapes (JSON, fed
//!   streams, stalls, bodies broken off halfway);
//! - [`http_server`]: a hyper server answering from a queue of statuses;
//! - [`echo`] (kit): a tonic echo service with scripted gRPC failures, a slow watch
//!   stream and a bidirectional chat;
//! - [`h2_server`]: a raw HTTP/2 server that resets streams with a chosen reason;
//! - [`telemetry`] (kit): the in-memory trace and metric pipeline;
//! - [`keys`]: what an idempotency key on the wire must look like;
//! - [`net`] (kit): a port nobody listens on, and a server that never answers;
//! - [`child`]: one test of the test binary run as a process of its own (a
//!   worker to SIGKILL), and word of when it printed a line;
//! - [`external`]: services named by environment variables (rotel, PostgreSQL, Redis),
//!   skipped outside CI when unset.
// Fixtures, not an API: their names and their tests say what they do.
#![allow(missing_docs)]

pub mod body_server;
pub mod child;
pub mod external;
pub mod h2_server;
pub mod http_server;
pub mod keys;
pub mod rotel;

pub use retryscope_testkit::{echo, net, schedule, scripted, telemetry};
pub use scripted::{Reply, Response, Seen, Server};

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
