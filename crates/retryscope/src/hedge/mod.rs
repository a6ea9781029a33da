//! Hedged calls: a second copy of a slow idempotent request, the first
//! acceptable answer wins, the rest are cancelled.
//!
//! Retries answer failures; hedges answer slowness. A hedged call sends its
//! first copy, and if no answer has come after the [`HedgeDelay`] sends
//! another, up to [`HedgePolicy::max_copies`] in all (gRFC A6's
//! `hedgingPolicy`, tower's `hedge`). The copies run concurrently inside the
//! one future (nothing is spawned); the first acceptable result is the
//! call's, and the other copies' futures are dropped at once, which cancels
//! them (an HTTP client resets the stream or closes the connection).
//!
//! A hedged call is built as a retry is, by the one builder in its hedging
//! mode: [`Retryable::hedge`](crate::Retryable::hedge) in place of
//! [`retry`](crate::Retryable::retry), then the same setters
//! ([`Retry::dependency`](crate::Retry::dependency), [`when`](crate::Retry::when),
//! [`observe`](crate::Retry::observe)…), awaited into a [`HedgeFuture`].
//!
//! ```
//! use retryscope::dependency::Dependency;
//! use retryscope::hedge::{HedgeDelay, HedgePolicy};
//! use retryscope::{RetryBudget, Retryable};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // One policy and one dependency (its budget) per dependency, shared by every call.
//! let policy = HedgePolicy::builder()
//!     .max_copies(3)
//!     .delay(HedgeDelay::Fixed(Duration::from_millis(50)))
//!     .build()?;
//! let inventory = Dependency::new("inventory").with_budget(RetryBudget::default());
//!
//! let mut copies = 0;
//! let answer = (|| {
//!     copies += 1;
//!     let copy = copies;
//!     async move {
//!         // The first copy is stuck; the second answers in 10 ms.
//!         let took = if copy == 1 { Duration::from_secs(60) } else { Duration::from_millis(10) };
//!         tokio::time::sleep(took).await;
//!         Ok::<_, std::io::Error>(copy)
//!     }
//! })
//! .hedge(policy.clone())
//! .dependency(&inventory)
//! .await?;
//! assert_eq!(answer, 2);
//! # Ok(())
//! # }
//! ```
//!
//! # Which results end the call
//!
//! Each copy's result is classified as a retry's is: the default
//! ([`Transient`](crate::Transient)), [`when`](crate::Retry::when),
//! [`classify`](crate::Retry::classify) or
//! [`with_classifier`](crate::Retry::with_classifier).
//!
//! | verdict | meaning for a hedge |
//! |---|---|
//! | `Success` | the call's answer: the other copies are cancelled |
//! | `Retryable` | non-fatal (A6 `nonFatalStatusCodes`): the next copy goes at once, or after the [`Hint`](crate::Hint)'s delay if it carries one (gRPC pushback); copies in flight go on |
//! | `Unrepeatable`, `RetriedElsewhere` | "stop" (A6's pushback that says not to retry): no further copies, copies in flight go on |
//! | `Permanent` | fatal: the call ends with it, the other copies are cancelled |
//!
//! A copy cut at the attempt timeout is judged by the classifier's
//! [`timeout`](crate::classify::Classify::timeout) verdict, non-fatal by
//! default. When every copy has been sent and failed non-fatally, the call
//! ends with [`StopReason::AttemptsExhausted`](crate::StopReason) and the last
//! failure, as a retry does.
//!
//! # Idempotent requests only
//!
//! The engine cannot know whether running the operation twice at once is
//! safe: **the operation factory must be idempotent** (a read, a `PUT`) and
//! safe to run *concurrently*. The HTTP integrations hedge only idempotent
//! methods (a POST with an idempotency key is retried, not hedged: a server
//! honouring keys answers a concurrent copy with 409), and gRPC only the
//! methods whose service config has a `hedgingPolicy`.
//!
//! # Load, deadlines, breaker
//!
//! - Every copy beyond the first is charged to the dependency's budget ([`Retry::dependency`](crate::Retry::dependency))
//!   like a retry ([`Budget::try_acquire_retry`](crate::budget::Budget::try_acquire_retry));
//!   a refusal sends no further copies, so hedging cannot amplify an outage
//!   beyond the budget's share. Finished copies report to the budget as
//!   attempts do; cancelled ones report nothing.
//! - The policy's deadline bounds the whole call and its attempt timeout each
//!   copy, by default (15 s and 5 s).
//! - The dependency's breaker is asked before each copy: an open breaker
//!   sends nothing, and each finished copy reports to it. A cancelled copy's
//!   permit is released without a verdict.
//! - The dependency's pacer is asked before every copy, as before every
//!   retry: a hedge answers a slow dependency, and a dependency that asked to
//!   be called less gets no extra copy while it holds calls back. A copy the
//!   pacer holds waits out the hold (the observer hears it, as a retry's
//!   hold) and goes only if no copy has answered by then; one that would not
//!   fit the deadline is not sent, and no copy after it. Every copy sent
//!   takes its slot of a quota, as any call does.
//!
//! A hedged call is the engine's retry driver with overlapping attempts:
//! the same admission, the same settling of each copy, the same end.
//!
//! # What the observer hears
//!
//! The same [`Observer`](crate::observe::Observer) as for retries, with
//! [`OperationInfo::hedged`](crate::observe::OperationInfo::hedged) set:
//! every copy is an attempt ([`AttemptStart::hedge`](crate::observe::AttemptStart::hedge)
//! set, numbered from 1), attempts overlap, and each ends with its
//! [`HedgeOutcome`](crate::observe::HedgeOutcome): `won`, `cancelled` (no
//! error) or `failed`. There are no `waiting` events: a hedge's delay runs
//! while copies are in flight.

mod delay;
mod future;
mod latency;
mod policy;

pub use delay::{HedgeDelay, PercentileDelay};
pub use future::HedgeFuture;
pub(crate) use policy::describe;
pub use policy::{HedgePolicy, HedgePolicyBuilder};
