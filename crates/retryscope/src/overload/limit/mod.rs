//! Adaptive concurrency limits per dependency, as Netflix's
//! concurrency-limits defines them: a limiter hands out one permit per
//! attempt, up to a limit that an algorithm moves with what each attempt's
//! end says (its round trip, whether it was dropped). One algorithm per file:
//! [`Aimd`] (loss-based) and [`Gradient2`] (latency-based).

mod aimd;
mod gradient2;
mod guard;

pub use aimd::{Aimd, AimdBuilder};
pub use gradient2::{Gradient2, Gradient2Builder};
#[cfg(test)]
pub(crate) use guard::{LIMIT, LIMIT_IN_FLIGHT};

use super::Priority;
use crate::setting::SettingError;
use crate::setting::SettingValue;
use gradient2::LongRtt;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The highest limit any algorithm accepts: far beyond what one client
/// should ever have in flight to one dependency.
pub(crate) const MAX_LIMIT: u32 = 10_000;
/// The longest duration setting (an AIMD timeout, a wait for a slot).
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an attempt waits for a slot unless set: none, as Netflix's
/// `SimpleLimiter` (refused at once when the limit is full).
const DEFAULT_MAX_WAIT: Duration = Duration::ZERO;
/// The top share of the limit kept for critical calls unless set.
const DEFAULT_SHEDDABLE_RESERVE: f64 = 0.2;
/// How often a waiting attempt looks for a free slot again: waiters poll,
/// there is no queue to grow (see [`ConcurrencyLimiterBuilder::max_wait`]).
pub(crate) const SLOT_POLL: Duration = Duration::from_millis(2);

/// What an attempt's end tells the algorithm.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    /// From the moment it took its slot to its end.
    pub(crate) rtt: Duration,
    /// How many attempts were in flight when it took its slot, itself
    /// included (Netflix's `inflight`).
    pub(crate) in_flight: u32,
    /// Whether it was dropped: a transient failure or a request to slow down.
    pub(crate) dropped: bool,
}

/// The algorithm that moves a [`ConcurrencyLimiter`]'s limit: an [`Aimd`]
/// (loss-based) or a [`Gradient2`] (latency-based), converted with `into()`
/// where a limiter is made (`ConcurrencyLimiter::new(Aimd::default())`).
/// Opaque: the algorithm's own type is the one path to its settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitAlgorithm(Algorithm);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Algorithm {
    Aimd(Aimd),
    Gradient2(Gradient2),
}

impl LimitAlgorithm {
    fn initial_limit(&self) -> u32 {
        match self.0 {
            Algorithm::Aimd(a) => a.initial_limit,
            Algorithm::Gradient2(g) => g.initial_limit,
        }
    }

    /// The algorithm's name, `aimd` or `gradient2`, for the limiter's `Debug`
    /// (not a telemetry attribute: the limit's gauges carry the dependency
    /// alone).
    const fn as_str(&self) -> &'static str {
        match self.0 {
            Algorithm::Aimd(_) => "aimd",
            Algorithm::Gradient2(_) => "gradient2",
        }
    }
}

impl From<Aimd> for LimitAlgorithm {
    fn from(aimd: Aimd) -> Self {
        LimitAlgorithm(Algorithm::Aimd(aimd))
    }
}

impl From<Gradient2> for LimitAlgorithm {
    fn from(gradient2: Gradient2) -> Self {
        LimitAlgorithm(Algorithm::Gradient2(gradient2))
    }
}

/// An adaptive concurrency limit for one dependency: at most
/// [`limit`](Self::limit) attempts in flight at once, the limit moved by the
/// algorithm after each attempt.
///
/// Give one to every call to a dependency
/// ([`Dependency::with_concurrency_limit`](crate::dependency::Dependency::with_concurrency_limit)); clones
/// share one state. The driver asks it last before an attempt is sent, after
/// the pacer: an attempt that finds the limit full waits for a slot for up to
/// [`max_wait`](ConcurrencyLimiterBuilder::max_wait) (and never past the
/// call's deadline), then stops with
/// [`StopReason::ConcurrencyLimited`](crate::StopReason::ConcurrencyLimited),
/// never sent. The attempt's end releases the slot: a success or a permanent
/// answer as a sample of its round trip, a transient failure or a request to
/// slow down as a drop, a cancelled attempt as nothing.
///
/// State sits behind one short lock, taken once when an attempt takes a slot
/// and once when it gives it back.
///
/// **Defaults and limits**:
///
/// | | value |
/// |---|---|
/// | The highest limit any algorithm accepts: far beyond what one client should ever have in flight to one dependency. | 10,000 |
/// | How long an attempt waits for a slot unless set: none, as Netflix's `SimpleLimiter` (refused at once when the limit is full). | 0 |
/// | The top share of the limit kept for critical calls: a sheddable call takes a slot only while fewer than `limit · (1 − 0.2)` are in flight. | 0.2 |
/// | The longest duration setting (an AIMD timeout, a wait for a slot). | 60 s |
/// | How often a waiting attempt looks for a free slot again: waiters poll, there is no queue to grow. | 2 ms |
#[derive(Clone)]
pub struct ConcurrencyLimiter {
    inner: Arc<Inner>,
}

struct Inner {
    algorithm: LimitAlgorithm,
    max_wait: Duration,
    reserve: f64,
    state: Mutex<State>,
}

struct State {
    limit: f64,
    in_flight: u32,
    long_rtt: LongRtt,
}

impl ConcurrencyLimiter {
    /// A limiter moved by `algorithm`, refusing at once when full.
    pub fn new(algorithm: impl Into<LimitAlgorithm>) -> Self {
        Self::from_settings(algorithm.into(), DEFAULT_MAX_WAIT, DEFAULT_SHEDDABLE_RESERVE)
    }

    /// A limiter moved by `algorithm`, with other settings than the defaults.
    pub fn builder(algorithm: impl Into<LimitAlgorithm>) -> ConcurrencyLimiterBuilder {
        ConcurrencyLimiterBuilder {
            algorithm: algorithm.into(),
            max_wait: DEFAULT_MAX_WAIT,
            reserve: DEFAULT_SHEDDABLE_RESERVE,
        }
    }

    fn from_settings(algorithm: LimitAlgorithm, max_wait: Duration, reserve: f64) -> Self {
        let state =
            State { limit: f64::from(algorithm.initial_limit()), in_flight: 0, long_rtt: LongRtt::default() };
        Self { inner: Arc::new(Inner { algorithm, max_wait, reserve, state: Mutex::new(state) }) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.inner)
    }

    /// The limit now: how many attempts may be in flight at once.
    pub fn limit(&self) -> u32 {
        self.state().limit as u32
    }

    /// How many attempts hold a slot now.
    pub fn in_flight(&self) -> u32 {
        self.state().in_flight
    }

    /// How long an attempt waits for a slot before it is refused.
    pub(crate) fn max_wait(&self) -> Duration {
        self.inner.max_wait
    }

    /// Takes a slot for an attempt of `priority`, or `None` when the limit is
    /// full for it (a sheddable attempt finds it full once
    /// `limit · (1 − reserve)` are in flight).
    pub fn try_acquire(&self, priority: Priority) -> Option<LimitPermit> {
        let mut state = self.state();
        let limit = state.limit as u32;
        let ceiling = if priority.is_sheddable() {
            (f64::from(limit) * (1.0 - self.inner.reserve)) as u32
        } else {
            limit
        };
        if state.in_flight >= ceiling {
            return None;
        }
        state.in_flight += 1;
        let in_flight = state.in_flight;
        drop(state);
        Some(LimitPermit { inner: Arc::clone(&self.inner), in_flight, settled: false })
    }
}

fn lock(inner: &Inner) -> MutexGuard<'_, State> {
    // Nothing panics while the lock is held; a poisoned lock still holds
    // consistent counts.
    inner.state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl fmt::Debug for ConcurrencyLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("ConcurrencyLimiter")
            .field("algorithm", &self.inner.algorithm.as_str())
            .field("limit", &(state.limit as u32))
            .field("in_flight", &state.in_flight)
            .finish_non_exhaustive()
    }
}

/// A slot of a [`ConcurrencyLimiter`], held by one attempt. Settle it with
/// [`success`](Self::success) or [`dropped`](Self::dropped); dropping it
/// unsettled frees the slot and tells the algorithm nothing (Netflix's
/// `ignore`).
#[must_use = "a permit holds a slot until it is settled or dropped"]
pub struct LimitPermit {
    inner: Arc<Inner>,
    in_flight: u32,
    settled: bool,
}

impl LimitPermit {
    /// The dependency answered after `rtt` (a success, or a permanent
    /// error: the dependency was healthy enough to answer).
    pub fn success(self, rtt: Duration) {
        self.settle(rtt, false);
    }

    /// The attempt was dropped after `rtt`: a transient failure, a timeout,
    /// or a request to slow down.
    pub fn dropped(self, rtt: Duration) {
        self.settle(rtt, true);
    }

    fn settle(mut self, rtt: Duration, dropped: bool) {
        self.settled = true;
        let sample = Sample { rtt, in_flight: self.in_flight, dropped };
        let mut guard = lock(&self.inner);
        let state = &mut *guard;
        state.in_flight = state.in_flight.saturating_sub(1);
        state.limit = match &self.inner.algorithm.0 {
            Algorithm::Aimd(aimd) => aimd.update(state.limit, sample),
            Algorithm::Gradient2(g) => g.update(state.limit, &mut state.long_rtt, sample),
        };
    }
}

impl Drop for LimitPermit {
    fn drop(&mut self) {
        if !self.settled {
            let mut state = lock(&self.inner);
            state.in_flight = state.in_flight.saturating_sub(1);
        }
    }
}

impl fmt::Debug for LimitPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitPermit").field("in_flight", &self.in_flight).finish_non_exhaustive()
    }
}

/// Builds a [`ConcurrencyLimiter`]; see [`ConcurrencyLimiter::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder makes no limiter until `build` is called"]
pub struct ConcurrencyLimiterBuilder {
    algorithm: LimitAlgorithm,
    max_wait: Duration,
    reserve: f64,
}

impl ConcurrencyLimiterBuilder {
    /// How long an attempt that finds the limit full waits for a slot
    /// before it is refused, within zero..=60 s (default zero:
    /// refused at once). The wait never crosses the call's deadline. Waiters
    /// look for a slot every 2 ms rather than queue: nothing grows
    /// with their number, and no order among them is promised.
    pub const fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// The top share of the limit kept for critical calls, within `0..=1`
    /// (0.2 outside the engine's own tests: the table in
    /// [`ConcurrencyLimiter`]'s docs).
    #[cfg(test)]
    pub(crate) const fn sheddable_reserve(mut self, reserve: f64) -> Self {
        self.reserve = reserve;
        self
    }

    /// The limiter, or the setting that is out of range.
    pub fn build(self) -> Result<ConcurrencyLimiter, SettingError> {
        if self.max_wait > MAX_TIMEOUT {
            return Err(SettingError::overload("max_wait", SettingValue::Duration(self.max_wait)));
        }
        if !(0.0..=1.0).contains(&self.reserve) {
            return Err(SettingError::overload("sheddable_reserve", SettingValue::Number(self.reserve)));
        }
        Ok(ConcurrencyLimiter::from_settings(self.algorithm, self.max_wait, self.reserve))
    }
}

/// Checks an algorithm's limits: `1 ≤ min ≤ initial ≤ max ≤ MAX_LIMIT`.
fn check_limits(initial: u32, min: u32, max: u32) -> Result<(), SettingError> {
    let refuse = |setting, value| Err(SettingError::overload(setting, SettingValue::Count(value)));
    if min == 0 {
        return refuse("min_limit", min);
    }
    if max < min || max > MAX_LIMIT {
        return refuse("max_limit", max);
    }
    if !(min..=max).contains(&initial) {
        return refuse("initial_limit", initial);
    }
    Ok(())
}

/// Checks a duration setting: within 1 ms..=`MAX_TIMEOUT`.
fn check_duration(setting: &'static str, value: Duration) -> Result<(), SettingError> {
    if (Duration::from_millis(1)..=MAX_TIMEOUT).contains(&value) {
        Ok(())
    } else {
        Err(SettingError::overload(setting, SettingValue::Duration(value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aimd(initial: u32) -> Aimd {
        Aimd::builder().initial_limit(initial).min_limit(1).build().expect("valid")
    }

    #[test]
    fn a_full_limit_refuses_and_a_released_slot_is_free_again() {
        let limiter = ConcurrencyLimiter::new(aimd(2));
        let a = limiter.try_acquire(Priority::Critical).expect("slot 1");
        let b = limiter.try_acquire(Priority::Critical).expect("slot 2");
        assert!(limiter.try_acquire(Priority::Critical).is_none());
        assert_eq!(limiter.in_flight(), 2);
        drop(a); // unsettled: frees the slot, the limit does not move
        assert_eq!((limiter.limit(), limiter.in_flight()), (2, 1));
        b.dropped(Duration::from_millis(1)); // 2 · 0.9 = 1
        assert_eq!((limiter.limit(), limiter.in_flight()), (1, 0));
    }

    #[test]
    fn sheddable_calls_find_the_limit_full_first() {
        let limiter = ConcurrencyLimiter::new(aimd(10));
        // 10 · (1 − 0.2) = 8 slots for sheddable calls, the last 2 for critical ones.
        let held: Vec<_> =
            (0..8).map(|_| limiter.try_acquire(Priority::Sheddable).expect("below 8")).collect();
        assert!(limiter.try_acquire(Priority::Sheddable).is_none());
        let c1 = limiter.try_acquire(Priority::Critical).expect("reserved");
        let c2 = limiter.try_acquire(Priority::Critical).expect("reserved");
        assert!(limiter.try_acquire(Priority::Critical).is_none());
        assert_eq!(limiter.in_flight(), 10);
        drop((held, c1, c2));
        assert_eq!(limiter.in_flight(), 0);
    }

    #[test]
    fn builder_settings_out_of_range_are_refused() {
        for (builder, setting) in [
            (ConcurrencyLimiter::builder(aimd(1)).max_wait(Duration::from_secs(61)), "max_wait"),
            (ConcurrencyLimiter::builder(aimd(1)).sheddable_reserve(1.5), "sheddable_reserve"),
            (ConcurrencyLimiter::builder(aimd(1)).sheddable_reserve(f64::NAN), "sheddable_reserve"),
        ] {
            let error = builder.build().expect_err("out of range");
            assert!(error.setting() == setting, "{error}");
        }
    }
}
