//! Gradient2: the latency-based limit of Netflix's concurrency-limits
//! (`Gradient2Limit`).

use super::Sample;
use crate::setting::SettingError;
use crate::setting::SettingValue;

/// The limit a new Gradient2 limiter starts at (Netflix's 20).
const GRADIENT2_DEFAULT_INITIAL_LIMIT: u32 = 20;
/// The lowest limit unless set (Netflix's 20).
const GRADIENT2_DEFAULT_MIN_LIMIT: u32 = 20;
/// The highest limit unless set (Netflix's `maxConcurrency`, 200).
const GRADIENT2_DEFAULT_MAX_LIMIT: u32 = 200;
/// How far the limit may move toward each new estimate unless set
/// (Netflix's 0.2).
const GRADIENT2_DEFAULT_SMOOTHING: f64 = 0.2;
/// The slack added to each estimate unless set: the queue the dependency may
/// hold while latency stays low (Netflix's 4).
const GRADIENT2_DEFAULT_QUEUE_SIZE: u32 = 4;
/// The long-term RTT's window, in samples, unless set (Netflix's 600).
const GRADIENT2_DEFAULT_LONG_WINDOW: u32 = 600;
/// How much slower than the long-term RTT the short-term one may be before
/// the limit shrinks, unless set (Netflix's 1.5).
const GRADIENT2_DEFAULT_RTT_TOLERANCE: f64 = 1.5;
/// The samples averaged plainly before the long-term RTT turns into an
/// exponential average (Netflix's `ExpAvgMeasurement` warm-up, 10).
const WARMUP: u32 = 10;

/// The gradient limit: it compares the short-term round trip (the last
/// sample's, as Netflix's `SingleMeasurement`) with a long-term exponential
/// average of them (`long_window` samples, after a plain average of the first
/// ten). While the short one stays within `rtt_tolerance` of the long one the
/// limit grows by up to `queue_size` per sample; when it rises beyond, the
/// limit shrinks in proportion (never by more than half an estimate):
///
/// ```text
/// gradient  = max(0.5, min(1, tolerance · long_rtt / short_rtt))
/// estimate  = limit · gradient + queue_size
/// limit     = clamp(limit · (1 − smoothing) + estimate · smoothing, min, max)
/// ```
///
/// Samples sent while less than half the limit was in flight do not move
/// the limit (the client, not the dependency, was the bottleneck), and a
/// long-term RTT more than twice the short one decays by 5 % per sample, so
/// that the baseline comes back down after a long overload. Drops carry
/// their round trip like any sample: Gradient2 reads latency, not loss.
///
/// **Defaults** (Netflix's):
///
/// | | value |
/// |---|---|
/// | The limit a new Gradient2 limiter starts at (Netflix's 20). | 20 |
/// | The lowest limit unless set (Netflix's 20). | 20 |
/// | The highest limit unless set (Netflix's `maxConcurrency`, 200). | 200 |
/// | How far the limit may move toward each new estimate, fixed (Netflix's 0.2). | 0.2 |
/// | The slack added to each estimate unless set: the queue the dependency may hold while latency stays low (Netflix's 4). | 4 |
/// | The long-term RTT's window, in samples, unless set (Netflix's 600). | 600 |
/// | How much slower than the long-term RTT the short-term one may be before the limit shrinks, unless set (Netflix's 1.5). | 1.5 |
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gradient2 {
    pub(super) initial_limit: u32,
    pub(super) min_limit: u32,
    pub(super) max_limit: u32,
    smoothing: f64,
    queue_size: u32,
    long_window: u32,
    rtt_tolerance: f64,
}

/// The long-term RTT, in seconds: Netflix's `ExpAvgMeasurement`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LongRtt {
    value: f64,
    sum: f64,
    count: u32,
}

impl Gradient2 {
    /// Settings other than Netflix's defaults.
    pub fn builder() -> Gradient2Builder {
        Gradient2Builder::default()
    }

    /// The limit after `sample`, from `limit`: Netflix's `_update`.
    pub(super) fn update(&self, limit: f64, long: &mut LongRtt, sample: Sample) -> f64 {
        // A zero round trip (a clock too coarse to see it) would divide by zero.
        let short = sample.rtt.as_secs_f64().max(1e-9);
        let long_rtt = long.add(short, self.long_window);
        if long_rtt / short > 2.0 {
            long.value *= 0.95;
        }
        if f64::from(sample.in_flight) < limit / 2.0 {
            return limit;
        }
        let gradient = (self.rtt_tolerance * long_rtt / short).clamp(0.5, 1.0);
        let estimate = limit * gradient + f64::from(self.queue_size);
        let next = limit * (1.0 - self.smoothing) + estimate * self.smoothing;
        next.clamp(f64::from(self.min_limit), f64::from(self.max_limit))
    }
}

impl LongRtt {
    fn add(&mut self, sample: f64, window: u32) -> f64 {
        if self.count < WARMUP {
            self.count += 1;
            self.sum += sample;
            self.value = self.sum / f64::from(self.count);
        } else {
            let factor = 2.0 / (f64::from(window) + 1.0);
            self.value = self.value * (1.0 - factor) + sample * factor;
        }
        self.value
    }

    /// The long-term RTT, in seconds; zero before the first sample.
    #[cfg(test)]
    pub(super) fn get(&self) -> f64 {
        self.value
    }
}

impl Default for Gradient2 {
    fn default() -> Self {
        Self {
            initial_limit: GRADIENT2_DEFAULT_INITIAL_LIMIT,
            min_limit: GRADIENT2_DEFAULT_MIN_LIMIT,
            max_limit: GRADIENT2_DEFAULT_MAX_LIMIT,
            smoothing: GRADIENT2_DEFAULT_SMOOTHING,
            queue_size: GRADIENT2_DEFAULT_QUEUE_SIZE,
            long_window: GRADIENT2_DEFAULT_LONG_WINDOW,
            rtt_tolerance: GRADIENT2_DEFAULT_RTT_TOLERANCE,
        }
    }
}

/// Builds a [`Gradient2`] limit; see [`Gradient2::builder`].
#[derive(Debug, Clone, Default)]
#[must_use = "a builder makes no limit until `build` is called"]
pub struct Gradient2Builder {
    g: Gradient2,
}

impl Gradient2Builder {
    /// The limit it starts at (default 20), within `min_limit..=max_limit`.
    pub const fn initial_limit(mut self, limit: u32) -> Self {
        self.g.initial_limit = limit;
        self
    }

    /// The lowest limit, at least 1 (default 20).
    pub const fn min_limit(mut self, limit: u32) -> Self {
        self.g.min_limit = limit;
        self
    }

    /// The highest limit, at least `min_limit` and at most
    /// 10,000 (default 200).
    pub const fn max_limit(mut self, limit: u32) -> Self {
        self.g.max_limit = limit;
        self
    }

    /// How far the limit moves toward each estimate, within `(0, 1]`
    /// (default 0.2).
    #[cfg(test)]
    pub(crate) const fn smoothing(mut self, smoothing: f64) -> Self {
        self.g.smoothing = smoothing;
        self
    }

    /// The slack added to each estimate, within 0 to 10,000
    /// (default 4).
    pub const fn queue_size(mut self, size: u32) -> Self {
        self.g.queue_size = size;
        self
    }

    /// The long-term RTT's window in samples, within `1..=100_000`
    /// (default 600).
    pub const fn long_window(mut self, samples: u32) -> Self {
        self.g.long_window = samples;
        self
    }

    /// How much slower than the long-term RTT the short-term one may be
    /// before the limit shrinks, within `1.0..=10.0` (default 1.5).
    pub const fn rtt_tolerance(mut self, tolerance: f64) -> Self {
        self.g.rtt_tolerance = tolerance;
        self
    }

    /// The limit, or the setting that is out of range.
    pub fn build(self) -> Result<Gradient2, SettingError> {
        let g = self.g;
        super::check_limits(g.initial_limit, g.min_limit, g.max_limit)?;
        let refuse = |setting, value| Err(SettingError::overload(setting, value));
        if !(g.smoothing > 0.0 && g.smoothing <= 1.0) {
            return refuse("smoothing", SettingValue::Number(g.smoothing));
        }
        if g.queue_size > super::MAX_LIMIT {
            return refuse("queue_size", SettingValue::Count(g.queue_size));
        }
        if !(1..=100_000).contains(&g.long_window) {
            return refuse("long_window", SettingValue::Count(g.long_window));
        }
        if !(1.0..=10.0).contains(&g.rtt_tolerance) {
            return refuse("rtt_tolerance", SettingValue::Number(g.rtt_tolerance));
        }
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sample(rtt_ms: u64, in_flight: u32) -> Sample {
        Sample { rtt: Duration::from_millis(rtt_ms), in_flight, dropped: false }
    }

    #[test]
    fn steady_latency_grows_the_limit_by_the_smoothed_queue_size() {
        let g = Gradient2::builder().build().expect("defaults");
        let mut long = LongRtt::default();
        // long = short: gradient min(1, 1.5) = 1; estimate 20 + 4; 20·0.8 + 24·0.2.
        assert_eq!(g.update(20.0, &mut long, sample(100, 10)), 20.8);
        assert!((long.get() - 0.1).abs() < 1e-12);
    }

    #[test]
    fn latency_beyond_the_tolerance_shrinks_the_limit() {
        let g = Gradient2::builder().min_limit(1).build().expect("valid");
        let mut long = LongRtt::default();
        for _ in 0..10 {
            g.update(40.0, &mut long, sample(100, 1)); // app-limited: no change, long RTT 100 ms
        }
        // short 300 ms: the 11th sample moves the long average by 2/601 of the gap.
        let expected_long = 0.1 + (0.3 - 0.1) * 2.0 / 601.0;
        let gradient = 1.5 * expected_long / 0.3;
        let expected = 40.0 * 0.8 + (40.0 * gradient + 4.0) * 0.2;
        let next = g.update(40.0, &mut long, sample(300, 40));
        assert!((next - expected).abs() < 1e-9, "{next} vs {expected}");
        assert!(next < 40.0);
    }

    #[test]
    fn app_limited_samples_leave_the_limit_alone() {
        let g = Gradient2::builder().build().expect("defaults");
        let mut long = LongRtt::default();
        assert_eq!(g.update(50.0, &mut long, sample(100, 24)), 50.0);
    }

    /// A closed loop on a FIFO server of `workers` workers taking `service`
    /// each: with `limit` requests in flight, each round trip is
    /// `service · max(1, in_flight / workers)` (Little's law). Returns the
    /// limit after `samples` samples, from a limit of 1.
    fn closed_loop(g: &Gradient2, workers: u32, samples: u32) -> f64 {
        let service = 0.1;
        let (mut limit, mut long) = (1.0, LongRtt::default());
        for _ in 0..samples {
            let in_flight = (limit as u32).max(1);
            let rtt = Duration::from_secs_f64(service * (f64::from(in_flight) / f64::from(workers)).max(1.0));
            limit = g.update(limit, &mut long, Sample { rtt, in_flight, dropped: false });
        }
        limit
    }

    /// Why the conformance test sets what it sets: the limit settles at
    /// `N + queue_size` only while the baseline stays the unloaded round trip;
    /// with the default long window the baseline absorbs the standing queue
    /// and the limit keeps climbing, and the default tolerance aims at 1.5·N.
    #[test]
    fn on_a_fifo_server_the_limit_settles_at_the_workers_plus_the_queue_only_with_a_steady_baseline() {
        let steady = Gradient2::builder()
            .initial_limit(1)
            .min_limit(1)
            .rtt_tolerance(1.0)
            .queue_size(1)
            .long_window(100_000)
            .build()
            .expect("valid");
        // 2 000 samples: 12 s of the conformance test's server (16 workers, 100 ms).
        for samples in [500, 2_000] {
            let limit = closed_loop(&steady, 16, samples);
            assert!((17.0..18.0).contains(&limit), "{samples} samples: {limit}");
        }
        let default_window = Gradient2::builder()
            .initial_limit(1)
            .min_limit(1)
            .rtt_tolerance(1.0)
            .queue_size(1)
            .build()
            .expect("valid");
        let (early, late) = (closed_loop(&default_window, 16, 500), closed_loop(&default_window, 16, 2_000));
        assert!(late > early + 3.0, "the baseline follows the queue: {early} then {late}");
        let defaults = Gradient2::builder().initial_limit(1).min_limit(1).build().expect("valid");
        let limit = closed_loop(&defaults, 16, 500);
        assert!(limit > 1.5 * 16.0, "tolerance 1.5 and queue 4: {limit}");
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        for (builder, setting) in [
            (Gradient2::builder().min_limit(0), "min_limit"),
            (Gradient2::builder().smoothing(0.0), "smoothing"),
            (Gradient2::builder().smoothing(f64::NAN), "smoothing"),
            (Gradient2::builder().queue_size(1_000_000), "queue_size"),
            (Gradient2::builder().long_window(0), "long_window"),
            (Gradient2::builder().rtt_tolerance(0.9), "rtt_tolerance"),
        ] {
            let error = builder.build().expect_err("out of range");
            assert!(error.setting() == setting, "{error}");
        }
    }
}
