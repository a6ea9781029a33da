//! Fleet-wide pacing for [retryscope](https://docs.rs/retryscope) through
//! Redis: a rate limit one replica of a service learns holds every replica,
//! and a quota is spent by the fleet rather than by each replica.
//!
//! A quota belongs to an API key, and every replica of a service spends the
//! same key. A [`RedisPaceShare`] given to a client
//! (`pace_shared(share)`, on the reqwest middleware's and the tower layer's
//! builders alike) shares each dependency's
//! [`Pacer`](retryscope::Pacer) with the other replicas that name the same
//! [`QuotaName`]:
//!
//! - **Gates are pushed.** A `Retry-After`, gRPC pushback or an exhausted
//!   quota one replica learns is written to
//!   `retryscope:pace:{quota}:{dependency}` (expiring when the gate opens) and
//!   published on the channel `retryscope:pace:{quota}`; every replica keeps
//!   one subscriber connection for all its dependencies and closes the same
//!   gate as soon as the message arrives (held calls report the source
//!   `fleet`). A replica that starts, or reconnects, later reads the gates
//!   in force once.
//! - **A quota is divided.** Each replica says it is alive every 200 ms in
//!   the sorted set `retryscope:fleet:{quota}` (a replica not heard from for
//!   1 s is no longer counted; the key expires with the fleet) and a quota it
//!   learns from a response is divided by the live replicas, rounded down:
//!   each spreads its part until the reset, and together they spend the
//!   quota, not N times the quota. (A per-call token bucket in Redis would
//!   put a round trip on every call to a limited dependency; the division
//!   puts none on any call.)
//! - **A retry budget's floor is divided**, when the same share is given to
//!   `budget_shared(share)` too. A [`RetryBudget`](retryscope::RetryBudget)
//!   lets each replica retry `ratio` of its requests plus `min_per_second`
//!   retries a second; over N replicas the ratio part is already the fleet's,
//!   but the floor is N times over. Shared, each budget keeps `1/N` of its
//!   floor, N being the live replicas of the heartbeat above (one heartbeat
//!   for pacing and budgets), pushed to the budgets at every heartbeat: a
//!   retry check reads its floor with one atomic load. While Redis does not
//!   answer, each budget keeps dividing by the N last read, as quotas do,
//!   and `retryscope.budget.shared` reads 0 for its dependency. Replicas that name the quota but do not call the
//!   dependency are counted too: the fleet then errs below its floor, never
//!   above.
//! - **No Redis on a call's path.** The pacer asks the share only when a
//!   response carried a pace hint, and the share answers from memory; every
//!   Redis operation runs in the background: a heartbeat within a deadline
//!   (50 ms by default, [`RedisPaceShareBuilder::timeout`], refused if 0 or
//!   over 1 s), a gate's publication or read within [`MAX_TIMEOUT`], 1 s,
//!   whatever the heartbeat's deadline (a gate that reaches the fleet late
//!   still holds it; one cut at the heartbeat's deadline would not).
//!   When Redis fails three heartbeats in a row or the subscriber connection
//!   drops, each replica paces alone: gates are no longer shared, and a
//!   quota is still divided by the fleet size last read (the replicas are
//!   most likely still there; only the store is gone), so the fleet does
//!   not spend it N times over while Redis is away. The gauge `retryscope.pace.shared` goes to 0 for its dependencies, the
//!   counter `retryscope.pace.shared.fallbacks` counts it and one log line
//!   says so; when Redis answers again, sharing resumes (the subscriber
//!   reconnects with a backoff from 50 ms to 2 s).
//!
//! The quota name is the operator's name for the API key (`openai-prod`),
//! never the key itself: it appears in Redis key names in clear. Names that
//! start like common credentials are refused ([`QuotaName`]). Replicas read
//! gates' ends from Redis's clock (`TIME` in the scripts), so their own
//! clocks need not agree. Needs Redis 6.2 or later.
//!
//! ```no_run
//! use retryscope_redis::RedisPaceShare;
//! use retryscope_reqwest::prelude::*;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = redis::Client::open("redis://127.0.0.1:6379/")?;
//! let share = RedisPaceShare::builder(client, "openai-prod").build()?;
//! let retry = retryscope_reqwest::RetryMiddleware::builder(retryscope::Policy::interactive())
//!     .pace_shared(share.clone())
//!     .budget_shared(share)? // optional: the retry budget's floor, divided too
//!     .build();
//! # drop(retry);
//! # Ok(())
//! # }
//! ```
//!
//! Telemetry: [docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md);
//! what to do when the fleet falls back:
//! [docs/runbook.md](https://github.com/retryscope/retryscope/blob/main/docs/runbook.md).

#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod name;
mod share;

pub use error::ShareError;
pub use name::{MAX_QUOTA_NAME, QuotaName};
pub use share::{DEFAULT_TIMEOUT, MAX_DEPENDENCIES, MAX_TIMEOUT, RedisPaceShare, RedisPaceShareBuilder};
