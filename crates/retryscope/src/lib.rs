//! Safe, observable retries.
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
mod retry;
pub mod throttle;
mod window;

pub use backoff::Backoff;
pub use breaker::CircuitBreaker;
pub use budget::{RetryBudget, TokenBucket};
pub use driver::seeded_rng;
pub use error::{Outcome, RetryError, StopReason};
pub use future::RetryFuture;
pub use jitter::Jitter;
pub use outcome::{DelaySource, ErrorType, Hint, Verdict};
pub use policy::{MAX_DURATION, Policy, PolicyBuilder, PolicyError};
pub use retry::{Notify, Retry, Retryable};
