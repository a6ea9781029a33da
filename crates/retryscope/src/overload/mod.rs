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

mod adaptive_throttle;

pub use adaptive_throttle::{
    AdaptiveThrottle, AdaptiveThrottleBuilder, DEFAULT_K, DEFAULT_MAX_REJECTION, DEFAULT_WINDOW, MAX_K,
    MAX_WINDOW, MIN_K, MIN_WINDOW, OverloadError,
};
