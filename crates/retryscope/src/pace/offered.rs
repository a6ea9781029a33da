//! The rate a dependency is offered calls at: what the pacer releases held
//! calls at after a gate, so that they come back no faster than they came.

use crate::clock::Clock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, TryLockError};
use std::time::{Duration, Instant};

/// The clock is read once every this many calls: counting a call is one
/// atomic add, and at the rates where a spike after a hold matters (tens of
/// calls a second and more) a sample still comes every fraction of a second.
const SAMPLE_EVERY: u64 = 8;

/// The time constant of the moving average: a change of rate shows within
/// about a second, and a burst of a few milliseconds does not pass for a rate.
const TAU: Duration = Duration::from_secs(1);

/// The shortest span a sample may cover: a herd of callers arriving in the
/// same few milliseconds is a burst, not a rate of thousands a second.
const MIN_SPAN: Duration = Duration::from_millis(100);

/// An exponentially weighted moving average of call starts per second.
#[derive(Debug, Default)]
pub(crate) struct OfferedRate {
    calls: AtomicU64,
    average: Mutex<Average>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Average {
    /// When the last sample was taken, and the count of calls then.
    last: Option<(Instant, u64)>,
    /// Calls per second, once two samples were taken.
    rate: Option<f64>,
}

impl OfferedRate {
    /// A call is about to be sent (or held): counted, and every
    /// [`SAMPLE_EVERY`] calls the average is moved on.
    #[inline]
    pub(crate) fn call(&self, clock: &dyn Clock) {
        let count = self.calls.fetch_add(1, Ordering::Relaxed);
        if count.is_multiple_of(SAMPLE_EVERY) {
            self.sample(clock.now_coarse(), count);
        }
    }

    #[cold]
    fn sample(&self, now: Instant, count: u64) {
        // Another caller is sampling: this sample adds nothing it will not.
        let mut average = match self.average.try_lock() {
            Ok(average) => average,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        *average = average.moved_on(now, count);
    }

    /// Calls per second offered until `now`, `None` before a first sample
    /// spanning [`SAMPLE_EVERY`] calls and [`MIN_SPAN`] (too few calls, or
    /// too short a time, to tell a rate).
    pub(crate) fn rate(&self, now: Instant) -> Option<f64> {
        let average = match self.average.lock() {
            Ok(average) => *average,
            Err(poisoned) => *poisoned.into_inner(),
        };
        average.rate?;
        // The calls since the last sample count too: a dependency that went
        // quiet a while ago is offered less than its average says.
        average.moved_on(now, self.calls.load(Ordering::Relaxed)).rate
    }
}

impl Average {
    /// The average after `count` calls in all at `now`.
    fn moved_on(self, now: Instant, count: u64) -> Self {
        let Some((at, before)) = self.last else {
            return Self { last: Some((now, count)), rate: None };
        };
        let elapsed = now.saturating_duration_since(at);
        // Calls in a burst (one instant of a paused clock, a herd) say
        // nothing of a rate until time passes: a later sample spans them.
        if elapsed < MIN_SPAN || count < before {
            return self;
        }
        let sample = (count - before) as f64 / elapsed.as_secs_f64();
        let weight = 1.0 - (-elapsed.as_secs_f64() / TAU.as_secs_f64()).exp();
        let rate = self.rate.map_or(sample, |rate| rate + weight * (sample - rate));
        Self { last: Some((now, count)), rate: Some(rate) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn a_steady_rate_is_measured_and_a_quiet_spell_lowers_it() {
        let clock = ManualClock::new();
        let offered = OfferedRate::default();
        assert_eq!(offered.rate(clock.now()), None);
        // 80 calls a second for 3 s.
        for _ in 0..240 {
            offered.call(&clock);
            clock.advance(Duration::from_micros(12_500));
        }
        let rate = offered.rate(clock.now()).expect("a rate");
        assert!((rate - 80.0).abs() < 1.0, "{rate}");
        // Then nothing for 2 s: the average falls towards zero.
        clock.advance(Duration::from_secs(2));
        let quiet = offered.rate(clock.now()).expect("a rate");
        assert!(quiet < 80.0 * 0.2, "{quiet}");
    }

    #[test]
    fn a_burst_or_a_single_call_is_no_rate() {
        let clock = ManualClock::new();
        let offered = OfferedRate::default();
        offered.call(&clock);
        clock.advance(Duration::from_millis(5));
        assert_eq!(offered.rate(clock.now()), None);
        // A herd of 100 in 10 ms.
        for _ in 0..100 {
            offered.call(&clock);
            clock.advance(Duration::from_micros(100));
        }
        assert_eq!(offered.rate(clock.now()), None);
        // The next sampled call (the 105th), a second on, spans them all.
        clock.advance(Duration::from_secs(1));
        for _ in 0..8 {
            offered.call(&clock);
        }
        let rate = offered.rate(clock.now()).expect("a rate");
        let expected = 104.0 / 1.015;
        assert!((rate - expected).abs() < 1e-6, "{rate}");
    }
}
