//! Where "now" comes from.
//!
//! Budgets, breakers and deadlines all need the current time. Reading it through
//! [`Clock`] lets tests and simulations drive time by hand ([`ManualClock`]) while
//! production code follows tokio's clock (`TokioClock`, feature `tokio`), which in
//! turn honours `tokio::time::pause()`, or the system's ([`SystemClock`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A source of monotonic time.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// tokio's clock: real time normally, virtual time under `tokio::time::pause()`.
///
/// Outside a tokio runtime it reads the system's monotonic clock, so it is also a
/// sound default for blocking code.
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
}

/// The operating system's monotonic clock, ignoring tokio's paused time: for
/// blocking code.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}
