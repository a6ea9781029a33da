//! Job retries on a real broker: workers that requeue a failed job with a
//! run-at from [`JobPolicy::schedule`](retryscope::jobs::JobPolicy::schedule), dead-letter
//! what cannot succeed, never run a keyed job again once its handler
//! succeeded nor one of its attempts again once that attempt's handler
//! returned (a failed attempt delivered again beside its retry is dropped:
//! [`JobOutcome::Superseded`]; one interrupted by a crash runs again: see the guide's "What once
//! means"; the HTTP calls its handler makes through retryscope's clients
//! carry idempotency keys derived from the job's key, so a server that stores
//! them runs each once across crashes: [`WorkerBuilder::job_keyed_calls`]),
//! and hold jobs — without
//! spending their attempts — while the dependency they call is down.
//!
//! The broker is NATS JetStream ([`nats::NatsQueue`]) behind a small
//! [`Broker`] trait. How a delivery is decided:
//!
//! | the delivery | what the worker does |
//! |---|---|
//! | before its run-at | `Nak` with the time left (not an attempt) |
//! | the dependency's breaker open, pacer gate closed, budget spent | `Nak` with the hold (not an attempt) |
//! | its key already processed | ack, without running it |
//! | its key claimed by another worker, live or dead less than a claim ago | `Nak` for one claim renewal period (not an attempt) |
//! | an attempt older than one already run or scheduled for its key | ack, without running it |
//! | handler succeeded | key recorded, ack |
//! | transient failure, the policy allows another | the next attempt published (attempt + 1, run-at), then ack |
//! | permanent, attempts spent, deadline passed, headers malformed (a run-at past [`MAX_JOB_DURATION`](retryscope::MAX_JOB_DURATION) included) | dead letter published and stored, then `Term` |
//!
//! Attempt count, first-attempt time and previous delay travel in headers
//! ([`meta`]), since a broker's delivery count cannot tell a hold from an
//! attempt.
//!
//! - The walkthrough (producer, worker, the hold, dead letters and replay, the
//!   lab's `storm --jobs`): [docs/guide/jobs.md](https://github.com/retryscope/retryscope/blob/main/docs/guide/jobs.md).
//! - Policies from a configuration file, matched by subject
//!   ([`WorkerBuilder::config`]): [docs/guide/configuration.md](https://github.com/retryscope/retryscope/blob/main/docs/guide/configuration.md#a-job-worker).
//! - The telemetry contract: [docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md).
//! - The runbook: [docs/runbook.md](https://github.com/retryscope/retryscope/blob/main/docs/runbook.md).

pub mod broker;
pub mod dead;
mod job;
pub mod meta;
pub mod nats;
mod producer;
pub mod telemetry;
mod worker;

pub use broker::{Broker, BrokerError, DeadLetterStore, Delivery, Outgoing, Published};
pub use dead::{DeadLetter, DeadReason, Replayed};
pub use job::{Handler, HandlerFuture, Job, JobOutcome, WorkerStats};
pub use producer::Producer;
pub use worker::builder_error::WorkerError;
pub use worker::{Classifier, MAX_DELIVER, Worker, WorkerBuilder};
