//! The recent-latency tracker behind a percentile hedging delay.
//!
//! Bounded memory whatever the traffic: one histogram of fixed log-linear
//! buckets (8 per power of two, so a bucket is at most 12.5 % wide) counts the
//! window being filled; when the window ends, the first call to look reads the
//! percentile out of it, keeps it as the delay in force, and clears it. That is
//! tower's rotating histogram with the read side reduced to its one answer.

use super::delay::PercentileDelay;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Buckets per power of two.
const SUB_BUCKETS: u32 = 8;
/// Latencies are counted in microseconds up to `2^MAX_EXPONENT` (about 18
/// minutes); longer ones land in the last bucket.
const MAX_EXPONENT: u32 = 30;
/// How many buckets the histogram has.
pub(crate) const BUCKETS: usize = ((MAX_EXPONENT - 2) * SUB_BUCKETS) as usize;

/// "No percentile yet": the fallback is in force.
const NO_DELAY: u64 = u64::MAX;

pub(crate) struct LatencyTracker {
    window: Duration,
    /// The window being filled.
    counts: [AtomicU32; BUCKETS],
    /// The delay the last complete window gave, in nanoseconds, or [`NO_DELAY`].
    delay: AtomicU64,
    /// When the first window started: the tracker's own time origin.
    epoch: OnceLock<Instant>,
    /// When the current window ends, in nanoseconds since `epoch`.
    window_ends: AtomicU64,
    /// Set by the one call that closes a window.
    rotating: AtomicBool,
}

impl LatencyTracker {
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            counts: std::array::from_fn(|_| AtomicU32::new(0)),
            delay: AtomicU64::new(NO_DELAY),
            epoch: OnceLock::new(),
            window_ends: AtomicU64::new(nanos(window)),
            rotating: AtomicBool::new(false),
        }
    }

    /// How long each window lasts.
    pub(crate) fn window(&self) -> Duration {
        self.window
    }

    /// Counts one successful copy's latency.
    pub(crate) fn record(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        // Saturating: a bucket that has counted four billion latencies in one
        // window stays where it is rather than wrapping to zero.
        let _ = self.counts[bucket(micros)]
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_add(1));
    }

    /// The delay in force at `now` under `settings`: the last complete
    /// window's percentile, clamped, or the fallback.
    pub(crate) fn delay(&self, settings: &PercentileDelay, now: Instant) -> Duration {
        let epoch = *self.epoch.get_or_init(|| now);
        let elapsed = nanos(now.saturating_duration_since(epoch));
        if elapsed >= self.window_ends.load(Ordering::Acquire) {
            self.rotate(settings, elapsed);
        }
        match self.delay.load(Ordering::Acquire) {
            NO_DELAY => settings.fallback(),
            delay => Duration::from_nanos(delay).clamp(settings.min(), settings.max()),
        }
    }

    /// Closes the window that ended before `elapsed`: its percentile becomes
    /// the delay, and a new window starts. One caller does it; the others go
    /// on with the delay in force. Latencies counted while the histogram is
    /// being cleared may land in either window.
    #[cold]
    fn rotate(&self, settings: &PercentileDelay, elapsed: u64) {
        if self.rotating.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return;
        }
        let ends = self.window_ends.load(Ordering::Acquire);
        if elapsed >= ends {
            self.close_window(settings, elapsed, ends);
        }
        self.rotating.store(false, Ordering::Release);
    }

    fn close_window(&self, settings: &PercentileDelay, elapsed: u64, ends: u64) {
        let mut counts = [0u32; BUCKETS];
        for (count, bucket) in counts.iter_mut().zip(&self.counts) {
            *count = bucket.swap(0, Ordering::Relaxed);
        }
        let delay = percentile(&counts, settings.quantile(), settings.min_samples()).map_or(NO_DELAY, nanos);
        self.delay.store(delay, Ordering::Release);
        // A window in which nothing looked (idle traffic) is not one to wait
        // out again: the next window starts now.
        let window = nanos(self.window).max(1);
        let next = if elapsed - ends < window { ends + window } else { elapsed + window };
        self.window_ends.store(next, Ordering::Release);
    }
}

/// `quantile` of the latencies counted in `counts`, as its bucket's upper
/// bound; `None` with fewer than `min_samples` of them.
fn percentile(counts: &[u32; BUCKETS], quantile: f64, min_samples: u32) -> Option<Duration> {
    let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    if total < u64::from(min_samples) || total == 0 {
        return None;
    }
    // The rank of the percentile, from 1: at least the first latency.
    let rank = ((quantile * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0u64;
    for (index, &count) in counts.iter().enumerate() {
        seen += u64::from(count);
        if seen >= rank {
            return Some(Duration::from_micros(upper_bound(index)));
        }
    }
    None
}

/// The bucket of a latency of `micros`: exact below 16 µs, then 8 buckets per
/// power of two.
fn bucket(micros: u64) -> usize {
    let micros = micros.min((1 << MAX_EXPONENT) - 1);
    if micros < 16 {
        return micros as usize;
    }
    let exponent = 63 - micros.leading_zeros();
    let sub = (micros >> (exponent - 3)) & u64::from(SUB_BUCKETS - 1);
    ((exponent - 2) * SUB_BUCKETS) as usize + sub as usize
}

/// The largest latency, in microseconds, that lands in bucket `index`.
fn upper_bound(index: usize) -> u64 {
    let index = index as u64;
    if index < 16 {
        return index;
    }
    let exponent = index / u64::from(SUB_BUCKETS) + 2;
    let sub = index % u64::from(SUB_BUCKETS);
    let width = 1u64 << (exponent - 3);
    (8 + sub) * width + width - 1
}

/// `d` in nanoseconds, saturating.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_latency_lands_in_the_bucket_whose_bounds_hold_it() {
        let mut previous_upper = None;
        for index in 0..BUCKETS {
            let upper = upper_bound(index);
            assert_eq!(bucket(upper), index, "upper bound of {index}");
            if let Some(p) = previous_upper {
                assert_eq!(bucket(p + 1), index, "lower bound of {index}");
                assert!(upper > p);
                // At most 12.5 % wide past the exact buckets.
                assert!((upper - p) * 8 <= p + 1 || index < 16, "bucket {index}: {p}..{upper}");
            }
            previous_upper = Some(upper);
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn the_percentile_is_the_bucket_that_holds_its_rank() {
        let mut counts = [0u32; BUCKETS];
        for micros in 1..=100u64 {
            counts[bucket(micros * 1_000)] += 1;
        }
        let p90 = percentile(&counts, 0.9, 1).expect("100 samples").as_micros() as u64;
        assert!((90_000..=90_000 + 90_000 / 8).contains(&p90), "{p90}");
        assert_eq!(percentile(&counts, 0.9, 101), None, "too few samples");
    }

    #[test]
    fn memory_stays_the_same_whatever_the_traffic() {
        // The tracker holds no collection that grows: its size is its memory.
        assert!(size_of::<LatencyTracker>() <= 1_024, "{} bytes", size_of::<LatencyTracker>());
        let tracker = LatencyTracker::new(Duration::from_secs(1));
        let settings = match super::super::HedgeDelay::percentile(0.99) {
            super::super::HedgeDelay::Percentile(p) => p,
            super::super::HedgeDelay::Fixed(_) => unreachable!("a percentile"),
        };
        let start = Instant::now();
        // The first look starts the first window (as the engine's first copy does).
        assert_eq!(tracker.delay(&settings, start), settings.fallback());
        for i in 0..1_000_000u64 {
            tracker.record(Duration::from_micros(i % 10_000));
        }
        let delay = tracker.delay(&settings, start + Duration::from_secs(1));
        // p99 of 0..10 ms, within a bucket's width.
        assert!(delay >= Duration::from_micros(9_900) && delay <= Duration::from_micros(11_200), "{delay:?}");
    }
}
