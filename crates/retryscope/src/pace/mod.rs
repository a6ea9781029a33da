//! Pacing: what a dependency said about how fast to call it, learned once and
//! honoured by every call.
//!
//! A server that says "slow down" says it to the client, not to one call. A
//! [`Pacer`] keeps what one dependency's responses said — fed by
//! [`learn`](Pacer::learn), read from headers by
//! [`hints::pace_signal`](crate::hints::pace_signal) — and every call given it
//! with [`Retry::pacer`](crate::Retry::pacer) waits for it, new calls and
//! retries alike:
//!
//! - **A dependency-wide gate.** A `Retry-After` on a 429 or 503, gRPC
//!   pushback, an exhausted quota (`RateLimit: "default";r=0;t=5`): no call is
//!   sent before it has passed, and each held call comes back at a random
//!   point of a fifth of the wait after it (at most
//!   [`HINT_SPREAD_MAX`](crate::HINT_SPREAD_MAX)), so that twenty
//!   callers told "in 2 s" do not return in the same millisecond.
//! - **Quota spacing.** A quota of `r` requests over `t` seconds, on *any*
//!   response: sends are spaced `t / r` apart, so the quota lasts until the
//!   reset instead of running out before it. The rate goes on applying to
//!   slots taken under it; the next report replaces it.
//! - **Only ever slower.** Hints that are missing, malformed or beyond
//!   [`MAX_PACE`] change nothing, and nothing here can make a caller send
//!   sooner than it would without a pacer.
//!
//! A call whose wait would not fit in what is left of its deadline is not
//! sent: it stops at once with
//! [`StopReason::RateLimited`](crate::StopReason::RateLimited), and takes no
//! slot. A call cancelled while held sends nothing; its slot stays unused, so
//! pacing errs on the slow side.
//!
//! A pacer is a handle: clones share one state, a few dozen bytes whatever the
//! traffic. Integrations keep one per dependency, in their bounded
//! per-dependency table.
//!
//! ```
//! use retryscope::pace::{PaceSignal, Pacer, Quota};
//! use retryscope::{Policy, Retryable};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let pacer = Pacer::new(); // one per dependency, shared by every call
//! // A response said: two requests left in the next three seconds.
//! pacer.learn(&PaceSignal::none().with_quota(Quota::new(2, Duration::from_secs(3))));
//!
//! let start = tokio::time::Instant::now();
//! for _ in 0..3 {
//!     (|| async { Ok::<_, std::io::Error>(()) }).retry(Policy::interactive()).pacer(&pacer).await.unwrap();
//! }
//! // Sent at 0 s, 1.5 s and 3 s: the quota lasted until its reset.
//! assert_eq!(start.elapsed(), Duration::from_secs(3));
//! # }
//! ```

mod schedule;
mod signal;

pub(crate) use schedule::Admission;
pub use schedule::MAX_PACE;
pub use signal::{Held, HoldSource, PaceSignal, Quota};

use crate::clock::{Clock, DefaultClock};
use crate::random::JitterRng;
use schedule::Schedule;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// One dependency's pace, shared by every call to it. See the [module
/// docs](self).
#[derive(Clone)]
pub struct Pacer {
    inner: Arc<Inner>,
}

struct Inner {
    /// Whether nothing is in force: the path every call takes while the
    /// dependency has said nothing, one atomic load and no lock.
    idle: AtomicBool,
    // A mutex, not atomics: the state is a few fields that change together,
    // and it is taken only while a pace is in force or a signal arrives.
    schedule: Mutex<Schedule>,
    clock: Arc<dyn Clock>,
}

impl Pacer {
    /// A pacer on the default clock (tokio's with the `tokio` feature, so
    /// that paused-time tests see it; else the system's).
    pub fn new() -> Self {
        Self::with_clock(DefaultClock)
    }

    /// A pacer reading time from `clock`.
    pub fn with_clock(clock: impl Clock + 'static) -> Self {
        Self {
            inner: Arc::new(Inner {
                idle: AtomicBool::new(true),
                schedule: Mutex::new(Schedule::default()),
                clock: Arc::new(clock),
            }),
        }
    }

    /// Takes in what a response said. An empty signal costs nothing.
    pub fn learn(&self, signal: &PaceSignal) {
        if signal.not_before.is_none() && signal.quota.is_none() {
            return;
        }
        let now = self.inner.clock.now();
        let mut schedule = self.schedule();
        schedule.learn(now, signal);
        self.inner.idle.store(schedule.is_idle(), Ordering::Release);
    }

    /// The rate in force, in requests per second: `Some(0.0)` while a gate is
    /// closed, the quota's rate while one is spread, `None` while the
    /// dependency has said nothing that still applies.
    pub fn allowed_rate(&self) -> Option<f64> {
        if self.inner.idle.load(Ordering::Acquire) {
            return None;
        }
        let now = self.inner.clock.now();
        let mut schedule = self.schedule();
        let rate = schedule.allowed_rate(now);
        self.inner.idle.store(schedule.is_idle(), Ordering::Release);
        rate
    }

    /// When a call may send `after` from now, with `limit` left before its
    /// deadline at that point: a slot is taken unless it is refused.
    pub(crate) fn admit(&self, after: Duration, limit: Option<Duration>, rng: &mut JitterRng) -> Admission {
        if self.inner.idle.load(Ordering::Acquire) {
            return Admission::Now;
        }
        let at = self.inner.clock.now() + after;
        let mut schedule = self.schedule();
        let admission = schedule.admit(at, limit, rng);
        self.inner.idle.store(schedule.is_idle(), Ordering::Release);
        admission
    }

    /// Whether nothing is in force (one atomic load).
    pub(crate) fn is_idle(&self) -> bool {
        self.inner.idle.load(Ordering::Acquire)
    }

    fn schedule(&self) -> std::sync::MutexGuard<'_, Schedule> {
        // A poisoned lock means a thread panicked mid-update; the schedule is
        // a few plain fields, consistent after any of its statements.
        self.inner.schedule.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for Pacer {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Pacer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pacer")
            .field("idle", &self.inner.idle.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
