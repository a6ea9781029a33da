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

use crate::sync::{AtomicU64, CachePadded, Ordering, fence, lane_count, lane_hint};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::budget::{MAX_WINDOW, MIN_WINDOW};
use crate::clock::{Clock, GuardClock, Timeline};
use crate::window::SlottedWindow;

/// The longest cool-down a [`CircuitBreaker`] accepts.
pub const MAX_COOL_DOWN: Duration = Duration::from_secs(86_400);
/// The most half-open probes a [`CircuitBreaker`] accepts.
pub const MAX_HALF_OPEN_PROBES: u32 = 65_535;
/// The shortest probe timeout a [`CircuitBreaker`] accepts.
pub const MIN_PROBE_TIMEOUT: Duration = Duration::from_millis(1);
/// The longest probe timeout a [`CircuitBreaker`] accepts.
pub const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(86_400);
/// How long the probes of a full half-open breaker may go without handing out a
/// slot before they are presumed lost, unless configured otherwise.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Counter indices inside the breaker's window.
const SUCCESSES: usize = 0;
const FAILURES: usize = 1;

// ---------------------------------------------------------------------------
// Public state and errors
// ---------------------------------------------------------------------------

/// Where the breaker is in its cycle.
///
/// An open breaker whose cool-down has elapsed still reports `Open` until the
/// next [`CircuitBreaker::try_acquire`] moves it to `HalfOpen`: the state is a
/// record of what the breaker has decided, not a prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls go through; outcomes are recorded.
    Closed,
    /// A bounded number of probe calls test whether the dependency recovered.
    HalfOpen,
    /// Calls are refused until the cool-down ends.
    Open,
}

impl BreakerState {
    /// The value of the `retryscope.breaker.state` gauge: 0 closed, 1 half-open,
    /// 2 open.
    #[must_use]
    pub fn as_gauge(self) -> i64 {
        match self {
            Self::Closed => 0,
            Self::HalfOpen => 1,
            Self::Open => 2,
        }
    }

    /// A stable lowercase name: `closed`, `half-open` or `open`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::HalfOpen => "half-open",
            Self::Open => "open",
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call refused because the breaker is open, or half-open with every probe
/// slot taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BreakerOpen {
    /// How long until the breaker will admit a probe at the latest: the rest
    /// of the cool-down when open; when half-open with every probe slot taken,
    /// the time until those probes are presumed lost (a slot may free up
    /// sooner, when a probe reports back).
    pub retry_in: Duration,
    half_open: bool,
}

impl fmt::Display for BreakerOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.half_open {
            write!(
                f,
                "circuit breaker is half-open and all probe slots are taken; next probe in {:?} at the latest",
                self.retry_in
            )
        } else {
            write!(f, "circuit breaker is open; next probe in {:?}", self.retry_in)
        }
    }
}

impl std::error::Error for BreakerOpen {}

/// A setting the breaker builder refused.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum BreakerError {
    /// `failure_ratio` must be a number in `(0, 1]`.
    FailureRatio(f64),
    /// `min_calls` must be at least 1.
    MinCalls(u32),
    /// `window` must be within [`MIN_WINDOW`]`..=`[`MAX_WINDOW`].
    Window(Duration),
    /// `cool_down` must be positive and at most [`MAX_COOL_DOWN`].
    CoolDown(Duration),
    /// `half_open_probes` must be within `1..=`[`MAX_HALF_OPEN_PROBES`].
    HalfOpenProbes(u32),
    /// `probe_timeout` must be within
    /// [`MIN_PROBE_TIMEOUT`]`..=`[`MAX_PROBE_TIMEOUT`].
    ProbeTimeout(Duration),
}

impl fmt::Display for BreakerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FailureRatio(v) => {
                write!(f, "circuit breaker failure_ratio must be within (0, 1], got {v}")
            }
            Self::MinCalls(v) => write!(f, "circuit breaker min_calls must be at least 1, got {v}"),
            Self::Window(v) => {
                write!(f, "circuit breaker window must be within {MIN_WINDOW:?}..={MAX_WINDOW:?}, got {v:?}")
            }
            Self::CoolDown(v) => {
                write!(f, "circuit breaker cool_down must be within (0s, {MAX_COOL_DOWN:?}], got {v:?}")
            }
            Self::HalfOpenProbes(v) => write!(
                f,
                "circuit breaker half_open_probes must be within 1..={MAX_HALF_OPEN_PROBES}, got {v}"
            ),
            Self::ProbeTimeout(v) => write!(
                f,
                "circuit breaker probe_timeout must be within {MIN_PROBE_TIMEOUT:?}..={MAX_PROBE_TIMEOUT:?}, got {v:?}"
            ),
        }
    }
}

impl std::error::Error for BreakerError {}

// ---------------------------------------------------------------------------
// The packed state word
// ---------------------------------------------------------------------------

/// Layout of the state word, high to low: 2 bits phase, 22 bits generation,
/// 40 bits payload. Open: the cool-down's end in milliseconds since the
/// breaker's origin (wrapping; compared as a signed difference, sound for 17
/// years of idleness). Half-open: 20 bits probes in flight, 20 bits successes.
const PAYLOAD_BITS: u32 = 40;
const PAYLOAD_MASK: u64 = (1 << PAYLOAD_BITS) - 1;
const GENERATION_BITS: u32 = 22;
const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;
const COUNT_BITS: u32 = 20;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Closed,
    HalfOpen { in_flight: u32, successes: u32 },
    Open { until_ms: u64 },
}

/// The unpacked state word. The generation changes on every phase change, so
/// a permit can tell whether the phase it was issued in is still current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Word {
    generation: u32,
    phase: Phase,
}

impl Word {
    fn pack(self) -> u64 {
        let (tag, payload) = match self.phase {
            Phase::Closed => (0, 0),
            Phase::HalfOpen { in_flight, successes } => {
                (1, (u64::from(in_flight) << COUNT_BITS) | u64::from(successes))
            }
            Phase::Open { until_ms } => (2, until_ms & PAYLOAD_MASK),
        };
        let generation = u64::from(self.generation) & GENERATION_MASK;
        (tag << (GENERATION_BITS + PAYLOAD_BITS)) | (generation << PAYLOAD_BITS) | payload
    }

    fn unpack(word: u64) -> Self {
        let payload = word & PAYLOAD_MASK;
        // Masked to 22 and 20 bits, so the casts cannot truncate.
        let generation = ((word >> PAYLOAD_BITS) & GENERATION_MASK) as u32;
        let phase = match word >> (GENERATION_BITS + PAYLOAD_BITS) {
            0 => Phase::Closed,
            1 => Phase::HalfOpen {
                in_flight: ((payload >> COUNT_BITS) & COUNT_MASK) as u32,
                successes: (payload & COUNT_MASK) as u32,
            },
            _ => Phase::Open { until_ms: payload },
        };
        Self { generation, phase }
    }

    /// The same phase's successor: a new phase and a new generation.
    fn advance(self, phase: Phase) -> Self {
        let generation = (self.generation + 1) & (GENERATION_MASK as u32);
        Self { generation, phase }
    }
}

/// Whole milliseconds in `elapsed`, wrapped to the 40-bit payload.
fn millis(elapsed: Duration) -> u64 {
    // Truncation is intended: times are compared wrapping.
    (elapsed.as_millis() as u64) & PAYLOAD_MASK
}

/// The contents of [`Inner::last_probe`]: 22 bits generation, 40 bits time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LastProbe {
    generation: u32,
    at_ms: u64,
}

impl LastProbe {
    fn pack(self) -> u64 {
        ((u64::from(self.generation) & GENERATION_MASK) << PAYLOAD_BITS) | (self.at_ms & PAYLOAD_MASK)
    }

    fn unpack(word: u64) -> Self {
        // Masked to 22 bits, so the cast cannot truncate.
        Self { generation: ((word >> PAYLOAD_BITS) & GENERATION_MASK) as u32, at_ms: word & PAYLOAD_MASK }
    }

    /// Whether this note is newer than `other`: a later generation, or the
    /// same one at a later time (both compared wrapping, in their upper half
    /// meaning "behind").
    fn is_after(self, other: Self) -> bool {
        let generations = self.generation.wrapping_sub(other.generation) & (GENERATION_MASK as u32);
        if generations != 0 {
            return generations < 1 << (GENERATION_BITS - 1);
        }
        let ahead = self.at_ms.wrapping_sub(other.at_ms) & PAYLOAD_MASK;
        ahead != 0 && ahead < 1 << (PAYLOAD_BITS - 1)
    }
}

// ---------------------------------------------------------------------------
// The breaker
// ---------------------------------------------------------------------------

/// A circuit breaker shared by every caller of one dependency.
///
/// Call [`try_acquire`](Self::try_acquire) before every attempt and report the
/// attempt's outcome through the returned [`BreakerPermit`]. Clones share one
/// breaker. See the [module docs](self) for the state machine.
///
/// # Example
///
/// ```
/// use retryscope::breaker::{BreakerState, CircuitBreaker};
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
    fn validate(self) -> Result<Self, BreakerError> {
        // Written so that NaN fails too.
        if !(self.failure_ratio > 0.0 && self.failure_ratio <= 1.0) {
            return Err(BreakerError::FailureRatio(self.failure_ratio));
        }
        if self.min_calls == 0 {
            return Err(BreakerError::MinCalls(self.min_calls));
        }
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&self.window) {
            return Err(BreakerError::Window(self.window));
        }
        if self.cool_down.is_zero() || self.cool_down > MAX_COOL_DOWN {
            return Err(BreakerError::CoolDown(self.cool_down));
        }
        if !(1..=MAX_HALF_OPEN_PROBES).contains(&self.half_open_probes) {
            return Err(BreakerError::HalfOpenProbes(self.half_open_probes));
        }
        if !(MIN_PROBE_TIMEOUT..=MAX_PROBE_TIMEOUT).contains(&self.probe_timeout) {
            return Err(BreakerError::ProbeTimeout(self.probe_timeout));
        }
        Ok(self)
    }
}

impl CircuitBreaker {
    /// A breaker with the defaults (failure ratio 0.5 over at least 20 calls in
    /// 10 s, 5 s cool-down, 3 probes presumed lost after 30 s) on tokio's clock.
    #[must_use]
    pub fn new() -> Self {
        Self::assemble(Settings::default(), GuardClock::default())
    }

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
    fn default() -> Self {
        Self::new()
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

// ---------------------------------------------------------------------------
// Permits
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Issued while closed: its outcome feeds the window.
    Closed,
    /// Issued while half-open: holds one of the probe slots.
    Probe,
}

/// Permission to make one call, from [`CircuitBreaker::try_acquire`].
///
/// Report how the call went with [`success`](Self::success) or
/// [`failure`](Self::failure). Dropping the permit without either means the
/// call was cancelled: a probe slot it held is freed and nothing is recorded.
/// The permit owns a handle to the breaker, so it can be kept across `.await`s
/// and moved between threads.
#[must_use = "report the call's outcome with `success()` or `failure()`"]
pub struct BreakerPermit {
    lane: Arc<Lane>,
    generation: u32,
    role: Role,
    settled: bool,
}

impl BreakerPermit {
    /// The call succeeded.
    pub fn success(mut self) {
        self.settle(Some(true));
    }

    /// The call failed in a way that says something about the dependency's
    /// health.
    pub fn failure(mut self) {
        self.settle(Some(false));
    }

    fn settle(&mut self, outcome: Option<bool>) {
        self.settled = true;
        let inner = &self.lane.inner;
        match (self.role, outcome) {
            (Role::Closed, Some(success)) => inner.record(self.lane.index, self.generation, success),
            (Role::Closed, None) => {}
            (Role::Probe, outcome) => inner.settle_probe(self.generation, outcome),
        }
    }
}

impl Drop for BreakerPermit {
    fn drop(&mut self) {
        if !self.settled {
            self.settle(None);
        }
    }
}

impl fmt::Debug for BreakerPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerPermit")
            .field("probe", &(self.role == Role::Probe))
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------
// Builder
// ---------------------------------------------------------------------------

/// Builds a [`CircuitBreaker`]; see [`CircuitBreaker::builder`].
#[derive(Clone, Default)]
pub struct CircuitBreakerBuilder {
    settings: Settings,
    clock: Option<GuardClock>,
}

impl CircuitBreakerBuilder {
    /// Share of failed calls in the window that opens the breaker, in `(0, 1]`
    /// (default 0.5).
    #[must_use]
    pub fn failure_ratio(mut self, ratio: f64) -> Self {
        self.settings.failure_ratio = ratio;
        self
    }

    /// Calls the window must hold before the ratio is judged, at least 1
    /// (default 20).
    #[must_use]
    pub fn min_calls(mut self, min_calls: u32) -> Self {
        self.settings.min_calls = min_calls;
        self
    }

    /// Length of the sliding window, within [`MIN_WINDOW`]`..=`[`MAX_WINDOW`]
    /// (default 10 s). Outcomes expire between 0.9 and 1 window after they
    /// were recorded.
    #[must_use]
    pub fn window(mut self, window: Duration) -> Self {
        self.settings.window = window;
        self
    }

    /// How long the breaker stays open before probing, positive and at most
    /// [`MAX_COOL_DOWN`] (default 5 s). Kept with millisecond resolution,
    /// rounded up.
    #[must_use]
    pub fn cool_down(mut self, cool_down: Duration) -> Self {
        self.settings.cool_down = cool_down;
        self
    }

    /// Probes allowed in flight while half-open, and successes needed to close,
    /// within `1..=`[`MAX_HALF_OPEN_PROBES`] (default 3).
    #[must_use]
    pub fn half_open_probes(mut self, probes: u32) -> Self {
        self.settings.half_open_probes = probes;
        self
    }

    /// How long a half-open breaker whose probe slots are all taken waits for
    /// one of them to report back, within
    /// [`MIN_PROBE_TIMEOUT`]`..=`[`MAX_PROBE_TIMEOUT`] (default
    /// [`DEFAULT_PROBE_TIMEOUT`], 30 s). After that long without a new probe,
    /// the probes in flight are presumed lost (a hung call, a call without a
    /// deadline): the next caller starts a fresh half-open period as its first
    /// probe, and the lost probes' outcomes no longer count.
    ///
    /// Set it above the longest a healthy call may take (the policy's
    /// per-attempt timeout, say): a probe still running when it expires is
    /// wasted. Kept with millisecond resolution, rounded down.
    #[must_use]
    pub fn probe_timeout(mut self, timeout: Duration) -> Self {
        self.settings.probe_timeout = timeout;
        self
    }

    /// The clock to read time from (default: tokio's, `TokioClock`, with the `tokio` feature; else the system's).
    #[must_use]
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Some(GuardClock::new(clock));
        self
    }

    /// Validates the settings and builds the breaker.
    ///
    /// # Errors
    ///
    /// [`BreakerError`] naming the first setting out of range.
    pub fn build(self) -> Result<CircuitBreaker, BreakerError> {
        let settings = self.settings.validate()?;
        Ok(CircuitBreaker::assemble(settings, self.clock.unwrap_or_default()))
    }
}

impl fmt::Debug for CircuitBreakerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerBuilder")
            .field("settings", &self.settings)
            .field("custom_clock", &self.clock.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::sync::Barrier;
    use std::sync::atomic::AtomicUsize;

    const COOL_DOWN: Duration = Duration::from_secs(5);

    fn breaker(clock: &ManualClock) -> CircuitBreaker {
        CircuitBreaker::builder().clock(clock.clone()).build().expect("defaults are valid")
    }

    fn call(b: &CircuitBreaker, success: bool) {
        let permit = b.try_acquire().expect("breaker should admit the call");
        if success { permit.success() } else { permit.failure() }
    }

    fn calls(b: &CircuitBreaker, n: usize, success: bool) {
        (0..n).for_each(|_| call(b, success));
    }

    /// A default breaker driven open by 20 failures.
    fn opened(clock: &ManualClock) -> CircuitBreaker {
        let b = breaker(clock);
        calls(&b, 20, false);
        assert_eq!(b.state(), BreakerState::Open);
        b
    }

    /// A default breaker that is half-open, holding its first probe.
    fn half_open(clock: &ManualClock) -> (CircuitBreaker, BreakerPermit) {
        let b = opened(clock);
        clock.advance(COOL_DOWN);
        let probe = b.try_acquire().expect("cool-down elapsed");
        assert_eq!(b.state(), BreakerState::HalfOpen);
        (b, probe)
    }

    #[test]
    fn stays_closed_below_min_calls_even_at_full_failure() {
        let clock = ManualClock::new();
        let b = breaker(&clock);
        calls(&b, 19, false);
        assert_eq!(b.state(), BreakerState::Closed);
        call(&b, false);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn opens_exactly_at_the_ratio() {
        let clock = ManualClock::new();
        let b = breaker(&clock);
        calls(&b, 11, true);
        calls(&b, 9, false);
        // 9 / 20 and then 10 / 21 are below 0.5.
        assert_eq!(b.state(), BreakerState::Closed);
        call(&b, false);
        assert_eq!(b.state(), BreakerState::Closed);
        // 11 / 22 reaches it.
        call(&b, false);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn rejects_while_open_with_the_time_left() {
        let clock = ManualClock::new();
        let b = opened(&clock);
        assert_eq!(b.try_acquire().expect_err("open").retry_in, COOL_DOWN);
        clock.advance(Duration::from_millis(2_250));
        let refused = b.try_acquire().expect_err("open");
        assert_eq!(refused.retry_in, Duration::from_millis(2_750));
        assert!(refused.to_string().contains("open"), "{refused}");
        clock.advance(Duration::from_millis(2_749));
        assert_eq!(b.try_acquire().expect_err("open").retry_in, Duration::from_millis(1));
        // Still reported open until someone asks after the cool-down.
        clock.advance(Duration::from_millis(1));
        assert_eq!(b.state(), BreakerState::Open);
        let _probe = b.try_acquire().expect("cool-down elapsed");
        assert_eq!(b.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn half_open_admits_exactly_the_probe_count() {
        let clock = ManualClock::new();
        let (b, first) = half_open(&clock);
        let second = b.try_acquire().expect("probe 2");
        let third = b.try_acquire().expect("probe 3");
        let refused = b.try_acquire().expect_err("probe slots full");
        assert_eq!(refused.retry_in, DEFAULT_PROBE_TIMEOUT);
        assert!(refused.to_string().contains("half-open"), "{refused}");
        drop((first, second, third));
    }

    #[test]
    fn successful_probes_close_with_a_fresh_window() {
        let clock = ManualClock::new();
        let (b, first) = half_open(&clock);
        first.success();
        call(&b, true);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        call(&b, true);
        assert_eq!(b.state(), BreakerState::Closed);
        // The 20 failures that opened it are gone: 19 more do not reopen it.
        calls(&b, 19, false);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn a_failed_probe_reopens_with_a_fresh_cool_down() {
        let clock = ManualClock::new();
        let (b, first) = half_open(&clock);
        let second = b.try_acquire().expect("probe 2");
        clock.advance(Duration::from_secs(1));
        first.success();
        second.failure();
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.try_acquire().expect_err("open").retry_in, COOL_DOWN);
    }

    #[test]
    fn a_dropped_probe_frees_its_slot_and_records_nothing() {
        let clock = ManualClock::new();
        let (b, first) = half_open(&clock);
        let second = b.try_acquire().expect("probe 2");
        let third = b.try_acquire().expect("probe 3");
        drop(second);
        let fourth = b.try_acquire().expect("the dropped probe's slot");
        assert!(b.try_acquire().is_err());
        // Three successes are still needed: the dropped one did not count.
        first.success();
        third.success();
        assert_eq!(b.state(), BreakerState::HalfOpen);
        fourth.success();
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn lost_probes_are_replaced_after_the_probe_timeout() {
        let clock = ManualClock::new();
        let (b, first) = half_open(&clock);
        clock.advance(Duration::from_secs(10));
        let second = b.try_acquire().expect("probe 2");
        let third = b.try_acquire().expect("probe 3");
        // Every slot is held by a call that never reports back. Until the
        // youngest of them is probe_timeout old, callers are turned away.
        clock.advance(Duration::from_secs(12));
        let refused = b.try_acquire().expect_err("slots full");
        assert_eq!(refused.retry_in, DEFAULT_PROBE_TIMEOUT - Duration::from_secs(12));
        clock.advance(DEFAULT_PROBE_TIMEOUT - Duration::from_secs(12) - Duration::from_millis(1));
        assert_eq!(b.try_acquire().expect_err("slots full").retry_in, Duration::from_millis(1));
        clock.advance(Duration::from_millis(1));
        let fresh = b.try_acquire().expect("the lost probes are replaced");
        assert_eq!(b.state(), BreakerState::HalfOpen);
        // One slot of a fresh period: two more probes, then full again.
        let fresh_2 = b.try_acquire().expect("fresh probe 2");
        let fresh_3 = b.try_acquire().expect("fresh probe 3");
        assert!(b.try_acquire().is_err());
        // The lost probes finally answer: their period is over, so neither a
        // failure nor successes change anything.
        first.failure();
        second.success();
        third.success();
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert!(b.try_acquire().is_err(), "stale outcomes freed no slot");
        [fresh, fresh_2, fresh_3].into_iter().for_each(BreakerPermit::success);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn a_failed_replacement_probe_reopens() {
        let clock = ManualClock::new();
        let b = CircuitBreaker::builder()
            .min_calls(1)
            .half_open_probes(1)
            .probe_timeout(Duration::from_secs(2))
            .clock(clock.clone())
            .build()
            .expect("valid");
        call(&b, false);
        clock.advance(COOL_DOWN);
        let _hung = b.try_acquire().expect("probe");
        clock.advance(Duration::from_millis(1_999));
        assert!(b.try_acquire().is_err());
        clock.advance(Duration::from_millis(1));
        b.try_acquire().expect("replacement probe").failure();
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.try_acquire().expect_err("open").retry_in, COOL_DOWN);
    }

    #[test]
    fn a_straggling_note_never_hides_a_newer_period() {
        let clock = ManualClock::new();
        let b = CircuitBreaker::builder().clock(clock.clone()).build().expect("valid");
        let inner = &b.inner;
        inner.probe_granted(7, Duration::from_secs(3));
        // An older generation, or the same one at an earlier time, is ignored.
        inner.probe_granted(6, Duration::from_secs(9));
        inner.probe_granted(7, Duration::from_secs(2));
        assert_eq!(
            LastProbe::unpack(inner.last_probe.load(Ordering::SeqCst)),
            LastProbe { generation: 7, at_ms: 3_000 }
        );
        let timeout = DEFAULT_PROBE_TIMEOUT;
        assert_eq!(inner.until_probes_lost(6, Duration::from_secs(100)), timeout, "another period's note");
        assert_eq!(inner.until_probes_lost(7, Duration::from_secs(32)), Duration::from_secs(1));
        assert_eq!(inner.until_probes_lost(7, Duration::from_secs(33)), Duration::ZERO);
        assert_eq!(
            inner.until_probes_lost(7, Duration::from_secs(2)),
            timeout,
            "an older reading of the clock"
        );
        // Generations wrap: 0 comes after the last one.
        let last = LastProbe { generation: GENERATION_MASK as u32, at_ms: 50_000 };
        let wrapped = LastProbe { generation: 0, at_ms: 1_000 };
        assert!(wrapped.is_after(last) && !last.is_after(wrapped));
    }

    #[test]
    fn outcomes_from_an_earlier_phase_are_ignored() {
        let clock = ManualClock::new();
        let b = breaker(&clock);
        let straggler = b.try_acquire().expect("closed");
        calls(&b, 20, false);
        // Finishes while open: not recorded, no state change.
        straggler.success();
        assert_eq!(b.state(), BreakerState::Open);
        clock.advance(COOL_DOWN);
        let old_probe = b.try_acquire().expect("probe");
        call(&b, false);
        clock.advance(COOL_DOWN);
        let _probe = b.try_acquire().expect("probe of the next half-open period");
        // A probe from the previous half-open period neither counts as a
        // success nor frees a slot of this one.
        old_probe.success();
        let _second = b.try_acquire().expect("probe 2");
        let _third = b.try_acquire().expect("probe 3");
        assert!(b.try_acquire().is_err());
        assert_eq!(b.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn failures_older_than_the_window_do_not_count() {
        let clock = ManualClock::new();
        let b = breaker(&clock);
        calls(&b, 19, false);
        clock.advance(Duration::from_secs(10));
        calls(&b, 19, false);
        assert_eq!(b.state(), BreakerState::Closed);
        // Half a window later the 19 recent ones still count.
        clock.advance(Duration::from_secs(5));
        call(&b, false);
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn exactly_one_thread_opens_half_open_and_probes_are_capped() {
        let clock = ManualClock::new();
        let b = opened(&clock);
        clock.advance(COOL_DOWN);
        let barrier = Barrier::new(8);
        let permits: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        b.try_acquire().ok()
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().expect("no panic")).collect()
        });
        assert_eq!(permits.len(), 3);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        permits.into_iter().for_each(BreakerPermit::success);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn hammering_a_healthy_breaker_keeps_it_closed() {
        let clock = ManualClock::new();
        let b = breaker(&clock);
        let admitted = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for i in 0..10_000 {
                        if let Ok(permit) = b.try_acquire() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                            // 10 % failures, below the 50 % threshold.
                            if i % 10 == 0 { permit.failure() } else { permit.success() }
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), 40_000);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn hammering_a_failing_breaker_opens_it_once() {
        let clock = ManualClock::new();
        let b = breaker(&clock);
        let admitted = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        if let Ok(permit) = b.try_acquire() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                            permit.failure();
                        }
                    }
                });
            }
        });
        let admitted = admitted.load(Ordering::Relaxed);
        // min_calls went through, plus at most one record and one permit in
        // flight per thread racing the opening; with time frozen, every later
        // call was refused.
        assert!((20..=28).contains(&admitted), "{admitted}");
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(Word::unpack(b.inner.state.load(Ordering::SeqCst)).generation, 1);
    }

    #[test]
    fn builder_rejects_bad_settings() {
        let b = CircuitBreaker::builder;
        let cases = [
            (b().failure_ratio(f64::NAN).build().err(), "failure_ratio"),
            (b().failure_ratio(0.0).build().err(), "failure_ratio"),
            (b().failure_ratio(1.5).build().err(), "failure_ratio"),
            (b().min_calls(0).build().err(), "min_calls"),
            (b().window(Duration::ZERO).build().err(), "window"),
            (b().window(Duration::from_secs(7_200)).build().err(), "window"),
            (b().cool_down(Duration::ZERO).build().err(), "cool_down"),
            (b().cool_down(Duration::from_secs(86_401)).build().err(), "cool_down"),
            (b().half_open_probes(0).build().err(), "half_open_probes"),
            (b().half_open_probes(65_536).build().err(), "half_open_probes"),
            (b().probe_timeout(Duration::ZERO).build().err(), "probe_timeout"),
            (b().probe_timeout(Duration::from_secs(86_401)).build().err(), "probe_timeout"),
        ];
        for (err, name) in cases {
            let err = err.unwrap_or_else(|| panic!("{name} must be rejected"));
            assert!(err.to_string().contains(name), "{err}");
        }
        assert!(b().failure_ratio(1.0).min_calls(1).half_open_probes(65_535).build().is_ok());
    }

    #[test]
    fn state_names_and_gauge_values() {
        let all = [BreakerState::Closed, BreakerState::HalfOpen, BreakerState::Open];
        assert_eq!(all.map(BreakerState::as_gauge), [0, 1, 2]);
        assert_eq!(all.map(BreakerState::as_str), ["closed", "half-open", "open"]);
        assert_eq!(BreakerState::HalfOpen.to_string(), "half-open");
    }

    #[test]
    fn state_word_round_trips() {
        let words = [
            Word { generation: 0, phase: Phase::Closed },
            Word { generation: (1 << 22) - 1, phase: Phase::HalfOpen { in_flight: 65_535, successes: 7 } },
            Word { generation: 5, phase: Phase::Open { until_ms: PAYLOAD_MASK } },
        ];
        for w in words {
            assert_eq!(Word::unpack(w.pack()), w);
        }
        let last = Word { generation: (1 << 22) - 1, phase: Phase::Closed };
        assert_eq!(last.advance(Phase::Closed).generation, 0);
    }
}
