//! Test your retry settings before the outage does.
//!
//! A test-time crate (a dev-dependency) with what retryscope's own tests use:
//!
//! - [`scripted`]: the scripted HTTP dependency, a real HTTP/1.1 server on
//!   127.0.0.1 that plays a sequence of outcomes per path — statuses with
//!   hints (`Retry-After`, `RateLimit`), delays, resets, stalls, responses
//!   broken off halfway — and records every request it read;
//! - `echo` (feature `grpc`): the scripted gRPC dependency, a tonic server
//!   that plays a sequence of behaviours (a status, with
//!   `grpc-retry-pushback-ms`; a delay; a failure mid-stream), and its client;
//! - [`net`]: a port nobody listens on, and a server that never answers;
//! - [`schedule`]: the exact schedule of waits a policy produces for a script
//!   of failures, seeded, on a clock driven by hand
//!   ([`schedule_of`]);
//! - [`telemetry`]: retryscope's spans and metrics captured in memory, read by
//!   the names of the telemetry contract.
//!
//! Fault injection itself (a rate of 503s, resets or stalls injected below the
//! retry layer) lives with the integrations: `retryscope_reqwest::fault` and
//! `retryscope_tower::fault`. The guide's *How to test your retry settings*
//! shows them together.
//!
//! ```
//! use retryscope::{Jitter, Policy};
//! use retryscope_testkit::schedule::schedule_of;
//! use std::time::Duration;
//!
//! let policy = Policy::builder()
//!     .max_attempts(3)
//!     .base_delay(Duration::from_millis(50))
//!     .jitter(Jitter::None)
//!     .build()?;
//! assert_eq!(schedule_of(policy, 5), [Duration::from_millis(50), Duration::from_millis(100)]);
//! # Ok::<(), retryscope::PolicyError>(())
//! ```
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `grpc` | off | `echo`, the scripted gRPC dependency (tonic, prost) |
//!
//! # Further reading
//!
//! - What the instrumentation reports, and so what [`telemetry`] reads:
//!   [docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md).
//! - Alerts, dashboards and what to do when they fire:
//!   [docs/runbook.md](https://github.com/retryscope/retryscope/blob/main/docs/runbook.md).
//! - The public API and what semver covers: [docs/api.md](https://github.com/retryscope/retryscope/blob/main/docs/api.md).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "grpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
pub mod echo;
pub mod net;
pub mod schedule;
pub mod scripted;
pub mod telemetry;

pub use schedule::schedule_of;
pub use scripted::{Reply, Response, Seen, Server};
