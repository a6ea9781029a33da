//! The pacer: one dependency's pace, the state behind it and the fleet's share of it.

use super::adaptive::{AdaptiveRate, Answer};
use super::offered::OfferedRate;
use super::schedule::{Admission, Schedule, is_gate};
use super::{HoldSource, PaceShare, PaceSignal, SharedPacer, adaptive};
use crate::clock::{Clock, DefaultClock};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// One dependency's pace, shared by every call to it. See the [module
/// docs](super).
///
/// **Limits**:
///
/// | | value |
/// |---|---|
/// | The longest wait, or quota window, a hint may set: a value beyond it is taken for a broken header and ignored. | 1 day |
/// | The longest a held call's slot may leave it for the attempt itself: it keeps at least half of what is left of its deadline, up to this much, or is refused at once. | 1 s |
#[derive(Clone)]
pub struct Pacer {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
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
    /// limiter, in force from the first throttling answer on: a throttling
    /// answer cuts the allowed rate to 70 % of the measured send rate, any
    /// other lets it climb back along a CUBIC curve, and it never falls below
    /// half a call per second, so a throttled client keeps learning.
    pub fn adaptive() -> Self {
        Self::assemble(Arc::new(DefaultClock), true)
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
    /// (call it for each); otherwise an empty signal costs nothing. A call
    /// made through the engine with this pacer's dependency needs none of
    /// it: the engine hands the pacer what each answer says, as the call's
    /// classifier reads it
    /// ([`Classify::pace`](crate::classify::Classify::pace)). Call it
    /// yourself for answers the engine does not see.
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
    pub(super) fn learn_shared(&self, wait: Duration) {
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

/// Tells the fleet the gate `signal` closes, if it closes one this pacer
/// keeps: a wait, or an exhausted quota (waited out until its reset). A wait
/// past a day is not published: the fleet's store keeps the latest gate, and
/// one absurd header would otherwise stand over every real gate until it
/// ended.
fn publish(share: &dyn PaceShare, dependency: &str, signal: &PaceSignal) {
    if let Some(hint) = signal.not_before.filter(|hint| is_gate(hint.delay)) {
        share.publish_gate(dependency, hint.delay, HoldSource::of(hint));
    }
    if let Some(quota) = signal.quota.filter(|quota| quota.remaining == 0 && is_gate(quota.reset)) {
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
