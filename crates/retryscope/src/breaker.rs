//! A lock-free circuit breaker: closed → open → half-open → closed.
//!
//! While **closed**, every call goes through and its outcome is recorded in a
//! sliding window. Once the window holds at least `min_calls` outcomes and the
//! share of failures reaches `failure_ratio`, the breaker **opens**: calls are
//! refused for `cool_down`. After that the next caller moves it to **half-open**,
//! where at most `half_open_probes` calls may be in flight; `half_open_probes`
//! successes close it again with an empty window, and any failure reopens it for
//! a fresh cool-down.
//!
//! A probe that never reports back (a hung call without a deadline, a blocking
//! call, a leaked permit) must not keep the breaker half-open forever. When every
//! probe slot is taken and no slot has been handed out for `probe_timeout`, the
//! probes in flight are presumed lost: the next caller starts a fresh half-open
//! period and becomes its first probe, and the lost probes' late outcomes are
//! ignored.
//!
//! The whole state machine lives in one `AtomicU64` changed by compare-exchange,
//! and the window is a ring of atomic counters, so no call ever waits on a lock.
//! While closed, a call only reads the state word: its outcome goes to the
//! window of the calling thread's *lane*, one of several padded copies that
//! are summed only when a failure asks whether to open, and its permit holds
//! that lane's handle, so threads on different cores write no common cache
//! line.
//! When the last probe slot was handed out is kept in a second word, tagged with
//! the half-open period it belongs to; it only decides *when* lost probes may be
//! replaced, never how many probes are in flight.

//!
//! The breaker itself is [`CircuitBreaker`](crate::CircuitBreaker), at the
//! crate root beside the budgets; this module holds what comes with it.

#[cfg(test)]
pub(crate) use crate::circuit::STATE;
pub use crate::circuit::{BreakerOpen, BreakerPermit, BreakerState, CircuitBreakerBuilder};
