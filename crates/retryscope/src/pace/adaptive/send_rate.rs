//! The client's measured send rate: answers counted per half-second bucket,
//! smoothed exponentially (the AWS SDKs' "measured TX rate").

/// Weight of the newest bucket in the smoothed rate.
const SMOOTHING: f64 = 0.8;
/// Buckets per second: the rate is re-measured every half second.
const BUCKETS_PER_SECOND: f64 = 2.0;

/// The smoothed rate and the bucket being counted.
#[derive(Debug, Clone, Copy)]
pub(super) struct SendRate {
    smoothed: f64,
    /// Start of the last bucket that closed, in seconds on the limiter's time.
    last_bucket: f64,
    /// Answers counted since `last_bucket` closed.
    count: u64,
}

impl SendRate {
    /// Nothing measured yet, counting from `start`.
    ///
    /// The first bucket runs from the whole second at or before `start`, as
    /// in the SDKs.
    pub(super) fn new(start: f64) -> Self {
        Self { smoothed: 0.0, last_bucket: start.floor(), count: 0 }
    }

    /// Counts one answer at `t` and returns the smoothed rate.
    ///
    /// When `t` is in a later bucket than the last one that closed, the
    /// answers counted since then (this one included) are spread over the
    /// time between the two buckets' starts and smoothed into the rate; within
    /// the same bucket they are only counted, so the rate reported is the one
    /// measured up to the last bucket that closed.
    pub(super) fn record(&mut self, t: f64) -> f64 {
        let bucket = (t * BUCKETS_PER_SECOND).floor() / BUCKETS_PER_SECOND;
        self.count = self.count.saturating_add(1);
        if bucket > self.last_bucket {
            #[allow(clippy::cast_precision_loss, reason = "a count within a bucket is far below 2⁵³")]
            let latest = self.count as f64 / (bucket - self.last_bucket);
            self.smoothed = latest * SMOOTHING + self.smoothed * (1.0 - SMOOTHING);
            self.count = 0;
            self.last_bucket = bucket;
        }
        self.smoothed
    }

    /// The smoothed rate, in answers per second.
    pub(super) fn rate(&self) -> f64 {
        self.smoothed
    }
}

/// botocore's own cases for its `RateClocker` (tests/unit/retries/test_adaptive.py,
/// `TestRateClocker`), each starting at 0.
#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(times: &[f64]) -> SendRate {
        let mut rate = SendRate::new(0.0);
        for &t in times {
            rate.record(t);
        }
        rate
    }

    #[test]
    fn nothing_measured_is_a_rate_of_zero() {
        assert_eq!(SendRate::new(0.0).rate(), 0.0);
    }

    #[test]
    fn the_first_closed_bucket_is_weighted_by_the_smoothing() {
        assert!((SendRate::new(0.0).record(1.0) - 0.8).abs() < 1e-12);
    }

    #[test]
    fn one_answer_a_second_measures_one_per_second() {
        let times: Vec<f64> = (1..=20).map(f64::from).collect();
        assert!((recorded(&times).rate() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn recent_buckets_weigh_more_than_old_ones() {
        let mut rate = recorded(&[1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]);
        assert!((1.99..=2.0).contains(&rate.rate()), "{}", rate.rate());
        // Ten seconds of silence (0.1 per second) pull it down, not all the way.
        let after = rate.record(14.0);
        assert!((0.1..=2.0).contains(&after), "{after}");
    }

    #[test]
    fn answers_at_the_same_instant_do_not_divide_by_zero() {
        let rate = recorded(&[1.0, 1.0, 1.0, 2.0, 3.0]);
        assert!(rate.rate() >= 1.0 && rate.rate().is_finite(), "{}", rate.rate());
    }

    #[test]
    fn answers_are_counted_per_half_second_bucket() {
        let mut rate = recorded(&[0.1, 0.2, 0.3, 0.4, 0.49]);
        // Still in the bucket 0 ≤ t < 0.5: the last closed bucket measured 0.
        assert_eq!(rate.rate(), 0.0);
        // The next bucket closes this one: 6 answers over 0.5 s, smoothed.
        assert!((rate.record(0.5) - 12.0 * 0.8).abs() < 1e-12);
    }
}
