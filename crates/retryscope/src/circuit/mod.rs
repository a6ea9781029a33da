//! The circuit breaker's implementation: [`CircuitBreaker`] at the crate
//! root, its builder, permit and states in [`breaker`](crate::breaker).

use crate::sync::{AtomicU64, CachePadded, Ordering, fence, lane_count, lane_hint};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::budget::{MAX_WINDOW, MIN_WINDOW};
use crate::clock::{GuardClock, Timeline};
use crate::setting::{SettingError, SettingValue};
use crate::window::SlottedWindow;

/// The longest cool-down a [`CircuitBreaker`] accepts.
const MAX_COOL_DOWN: Duration = Duration::from_secs(86_400);
/// The most half-open probes a [`CircuitBreaker`] accepts.
const MAX_HALF_OPEN_PROBES: u32 = 65_535;
/// The shortest probe timeout a [`CircuitBreaker`] accepts.
const MIN_PROBE_TIMEOUT: Duration = Duration::from_millis(1);
/// The longest probe timeout a [`CircuitBreaker`] accepts.
const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(86_400);
/// How long the probes of a full half-open breaker may go without handing out a
/// slot before they are presumed lost, unless configured otherwise.
const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Counter indices inside the breaker's window.
const SUCCESSES: usize = 0;
const FAILURES: usize = 1;

mod builder;
mod guard;
mod permit;
mod state;
#[cfg(test)]
mod tests;
mod word;

pub use builder::CircuitBreakerBuilder;
#[cfg(test)]
pub(crate) use guard::STATE;
pub use permit::BreakerPermit;
use permit::Role;
pub(crate) use state::describe;
pub use state::{BreakerOpen, BreakerState};
use word::{LastProbe, PAYLOAD_BITS, PAYLOAD_MASK, Phase, Word, millis};

/// A circuit breaker shared by every caller of one dependency.
///
/// Call [`try_acquire`](Self::try_acquire) before every attempt and report the
/// attempt's outcome through the returned [`BreakerPermit`]. Clones share one
/// breaker. See the [`breaker`](crate::breaker) module's docs for the state machine.
///
/// # Example
///
/// ```
/// use retryscope::CircuitBreaker;
/// use retryscope::breaker::BreakerState;
/// use retryscope::clock::ManualClock;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let breaker = CircuitBreaker::builder()
///     .min_calls(4)
///     .failure_ratio(0.5)
///     .cool_down(Duration::from_secs(5))
///     .half_open_probes(1)
///     .clock(clock.clone())
///     .build()?;
///
/// for _ in 0..4 {
///     breaker.try_acquire()?.failure();
/// }
/// assert_eq!(breaker.state(), BreakerState::Open);
/// let refused = breaker.try_acquire().expect_err("open");
/// assert_eq!(refused.retry_in, Duration::from_secs(5));
///
/// clock.advance(Duration::from_secs(5));
/// let probe = breaker.try_acquire()?;
/// assert_eq!(breaker.state(), BreakerState::HalfOpen);
/// probe.success();
/// assert_eq!(breaker.state(), BreakerState::Closed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// **Limits and defaults**:
///
/// | | value |
/// |---|---|
/// | The longest cool-down a [`CircuitBreaker`] accepts. | 24 h |
/// | The most half-open probes a [`CircuitBreaker`] accepts. | 65,535 |
/// | The shortest probe timeout a [`CircuitBreaker`] accepts. | 1 ms |
/// | The longest probe timeout a [`CircuitBreaker`] accepts. | 24 h |
/// | How long the probes of a full half-open breaker may go without handing out a slot before they are presumed lost, unless configured otherwise (`probe_timeout`). | 30 s |
#[derive(Clone)]
pub struct CircuitBreaker {
    inner: Arc<Inner>,
    /// One handle per lane; a permit clones its thread's, so the reference
    /// count it bumps is its lane's, not one every thread shares.
    lanes: Arc<[Arc<Lane>]>,
}

/// A lane's handle on the shared breaker. Padded so that two lanes' reference
/// counts never share a cache line.
#[repr(align(128))]
struct Lane {
    inner: Arc<Inner>,
    /// Which of [`Inner::windows`] this lane's outcomes go to.
    index: usize,
}

struct Inner {
    /// The state machine's times, cool-downs and probe timeouts, are kept to
    /// the millisecond on the clock's precise reading; the windows' epochs,
    /// which every closed-state outcome reads, on its coarse reading (see
    /// [`Clock::now_coarse`]).
    time: Timeline,
    state: AtomicU64,
    /// When the current half-open period last handed out a probe slot: its
    /// generation in the high bits, the time in (wrapped) milliseconds since
    /// `origin` in the low 40. Only ever moves forward.
    last_probe: AtomicU64,
    /// The closed-state outcome window, one per lane; the window proper is
    /// their sum.
    windows: Box<[CachePadded<SlottedWindow<2>>]>,
    settings: Settings,
}

#[derive(Debug, Clone, Copy)]
struct Settings {
    failure_ratio: f64,
    min_calls: u32,
    window: Duration,
    cool_down: Duration,
    half_open_probes: u32,
    probe_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            failure_ratio: 0.5,
            min_calls: 20,
            window: Duration::from_secs(10),
            cool_down: Duration::from_secs(5),
            half_open_probes: 3,
            probe_timeout: DEFAULT_PROBE_TIMEOUT,
        }
    }
}

impl Settings {
    fn validate(self) -> Result<Self, SettingError> {
        // Written so that NaN fails too.
        if !(self.failure_ratio > 0.0 && self.failure_ratio <= 1.0) {
            return Err(SettingError::breaker("failure_ratio", SettingValue::Number(self.failure_ratio)));
        }
        if self.min_calls == 0 {
            return Err(SettingError::breaker("min_calls", SettingValue::Count(self.min_calls)));
        }
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&self.window) {
            return Err(SettingError::breaker("window", SettingValue::Duration(self.window)));
        }
        if self.cool_down.is_zero() || self.cool_down > MAX_COOL_DOWN {
            return Err(SettingError::breaker("cool_down", SettingValue::Duration(self.cool_down)));
        }
        if !(1..=MAX_HALF_OPEN_PROBES).contains(&self.half_open_probes) {
            return Err(SettingError::breaker(
                "half_open_probes",
                SettingValue::Count(self.half_open_probes),
            ));
        }
        if !(MIN_PROBE_TIMEOUT..=MAX_PROBE_TIMEOUT).contains(&self.probe_timeout) {
            return Err(SettingError::breaker("probe_timeout", SettingValue::Duration(self.probe_timeout)));
        }
        Ok(self)
    }
}

impl CircuitBreaker {
    /// A builder starting from the defaults.
    #[must_use]
    pub fn builder() -> CircuitBreakerBuilder {
        CircuitBreakerBuilder::default()
    }

    fn assemble(settings: Settings, clock: GuardClock) -> Self {
        let lanes = lane_count();
        let inner = Arc::new(Inner {
            windows: (0..lanes).map(|_| CachePadded(SlottedWindow::new(settings.window))).collect(),
            time: clock.start(),
            state: AtomicU64::new(Word { generation: 0, phase: Phase::Closed }.pack()),
            last_probe: AtomicU64::new(0),
            settings,
        });
        let lanes = (0..lanes).map(|index| Arc::new(Lane { inner: Arc::clone(&inner), index })).collect();
        Self { inner, lanes }
    }

    /// Asks to make one call. Closed: always granted. Open: refused until the
    /// cool-down has elapsed, then the first caller turns the breaker half-open
    /// and becomes its first probe. Half-open: granted while fewer than
    /// `half_open_probes` probes are in flight; when all slots are taken and
    /// none was handed out for `probe_timeout`, granted as the first probe of a
    /// fresh half-open period.
    ///
    /// # Errors
    ///
    /// [`BreakerOpen`] with how long to wait when the call may not go through.
    pub fn try_acquire(&self) -> Result<BreakerPermit, BreakerOpen> {
        let current = self.inner.state.load(Ordering::SeqCst);
        let word = Word::unpack(current);
        if word.phase == Phase::Closed {
            // The hot path: one load of the shared state, no clock, and the
            // only write is to this thread's lane.
            return Ok(self.permit(word.generation, Role::Closed));
        }
        self.acquire_contended(current)
    }

    /// [`Self::try_acquire`] off the closed path: open or half-open, or
    /// closed again by the time a compare-exchange fails.
    #[cold]
    fn acquire_contended(&self, mut current: u64) -> Result<BreakerPermit, BreakerOpen> {
        let inner = &*self.inner;
        let elapsed = inner.elapsed();
        loop {
            let word = Word::unpack(current);
            let next = match word.phase {
                Phase::Closed => return Ok(self.permit(word.generation, Role::Closed)),
                Phase::Open { until_ms } => {
                    let retry_in = Inner::remaining(until_ms, elapsed);
                    if !retry_in.is_zero() {
                        return Err(BreakerOpen { retry_in, half_open: false });
                    }
                    word.advance(Phase::HalfOpen { in_flight: 1, successes: 0 })
                }
                Phase::HalfOpen { in_flight, successes } => {
                    if in_flight < inner.settings.half_open_probes {
                        let phase = Phase::HalfOpen { in_flight: in_flight + 1, successes };
                        Word { phase, ..word }
                    } else {
                        let retry_in = inner.until_probes_lost(word.generation, elapsed);
                        if !retry_in.is_zero() {
                            return Err(BreakerOpen { retry_in, half_open: true });
                        }
                        word.advance(Phase::HalfOpen { in_flight: 1, successes: 0 })
                    }
                }
            };
            // Only one caller wins the move out of Open (or out of a half-open
            // period whose probes are lost), and probe slots are handed out one
            // CAS at a time, so the probe limit is exact.
            match inner.state.compare_exchange(current, next.pack(), Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    inner.probe_granted(next.generation, elapsed);
                    return Ok(self.permit(next.generation, Role::Probe));
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// How much of its cool-down an open breaker has left, without asking
    /// for a permit: `None` when it is closed, half-open, or its cool-down is
    /// over (the next caller becomes a probe). A retry planned now that waits
    /// less than this would only wait to be refused.
    pub(crate) fn open_for(&self) -> Option<Duration> {
        match Word::unpack(self.inner.state.load(Ordering::SeqCst)).phase {
            Phase::Open { until_ms } => {
                let left = Inner::remaining(until_ms, self.inner.elapsed());
                (!left.is_zero()).then_some(left)
            }
            Phase::Closed | Phase::HalfOpen { .. } => None,
        }
    }

    /// The current state. See [`BreakerState`] for why an expired cool-down
    /// still reads as `Open`.
    #[must_use]
    pub fn state(&self) -> BreakerState {
        match Word::unpack(self.inner.state.load(Ordering::SeqCst)).phase {
            Phase::Closed => BreakerState::Closed,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
            Phase::Open { .. } => BreakerState::Open,
        }
    }

    fn permit(&self, generation: u32, role: Role) -> BreakerPermit {
        // The lane count is a power of two.
        let lane = &self.lanes[lane_hint() & (self.lanes.len() - 1)];
        BreakerPermit { lane: Arc::clone(lane), generation, role, settled: false }
    }
}

impl Inner {
    /// Time since the breaker was built.
    fn elapsed(&self) -> Duration {
        self.time.elapsed()
    }

    /// The current slot of `window`, from the clock's coarse reading.
    fn epoch(&self, window: &SlottedWindow<2>) -> u64 {
        window.epoch(self.time.coarse_nanos())
    }

    /// When a cool-down starting now ends, in (wrapped) whole milliseconds,
    /// rounded up so the breaker never reopens early.
    fn cool_down_end(&self, elapsed: Duration) -> u64 {
        let end_nanos = (elapsed + self.settings.cool_down).as_nanos();
        let millis = end_nanos.div_ceil(1_000_000);
        // Truncation to the payload is intended: the end is compared wrapping.
        (millis as u64) & PAYLOAD_MASK
    }

    /// Notes that a probe slot of half-open period `generation` was handed out
    /// at `elapsed`. A slower thread's older note never overwrites a newer one,
    /// so the note of the current period cannot be lost to a straggler.
    fn probe_granted(&self, generation: u32, elapsed: Duration) {
        let note = LastProbe { generation, at_ms: millis(elapsed) };
        let _ = self.last_probe.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |word| {
            note.is_after(LastProbe::unpack(word)).then(|| note.pack())
        });
    }

    /// How long until the probes of half-open period `generation` are
    /// presumed lost, `probe_timeout` after the last of them was handed out;
    /// zero once they are. While the period's own note is not written yet (its
    /// first probe was granted an instant ago), the whole timeout.
    fn until_probes_lost(&self, generation: u32, elapsed: Duration) -> Duration {
        let timeout = self.settings.probe_timeout;
        let note = LastProbe::unpack(self.last_probe.load(Ordering::SeqCst));
        if note.generation != generation {
            return timeout;
        }
        let since = millis(elapsed).wrapping_sub(note.at_ms) & PAYLOAD_MASK;
        // A difference in the upper half of the 40-bit range is negative: a
        // thread with an older reading of the clock.
        if since >= 1 << (PAYLOAD_BITS - 1) {
            return timeout;
        }
        timeout.saturating_sub(Duration::from_millis(since))
    }

    /// Time left until `until_ms`, zero if it has passed.
    fn remaining(until_ms: u64, elapsed: Duration) -> Duration {
        let now_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        let ahead = until_ms.wrapping_sub(now_ms) & PAYLOAD_MASK;
        // A difference in the upper half of the 40-bit range is negative.
        if ahead >= 1 << (PAYLOAD_BITS - 1) {
            return Duration::ZERO;
        }
        Duration::from_millis(now_ms + ahead).saturating_sub(elapsed)
    }

    /// Applies `change` to the state word until it sticks; `None` from
    /// `change` leaves the state alone. Returns the new word if it changed.
    fn update(&self, change: impl Fn(Word) -> Option<Word>) -> Option<Word> {
        let mut current = self.state.load(Ordering::SeqCst);
        loop {
            let next = change(Word::unpack(current))?;
            match self.state.compare_exchange(current, next.pack(), Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Some(next),
                Err(actual) => current = actual,
            }
        }
    }

    fn is_closed_in(&self, generation: u32) -> bool {
        Word::unpack(self.state.load(Ordering::SeqCst)) == Word { generation, phase: Phase::Closed }
    }

    /// Records a closed-phase outcome and opens the breaker if it tips the
    /// window over. Outcomes of calls that began before the last phase change
    /// are dropped: they describe a dependency state that has been judged.
    fn record(&self, lane: usize, generation: u32, success: bool) {
        if !self.is_closed_in(generation) {
            return;
        }
        let window = &self.windows[lane];
        let epoch = self.epoch(window);
        window.add(epoch, if success { SUCCESSES } else { FAILURES }, 1);
        if success {
            // Only a failure can raise the failure ratio.
            return;
        }
        // Two failures in different lanes, or on either side of a slot
        // boundary, land in different words; the fence guarantees that at
        // least one of the two threads sees both when it judges the window, so
        // the opening cannot be lost.
        fence(Ordering::SeqCst);
        if self.should_trip(epoch) {
            // Tripping is rare: the cool-down is timed on the precise reading.
            let open = Phase::Open { until_ms: self.cool_down_end(self.elapsed()) };
            self.update(|w| (w == Word { generation, phase: Phase::Closed }).then(|| w.advance(open)));
        }
    }

    fn should_trip(&self, epoch: u64) -> bool {
        let (successes, failures) = self.windows.iter().fold((0, 0), |(s, f), window| {
            let [successes, failures] = window.totals(epoch);
            (s + successes, f + failures)
        });
        let calls = successes + failures;
        calls >= u64::from(self.settings.min_calls)
            && failures as f64 >= self.settings.failure_ratio * calls as f64
    }

    /// Settles a half-open probe: `None` means it was cancelled.
    fn settle_probe(&self, generation: u32, outcome: Option<bool>) {
        let elapsed = self.elapsed();
        let needed = self.settings.half_open_probes;
        let settled = self.update(|w| {
            let Phase::HalfOpen { in_flight, successes } = w.phase else {
                return None;
            };
            if w.generation != generation {
                return None;
            }
            let in_flight = in_flight.saturating_sub(1);
            Some(match outcome {
                None => Word { phase: Phase::HalfOpen { in_flight, successes }, ..w },
                Some(false) => w.advance(Phase::Open { until_ms: self.cool_down_end(elapsed) }),
                Some(true) if successes + 1 >= needed => w.advance(Phase::Closed),
                Some(true) => Word { phase: Phase::HalfOpen { in_flight, successes: successes + 1 }, ..w },
            })
        });
        // The window is emptied on closing rather than on opening: that also
        // discards any outcome that raced with the opening.
        if settled.is_some_and(|w| w.phase == Phase::Closed) {
            self.windows.iter().for_each(|window| window.clear());
        }
    }
}

impl Default for CircuitBreaker {
    /// A breaker with the defaults (failure ratio 0.5 over at least 20 calls in
    /// 10 s, 5 s cool-down, 3 probes presumed lost after 30 s) on tokio's clock.
    fn default() -> Self {
        Self::assemble(Settings::default(), GuardClock::default())
    }
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("state", &self.state())
            .field("settings", &self.inner.settings)
            .finish()
    }
}
