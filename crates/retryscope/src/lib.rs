//! Safe, observable retries.
//!
//! Naive retries turn a short blip into an outage: every client hammers a
//! recovering service in lock-step. `retryscope` retries the way the field has
//! learned to — exponential backoff with jitter, only transient failures, server
//! hints honoured, attempts and total time bounded, retry budgets and circuit
//! breakers to stop a fleet from amplifying an outage — and reports every attempt
//! through an [`Observer`](observe::Observer), so that retries never hide trouble.
//!
//! # Retrying an async operation
//!
//! Any closure that returns a future gains [`retry`](Retryable::retry); the
//! builder reads like a sentence and is awaited directly. Only transient
//! failures are retried: `std::io::Error` says which it is
//! ([`Transient`]), so a reset connection is retried and a missing file is not:
//!
//! ```
//! use retryscope::dependency::Dependency;
//! use retryscope::{Policy, RetryBudget, Retryable, StopReason};
//! use std::io::{Error, ErrorKind};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! async fn fetch(attempt: u32) -> Result<&'static str, Error> {
//!     if attempt < 3 { Err(ErrorKind::ConnectionReset.into()) } else { Ok("payload") }
//! }
//!
//! // One per dependency, shared by every call: its name and its guards.
//! let inventory = Dependency::new("inventory").with_budget(RetryBudget::default());
//! let mut attempt = 0;
//! let body = (|| { attempt += 1; fetch(attempt) })
//!     .retry(Policy::interactive())
//!     .dependency(&inventory)
//!     .await;
//! assert_eq!(body.unwrap(), "payload");
//!
//! let missing = (|| async { Err::<(), _>(Error::from(ErrorKind::NotFound)) })
//!     .retry(Policy::interactive())
//!     .await
//!     .unwrap_err();
//! assert_eq!((missing.reason(), missing.attempts()), (StopReason::Permanent, 1));
//! # }
//! ```
//!
//! # The pieces
//!
//! - [`Policy`]: attempts, backoff, [`Jitter`], deadline, per-attempt timeout;
//!   presets [`Policy::interactive`] and [`Policy::background`].
//! - [`classify`]: what a result means ([`Verdict`]); HTTP status and I/O error
//!   helpers, the `Idempotency-Key` header's name and key-length limit.
//! - [`hints`]: `Retry-After` and `RateLimit` headers.
//! - [`dependency::Dependency`]: a dependency as a value — its name and its
//!   guards, built once, shared by every call, put on a call with one setter
//!   ([`Retry::dependency`]); [`dependency::Dependencies`], a client's
//!   registry of them, made on first use.
//! - [`RetryBudget`] and [`TokenBucket`]: fleet-level caps on retries
//!   ([`budget::Budget`]); [`CircuitBreaker`]: stop calling a dependency that
//!   is down.
//! - [`pace`]: pacing every call to a dependency by what it answers;
//!   [`Pacer::adaptive`] is the AWS SDKs' adaptive mode.
//! - [`hedge`]: hedged calls for slow dependencies — a second copy after a
//!   delay (fixed, or a recent latency percentile), the first answer wins,
//!   the budget charged for every extra copy; built by the same builder as a
//!   retry, in its hedging mode ([`Retryable::hedge`]).
//! - [`observe`]: the hook instrumentation implements (see `retryscope-otel`).
//! - [`Shared`]: names borrowed, or shared through an `Arc` so that a retry
//!   can be `'static` (spawned).
//! - [`jobs`]: the policy without the loop, for job queues; [`jobs::JobPolicy`]
//!   schedules across days and weeks; [`jobs::JobKeyScope`]: the job key of
//!   the handler running on this task, from which HTTP calls derive
//!   idempotency keys.
//! - Blocking code: [`Retry::call`]. Other async runtimes: [`Retry::with_sleeper`]
//!   with a [`Sleeper`].
//!
//! Determinism: delays come from a seedable generator ([`Retry::seed`],
//! [`JitterRng::seeded`]); time comes from tokio's clock, so tests run under
//! `tokio::time::pause()`, and budgets and breakers take a [`clock::Clock`].
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `http` | on | [`hints`] (`Retry-After`, `RateLimit`), `classify::HttpClassifier` and the `Idempotency-Key` name and key-length limit in [`classify`]; depends on `http`, `httpdate`, `sfv` |
//! | `tokio` | on | `.await` on a retry with tokio's timer (`TokioSleeper`), tokio's clock (`clock::TokioClock`) as the default clock of budgets and breakers |
//!
//! Without `tokio`, async retries run on any runtime through
//! [`Retry::with_sleeper`], and budgets and breakers read the system's clock.
//! The blocking front end needs neither feature. A database or queue client
//! that never parses an HTTP header can turn `http` off:
//! `retryscope = { version = "0.1", default-features = false, features = ["tokio"] }`.
//!
//! # Further reading
//!
//! - What the instrumentation reports (metrics, spans, attributes, the
//!   Prometheus series): [docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md).
//! - Alerts, dashboards and what to do when they fire: [docs/runbook.md](https://github.com/retryscope/retryscope/blob/main/docs/runbook.md).
//! - The public API and what semver covers: [docs/api.md](https://github.com/retryscope/retryscope/blob/main/docs/api.md).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod blocking;
pub mod breaker;
pub mod budget;
mod circuit;
pub mod classify;
pub mod clock;
pub mod dependency;
mod driver;
mod error;
mod future;
pub mod guard;
pub mod hedge;
#[cfg(feature = "http")]
pub mod hints;
pub mod jobs;
pub mod observe;
mod outcome;
pub mod overload;
pub mod pace;
mod policy;
mod random;
mod retry;
mod setting;
mod shared;
mod sleep;
mod sync;
mod verdict;
mod wait;
mod window;

pub use budget::{retry_budget::RetryBudget, token_bucket::TokenBucket};
pub use circuit::CircuitBreaker;
pub use classify::transient::Transient;
pub use error::RetryError;
pub use future::RetryFuture;
pub use outcome::{Outcome, StopReason};
pub use pace::pacer::Pacer;
pub use policy::{Jitter, MAX_DURATION, MAX_JOB_DURATION, Policy, PolicyBuilder, PolicyError};
pub use random::JitterRng;
pub use retry::{Notify, Retry, Retryable};
pub use setting::{SettingError, SettingValue};
pub use shared::Shared;
pub use sleep::Sleeper;
#[cfg(feature = "tokio")]
pub use sleep::TokioSleeper;
pub use verdict::{DelaySource, ErrorType, Hint, Verdict};
pub use wait::Backoff;
