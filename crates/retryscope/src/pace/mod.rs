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
//!   sent before it has passed. **A gentle return**: the held calls come back
//!   one after another at no more than the rate calls were offered at before
//!   the hold (a moving average of call starts, [`offered_rate`](Pacer::offered_rate);
//!   four fifths of it), starting at a quarter of that and ramping up to it
//!   over a fifth of the wait (at most [`HINT_SPREAD_MAX`](crate::HINT_SPREAD_MAX)),
//!   as TCP's slow start does: a server that asked for less never gets the
//!   whole backlog at once. New calls after the gate go at once, so the two
//!   together stay within twice the offered rate. A client with no rate
//!   before the hold (its first call was told to wait) releases its held
//!   calls the same way at the rate they arrived *during* the hold: they are
//!   the load it is offered. A herd held in the same instant comes back
//!   spread over the ramp, so that twenty callers told "in 2 s" do not return
//!   in the same millisecond. A held call whose slot would not fit in its
//!   deadline is refused, as below. Gates another replica learned
//!   ([`PaceShare`]) are released by the same rule.
//! - **Quota spacing.** A quota of `r` requests over `t` seconds, on *any*
//!   response: sends are spaced `t / r` apart, so the quota lasts until the
//!   reset instead of running out before it. Later reports of the same window
//!   keep the window's earliest known end (`t` is whole seconds, rounded up)
//!   and spread what is left over what is left of it. Slots beyond the window
//!   keep to the policy's rate (`RateLimit-Policy`'s `q` per `w`), else to
//!   the rate of the report that opened the window.
//! - **Adaptive mode**, opt in ([`Pacer::adaptive`]): the AWS SDKs'
//!   client-side send-rate limiter ([`adaptive::AdaptiveRate`]). From the
//!   first throttling answer (429, `RESOURCE_EXHAUSTED`) on, every send takes
//!   a token from a bucket filled at a rate that backs off multiplicatively on
//!   each throttling answer and recovers along the CUBIC curve.
//! - **Only ever slower.** Hints that are missing, malformed or beyond
//!   a day (the pacer's limits below) change nothing, and nothing here can make a caller send
//!   sooner than it would without a pacer.
//!
//! A call whose wait would not leave it half of what is left of its deadline
//! (at most 1 s) for the attempt itself is not sent: it
//! stops at once with
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

pub mod adaptive;
mod offered;
mod release;
mod schedule;
mod share;
pub(crate) mod signal;

pub(crate) use schedule::Admission;
pub use share::{PaceShare, SharedPacer};
pub(crate) use signal::Held;
pub use signal::{HoldSource, PaceSignal, Quota, QuotaPolicy};

use crate::clock::{Clock, DefaultClock};
use adaptive::{AdaptiveRate, Answer};
use offered::OfferedRate;
use schedule::Schedule;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// One dependency's pace, shared by every call to it. See the [module
/// docs](self).
///
/// **Limits**:
///
/// | | value |
/// |---|---|
/// | The longest wait, or quota window, a hint may set: a value beyond it is taken for a broken header and ignored. | 1 day |
/// | The longest a held call's slot may leave it for the attempt itself: it keeps at least half of what is left of its deadline, up to this much, or is refused at once. | 1 s |
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
    /// The adaptive limiter, in adaptive mode.
    adaptive: Option<AdaptiveRate>,
    /// The rate calls are offered at: what held calls come back at.
    offered: OfferedRate,
    clock: Arc<dyn Clock>,
    /// The fleet's share, once given ([`Pacer::share_with`]): read only when
    /// a response said something about pace.
    share: OnceLock<Share>,
}

/// A pacer's place in a fleet: the share and the dependency it paces.
struct Share {
    share: Arc<dyn PaceShare>,
    dependency: Arc<str>,
}

impl Pacer {
    /// A pacer on the default clock (tokio's with the `tokio` feature, so
    /// that paused-time tests see it; else the system's).
    pub fn new() -> Self {
        Self::with_clock(DefaultClock)
    }

    /// A pacer reading time from `clock`.
    pub fn with_clock(clock: impl Clock + 'static) -> Self {
        Self::assemble(Arc::new(clock), false)
    }

    /// A pacer in adaptive mode, on the default clock: the gates and quota
    /// spacing of [`new`](Self::new), and the AWS SDKs' adaptive send-rate
    /// limiter ([`adaptive::AdaptiveRate`]), in force from the first
    /// throttling answer on.
    pub fn adaptive() -> Self {
        Self::adaptive_with_clock(DefaultClock)
    }

    /// A pacer in adaptive mode reading time from `clock`.
    pub fn adaptive_with_clock(clock: impl Clock + 'static) -> Self {
        Self::assemble(Arc::new(clock), true)
    }

    fn assemble(clock: Arc<dyn Clock>, adaptive: bool) -> Self {
        let adaptive = adaptive.then(|| AdaptiveRate::new(clock.now()));
        Self {
            inner: Arc::new(Inner {
                idle: AtomicBool::new(true),
                schedule: Mutex::new(Schedule::default()),
                adaptive,
                offered: OfferedRate::default(),
                clock,
                share: OnceLock::new(),
            }),
        }
    }

    /// Takes in what a response said. In adaptive mode every answer counts
    /// (call it for each); otherwise an empty signal costs nothing.
    pub fn learn(&self, signal: &PaceSignal) {
        if let Some(adaptive) = &self.inner.adaptive {
            let answer = if signal.throttled { Answer::Throttled } else { Answer::Other };
            adaptive.record(self.inner.clock.now(), answer);
            if adaptive.allowed_rate().is_some() {
                self.inner.idle.store(false, Ordering::Release);
            }
        }
        if signal.not_before.is_none() && signal.quota.is_none() {
            return;
        }
        let shared;
        let signal = match self.inner.share.get() {
            None => signal,
            Some(Share { share, dependency }) => {
                publish(&**share, dependency, signal);
                shared = allot(signal, share.replicas(dependency));
                &shared
            }
        };
        let now = self.inner.clock.now();
        let offered = self.inner.offered.rate(now);
        let mut schedule = self.schedule();
        schedule.learn(now, signal, offered);
        self.settle_idle(&schedule);
    }

    /// Shares this pacer with the other replicas of a fleet through `share`,
    /// as the pacer of `dependency` (see [`PaceShare`]): the gates it learns
    /// are published, the gates the others learn hold its calls too, and a
    /// quota it learns is divided among the replicas that spend it. Once per
    /// pacer: `false` (and nothing changes) when it is shared already.
    pub fn share_with(&self, share: Arc<dyn PaceShare>, dependency: &str) -> bool {
        let dependency: Arc<str> = dependency.into();
        let joined = Share { share: Arc::clone(&share), dependency: Arc::clone(&dependency) };
        if self.inner.share.set(joined).is_err() {
            return false;
        }
        share.attach(&dependency, SharedPacer { inner: Arc::downgrade(&self.inner) });
        true
    }

    /// Whether this pacer is shared with a fleet ([`share_with`](Self::share_with)).
    pub fn is_shared(&self) -> bool {
        self.inner.share.get().is_some()
    }

    /// A gate another replica learned: no call before `wait` from now.
    fn learn_shared(&self, wait: Duration) {
        let now = self.inner.clock.now();
        let offered = self.inner.offered.rate(now);
        let mut schedule = self.schedule();
        schedule.close_shared(now, wait, offered);
        self.settle_idle(&schedule);
    }

    /// A call (or retry) is about to be sent, or held: counted in the rate
    /// the dependency is offered, which held calls come back at after a gate.
    /// One atomic add, and a coarse clock reading every few calls.
    #[inline]
    pub(crate) fn offered(&self) {
        self.inner.offered.call(&*self.inner.clock);
    }

    /// The rate the dependency is offered calls at, in calls per second:
    /// `None` until a few calls were counted over some time.
    pub fn offered_rate(&self) -> Option<f64> {
        self.inner.offered.rate(self.inner.clock.now())
    }

    /// Stores whether nothing is in force, with the schedule's lock held: no
    /// gate, no spacing, and no adaptive limiter in force (once in force, it
    /// stays so for the pacer's life).
    fn settle_idle(&self, schedule: &Schedule) {
        let adaptive_idle = self.inner.adaptive.as_ref().is_none_or(|a| a.allowed_rate().is_none());
        self.inner.idle.store(schedule.is_idle() && adaptive_idle, Ordering::Release);
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
        self.settle_idle(&schedule);
        let adaptive = self.inner.adaptive.as_ref().and_then(AdaptiveRate::allowed_rate);
        match (rate, adaptive) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (rate, adaptive) => rate.or(adaptive),
        }
    }

    /// When a call may send `after` from now, with `limit` left before its
    /// deadline at that point: a slot is taken unless it is refused.
    pub(crate) fn admit(&self, after: Duration, limit: Option<Duration>) -> Admission {
        if self.inner.idle.load(Ordering::Acquire) {
            return Admission::Now;
        }
        let now = self.inner.clock.now();
        let mut schedule = self.schedule();
        let admission = schedule.admit(now, now + after, limit);
        self.settle_idle(&schedule);
        admission
    }

    /// In adaptive mode, a token for a send now: [`Admission::Now`] when one
    /// was taken (or none is needed), a hold after which to ask again, or a
    /// refusal when that wait would not fit in `limit`. Asked at the moment
    /// of sending, never ahead: the limiter's bucket fills in real time.
    pub(crate) fn take_token(&self, limit: Option<Duration>) -> Admission {
        let Some(adaptive) = &self.inner.adaptive else { return Admission::Now };
        match adaptive.acquire(self.inner.clock.now()) {
            adaptive::Admission::Send => Admission::Now,
            adaptive::Admission::Wait(wait) if limit.is_some_and(|limit| wait >= limit) => {
                Admission::Refused { wait, source: HoldSource::Adaptive }
            }
            adaptive::Admission::Wait(wait) => Admission::Hold { wait, source: HoldSource::Adaptive },
        }
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

/// Tells the fleet the gate `signal` closes, if it closes one: a wait, or an
/// exhausted quota (waited out until its reset).
fn publish(share: &dyn PaceShare, dependency: &str, signal: &PaceSignal) {
    if let Some(hint) = signal.not_before {
        share.publish_gate(dependency, hint.delay, HoldSource::of(hint));
    }
    if let Some(quota) = signal.quota.filter(|quota| quota.remaining == 0) {
        share.publish_gate(dependency, quota.reset, HoldSource::RateLimit);
    }
}

/// `signal` with its quota divided among `replicas`: this replica's part,
/// rounded down (a part of nothing is waited out until the reset: the fleet
/// errs on the slow side rather than over the quota).
fn allot(signal: &PaceSignal, replicas: u32) -> PaceSignal {
    let replicas = u64::from(replicas.max(1));
    let mut signal = *signal;
    if let Some(quota) = signal.quota.as_mut().filter(|_| replicas > 1) {
        quota.remaining /= replicas;
        if let Some(policy) = quota.policy.as_mut() {
            policy.quota /= replicas;
        }
    }
    signal
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
            .field("adaptive", &self.inner.adaptive.is_some())
            .field("shared", &self.is_shared())
            .finish_non_exhaustive()
    }
}
