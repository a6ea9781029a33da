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
//! builder reads like a sentence and is awaited directly:
//!
//! ```
//! use retryscope::{Policy, RetryBudget, Retryable, StopReason};
//! use std::io::{Error, ErrorKind};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! async fn fetch(attempt: u32) -> Result<&'static str, Error> {
//!     if attempt < 3 { Err(ErrorKind::ConnectionReset.into()) } else { Ok("payload") }
//! }
//!
//! let budget = RetryBudget::new(); // one per dependency, shared by every call
//! let mut attempt = 0;
//! let body = (|| { attempt += 1; fetch(attempt) })
//!     .retry(Policy::interactive())
//!     .when(|e: &Error| e.kind() != ErrorKind::NotFound)
//!     .budget(&budget)
//!     .dependency("inventory")
//!     .await;
//! assert_eq!(body.unwrap(), "payload");
//!
//! let missing = (|| async { Err::<(), _>(Error::from(ErrorKind::NotFound)) })
//!     .retry(Policy::interactive())
//!     .when(|e: &Error| e.kind() != ErrorKind::NotFound)
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
//! - [`classify`]: what a result means ([`Verdict`]); HTTP status, I/O error and
//!   idempotency helpers.
//! - [`hints`]: `Retry-After` and `RateLimit` headers.
//! - [`RetryBudget`] and [`TokenBucket`]: fleet-level caps on retries
//!   ([`throttle::Throttle`]); [`CircuitBreaker`]: stop calling a dependency that
//!   is down.
//! - [`observe`]: the hook instrumentation implements (see `retryscope-otel`).
//! - [`Shared`]: budgets, breakers and names borrowed, or shared through an
//!   `Arc` so that a retry can be `'static` (spawned, or returned by a tower
//!   service).
//! - [`jobs`]: the policy without the loop, for job queues.
//! - Blocking code: [`Retry::call`].
//!
//! Determinism: delays come from a seedable generator ([`Retry::seed`],
//! [`JitterRng::seeded`]); time comes from tokio's clock, so tests run under
//! `tokio::time::pause()`, and budgets and breakers take a [`clock::Clock`].
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backoff;
mod blocking;
pub mod breaker;
pub mod budget;
pub mod classify;
pub mod clock;
mod driver;
mod error;
mod future;
pub mod hints;
mod jitter;
pub mod jobs;
pub mod observe;
pub mod outcome;
mod policy;
mod random;
mod retry;
mod shared;
pub mod throttle;
mod window;

pub use backoff::Backoff;
pub use breaker::CircuitBreaker;
pub use budget::{RetryBudget, TokenBucket};
pub use error::{Outcome, RetryError, StopReason};
pub use future::RetryFuture;
pub use jitter::Jitter;
pub use outcome::{DelaySource, ErrorType, Hint, Verdict};
pub use policy::{MAX_DURATION, MAX_JOB_DURATION, Policy, PolicyBuilder, PolicyError};
pub use random::JitterRng;
pub use retry::{Notify, Retry, Retryable};
pub use shared::Shared;
