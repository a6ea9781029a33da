//! Where "now" comes from.
//!
//! Budgets, breakers and deadlines all need the current time. Reading it through
//! [`Clock`] lets tests and simulations drive time by hand ([`ManualClock`]) while
//! production code follows tokio's clock (`TokioClock`, feature `tokio`), which in
//! turn honours `tokio::time::pause()`, or the system's ([`SystemClock`]).
//!
//! Budgets and breakers read time on every call, so they read it through
//! [`Clock::now_coarse`]: a reading that may lag by a tick of the operating
//! system's clock (1–10 ms) and that, on Linux, costs a quarter of a precise
//! one. Their windows are divided into slots of at least 100 ms, so a tick
//! only moves *when* a slot turns, never how much a window holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A source of monotonic time.
///
/// Only [`now`](Self::now) is required. A clock that can tell the time more
/// cheaply at a coarser resolution also implements
/// [`now_coarse`](Self::now_coarse), which budgets and breakers read instead.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Instant;

    /// The current instant at the clock's cheapest resolution, for code that
    /// reads the time on every call but only needs it to the nearest few
    /// milliseconds: [`RetryBudget`](crate::RetryBudget) and
    /// [`CircuitBreaker`](crate::CircuitBreaker) read their windows with it.
    ///
    /// The readings must be monotonic among themselves, and stay within a few
    /// milliseconds of [`now`](Self::now) (either side). The default is
    /// [`now`](Self::now) itself, so a clock driven by hand, such as
    /// [`ManualClock`], stays exact.
    fn now_coarse(&self) -> Instant {
        self.now()
    }
}

/// tokio's clock: real time normally, virtual time under `tokio::time::pause()`.
///
/// Outside a tokio runtime it reads the system's monotonic clock, so it is also a
/// sound default for blocking code.
///
/// [`now_coarse`](Clock::now_coarse) is [`SystemClock`]'s coarse reading when
/// tokio is built without its `test-util` feature, the only one under which its
/// clock can be paused (then tokio's clock *is* the system's); with
/// `test-util` it is tokio's own reading, so that paused time still drives
/// budgets and breakers exactly.
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

#[cfg(not(feature = "tokio"))]
pub(crate) use SystemClock as DefaultClock;
/// The clock budgets and breakers read unless given one: tokio's with the
/// `tokio` feature (so `tokio::time::pause()` drives them), else the system's.
#[cfg(feature = "tokio")]
pub(crate) use TokioClock as DefaultClock;

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn now_coarse(&self) -> Instant {
        if tokio_pause::possible() { self.now() } else { SystemClock.now_coarse() }
    }
}

/// Whether tokio's clock can be paused at all in this build: only with tokio's
/// `test-util` feature, which also gives `runtime::Builder` its
/// `start_paused` method. Decided at compile time, by method resolution: an
/// inherent method wins over a trait method of the same name, so the stand-in
/// below is picked only when tokio's is missing, and its return type tells.
#[cfg(feature = "tokio")]
mod tokio_pause {
    use tokio::runtime::Builder;

    /// What the stand-in for `Builder::start_paused` returns.
    #[allow(dead_code, reason = "constructed only in builds without tokio's test-util")]
    pub(super) struct CannotPause;

    #[allow(dead_code, reason = "called only in builds without tokio's test-util")]
    trait StartPausedStandIn {
        fn start_paused(&mut self, _paused: bool) -> CannotPause {
            CannotPause
        }
    }

    impl StartPausedStandIn for Builder {}

    /// The verdict carried by `start_paused`'s return type.
    pub(super) trait Verdict {
        const CAN_PAUSE: bool;
    }

    impl Verdict for &mut Builder {
        const CAN_PAUSE: bool = true;
    }

    impl Verdict for CannotPause {
        const CAN_PAUSE: bool = false;
    }

    fn verdict<'a, T: Verdict>(_start_paused: fn(&'a mut Builder) -> T) -> bool {
        T::CAN_PAUSE
    }

    /// A constant once compiled: the closure is only named, never called.
    pub(super) fn possible() -> bool {
        #[allow(unused_imports, reason = "unused in builds with tokio's test-util")]
        use StartPausedStandIn as _;
        verdict(|builder: &mut Builder| builder.start_paused(true))
    }
}

/// A clock that only moves when told to: for tests and simulations.
///
/// Clones share the same time, so a test can keep one handle and give another to
/// a budget or a breaker.
///
/// ```
/// use retryscope::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let start = clock.now();
/// clock.advance(Duration::from_secs(3));
/// assert_eq!(clock.now() - start, Duration::from_secs(3));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    origin: Instant,
    offset_nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at an arbitrary fixed origin.
    pub fn new() -> Self {
        Self { origin: Instant::now(), offset_nanos: Arc::new(AtomicU64::new(0)) }
    }

    /// Moves time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.offset_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Time elapsed since the origin.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.offset_nanos.load(Ordering::Relaxed))
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.origin + self.elapsed()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Instant {
        (**self).now()
    }

    fn now_coarse(&self) -> Instant {
        (**self).now_coarse()
    }
}

/// The operating system's monotonic clock, ignoring tokio's paused time: for
/// blocking code.
///
/// On Linux and Android, [`now_coarse`](Clock::now_coarse) reads
/// `CLOCK_MONOTONIC_COARSE`: the same clock as [`Instant::now`] as of the
/// kernel's last tick (1–10 ms ago, `CONFIG_HZ`), read without asking the
/// hardware, for about a quarter of the cost. Elsewhere it is `now()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn now_coarse(&self) -> Instant {
        coarse::now()
    }
}

/// `CLOCK_MONOTONIC_COARSE` as an [`Instant`]: `Instant` has no constructor
/// from a raw reading, so readings are placed relative to one pair of
/// readings of both clocks taken together. Both count the same monotonic
/// time, so the placement is off by at most one tick, the same for every
/// reading: coarse instants are monotonic among themselves.
#[cfg(any(target_os = "linux", target_os = "android"))]
mod coarse {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    struct Anchor {
        instant: Instant,
        nanos: u64,
    }

    static ANCHOR: OnceLock<Anchor> = OnceLock::new();

    /// `CLOCK_MONOTONIC_COARSE` in nanoseconds.
    #[allow(unsafe_code, reason = "one FFI call; std has no coarse clock")]
    fn nanos() -> u64 {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `now` is a valid, writable timespec for the duration of the
        // call, and clock_gettime writes nothing else. The clock exists on
        // every Linux since 2.6.32; were it missing, the call would fail,
        // leave `now` at zero, and time would stand still for the guards
        // (never run backwards).
        let _ = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &raw mut now) };
        // A monotonic clock's reading is never negative.
        let secs = u64::try_from(now.tv_sec).unwrap_or(0);
        let subsec = u64::try_from(now.tv_nsec).unwrap_or(0);
        secs.saturating_mul(1_000_000_000).saturating_add(subsec)
    }

    pub(super) fn now() -> Instant {
        let anchor = ANCHOR.get_or_init(|| Anchor { nanos: nanos(), instant: Instant::now() });
        anchor.instant + Duration::from_nanos(nanos().saturating_sub(anchor.nanos))
    }

    /// The raw reading: what [`now`] places as an `Instant`.
    pub(super) fn raw() -> Option<u64> {
        Some(nanos())
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod coarse {
    pub(super) fn now() -> std::time::Instant {
        std::time::Instant::now()
    }

    /// No raw coarse clock here: readings go through `Instant`.
    pub(super) fn raw() -> Option<u64> {
        None
    }
}

/// The clock a budget or a breaker was given, and whether its coarse reading
/// is this crate's own OS coarse clock: then the guard's [`Timeline`] reads
/// that clock in nanoseconds directly, without placing each reading as an
/// `Instant` and subtracting another (which costs more than the reading).
#[derive(Clone)]
pub(crate) struct GuardClock {
    clock: Arc<dyn Clock>,
    raw_coarse: bool,
}

impl GuardClock {
    pub(crate) fn new<C: Clock + 'static>(clock: C) -> Self {
        use std::any::TypeId;
        let is = |other: TypeId| TypeId::of::<C>() == other;
        #[cfg(feature = "tokio")]
        let coarse_tokio = is(TypeId::of::<TokioClock>()) && !tokio_pause::possible();
        #[cfg(not(feature = "tokio"))]
        let coarse_tokio = false;
        let raw_coarse = (is(TypeId::of::<SystemClock>()) || coarse_tokio) && coarse::raw().is_some();
        Self { clock: Arc::new(clock), raw_coarse }
    }

    /// Starts the guard's timeline now.
    pub(crate) fn start(self) -> Timeline {
        let coarse_origin = match self.raw_coarse.then(coarse::raw).flatten() {
            Some(raw) => CoarseOrigin::Raw(raw),
            None => CoarseOrigin::Instant(self.clock.now_coarse()),
        };
        Timeline { origin: self.clock.now(), coarse_origin, clock: self.clock }
    }
}

impl Default for GuardClock {
    fn default() -> Self {
        Self::new(DefaultClock)
    }
}

/// Time as a budget or a breaker counts it: precise for the breaker's
/// cool-downs, coarse (see [`Clock::now_coarse`]) for the windows every call
/// writes, each from its own origin taken when the guard was built.
pub(crate) struct Timeline {
    clock: Arc<dyn Clock>,
    origin: Instant,
    coarse_origin: CoarseOrigin,
}

enum CoarseOrigin {
    /// A raw reading of the OS coarse clock, in nanoseconds.
    Raw(u64),
    /// A reading of [`Clock::now_coarse`].
    Instant(Instant),
}

impl Timeline {
    /// Time since the origin, on the clock's precise reading.
    pub(crate) fn elapsed(&self) -> Duration {
        self.clock.now().saturating_duration_since(self.origin)
    }

    /// Nanoseconds since the coarse origin, on the clock's coarse reading
    /// (zero if the clock reads earlier; saturates after 584 years).
    pub(crate) fn coarse_nanos(&self) -> u64 {
        match self.coarse_origin {
            CoarseOrigin::Raw(origin) => coarse::raw().unwrap_or(origin).saturating_sub(origin),
            CoarseOrigin::Instant(origin) => crate::window::nanos_since(origin, self.clock.now_coarse()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_system_clock_is_monotonic_and_close_to_the_precise_one() {
        let mut last = SystemClock.now_coarse();
        for _ in 0..10_000 {
            let (coarse, precise) = (SystemClock.now_coarse(), Instant::now());
            assert!(coarse >= last);
            // One tick either side (at most 10 ms), with room for a slow
            // machine descheduling this thread between the two reads.
            let apart = precise.max(coarse) - precise.min(coarse);
            assert!(apart < Duration::from_millis(50), "{apart:?}");
            last = coarse;
        }
    }

    #[test]
    fn a_timeline_on_the_system_clock_reads_raw_coarse_nanoseconds() {
        let clock = GuardClock::new(SystemClock);
        assert_eq!(clock.raw_coarse, cfg!(any(target_os = "linux", target_os = "android")));
        let time = clock.start();
        let start = Instant::now();
        let mut last = time.coarse_nanos();
        while start.elapsed() < Duration::from_millis(30) {
            let now = time.coarse_nanos();
            assert!(now >= last);
            last = now;
        }
        // Read once more after the loop: a thread descheduled for the whole 30 ms
        // before its first pass would otherwise keep the reading of the start.
        let end = time.coarse_nanos();
        assert!(end >= last);
        // 30 ms passed; the coarse reading saw them, give or take two ticks.
        assert!((10_000_000..1_000_000_000).contains(&end), "{end}");
    }

    #[test]
    fn a_timeline_on_a_manual_clock_is_exact() {
        let manual = ManualClock::new();
        let clock = GuardClock::new(manual.clone());
        assert!(!clock.raw_coarse);
        let time = clock.start();
        manual.advance(Duration::new(3, 7));
        assert_eq!((time.coarse_nanos(), time.elapsed()), (3_000_000_007, Duration::new(3, 7)));
    }

    /// This crate's tests build tokio with `test-util`, so its clock can be
    /// paused, and `TokioClock`'s coarse reading must follow the pause.
    #[cfg(feature = "tokio")]
    #[tokio::test(start_paused = true)]
    async fn tokio_clock_coarse_reading_follows_paused_time() {
        assert!(tokio_pause::possible());
        assert!(!GuardClock::new(TokioClock).raw_coarse);
        let start = TokioClock.now_coarse();
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert_eq!(TokioClock.now_coarse() - start, Duration::from_millis(1_500));
        assert_eq!(TokioClock.now_coarse(), TokioClock.now());
    }
}
