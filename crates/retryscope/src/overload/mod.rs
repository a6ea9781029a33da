//! Overload without collapse: guards that keep a client's *first* attempts
//! from drowning a dependency that is already failing.
//!
//! Budgets and breakers guard retries, and a breaker only after its window
//! fills with failures; an open-loop client still sends every new request at
//! full rate into a server that is drowning in its queue. [`AdaptiveThrottle`]
//! is the Google SRE book's *client-side adaptive throttling* (ch. 21): each
//! client rejects requests locally, before sending them, with a probability
//! that grows as the dependency accepts fewer of them. A local rejection is
//! never sent; it stops the call with
//! [`StopReason::RejectedLocally`](crate::StopReason::RejectedLocally).
//!
//! A [`ConcurrencyLimiter`] bounds the attempts in flight to a dependency at
//! once, with a limit an algorithm adapts to what the dependency can take
//! (Netflix's concurrency-limits: [`Aimd`], [`Gradient2`]); an attempt that
//! finds it full waits a bounded time for a slot, then stops with
//! [`StopReason::ConcurrencyLimited`](crate::StopReason::ConcurrencyLimited).
//! A call's [`Priority`] says which calls both refuse first.

mod adaptive_throttle;
mod limit;
mod priority;

pub(crate) use adaptive_throttle::describe;
pub use adaptive_throttle::{AdaptiveThrottle, AdaptiveThrottleBuilder};
pub use limit::{
    Aimd, AimdBuilder, ConcurrencyLimiter, ConcurrencyLimiterBuilder, Gradient2, Gradient2Builder,
    LimitAlgorithm, LimitPermit,
};
#[cfg(test)]
pub(crate) use limit::{LIMIT, LIMIT_IN_FLIGHT};
pub use priority::Priority;
