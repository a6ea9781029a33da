//! The token bucket that holds sends to the allowed rate: it fills at that
//! rate (never slower than `MIN_FILL_RATE`) and holds up to one second of it
//! (never less than one token).

/// The slowest the allowed rate goes, in sends per second: however hard a
/// dependency throttles, a call gets through every two seconds, so the client
/// keeps measuring and can recover.
pub(crate) const MIN_FILL_RATE: f64 = 0.5;
/// The least the bucket holds: one send.
const MIN_CAPACITY: f64 = 1.0;
/// A shortfall that takes less than this to fill is float rounding, not a rate:
/// it is granted rather than answered with a wait too short for any timer.
const NEGLIGIBLE_WAIT: f64 = 1e-6;

/// Tokens, in sends.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bucket {
    fill_rate: f64,
    capacity: f64,
    tokens: f64,
    /// When tokens were last added, in seconds on the limiter's time; `None`
    /// until the bucket is first touched, which starts it empty.
    last_refill: Option<f64>,
}

impl Bucket {
    /// An empty bucket at the minimum rate, which starts filling when first
    /// touched.
    pub(super) fn new() -> Self {
        Self { fill_rate: MIN_FILL_RATE, capacity: MIN_CAPACITY, tokens: 0.0, last_refill: None }
    }

    /// Tokens per second.
    pub(super) fn fill_rate(&self) -> f64 {
        self.fill_rate
    }

    /// Tokens available now (after the last refill).
    #[cfg(test)]
    pub(super) fn tokens(&self) -> f64 {
        self.tokens
    }

    /// Adds what the bucket filled since it was last touched, up to capacity.
    /// Time standing still (or read out of order) adds nothing.
    fn refill(&mut self, t: f64) {
        if let Some(last) = self.last_refill {
            let filled = (t - last).max(0.0) * self.fill_rate;
            self.tokens = self.capacity.min(self.tokens + filled);
        }
        self.last_refill = Some(self.last_refill.map_or(t, |last| last.max(t)));
    }

    /// Sets a new allowed rate at `t`. What filled until `t` filled at the old
    /// rate; a smaller bucket spills what no longer fits.
    pub(super) fn set_rate(&mut self, t: f64, rate: f64) {
        self.refill(t);
        // `max` keeps the floor even for a NaN rate, which cannot arise from
        // finite inputs but must not stop the bucket if it ever did.
        self.fill_rate = rate.max(MIN_FILL_RATE);
        self.capacity = rate.max(MIN_CAPACITY);
        self.tokens = self.tokens.min(self.capacity);
    }

    /// Takes one token at `t` if there is one, else says how many seconds
    /// until there will be, taking nothing.
    pub(super) fn take(&mut self, t: f64) -> Result<(), f64> {
        self.refill(t);
        let wait = (1.0 - self.tokens) / self.fill_rate;
        if wait >= NEGLIGIBLE_WAIT {
            return Err(wait);
        }
        self.tokens = (self.tokens - 1.0).max(0.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_never_fills_slower_than_the_minimum_nor_holds_less_than_one() {
        let mut bucket = Bucket::new();
        bucket.set_rate(0.0, 0.01);
        assert_eq!(bucket.fill_rate(), MIN_FILL_RATE);
        // Four seconds at 0.5 per second would be two tokens; it holds one.
        bucket.set_rate(4.0, 0.01);
        assert_eq!(bucket.tokens(), 1.0);
    }

    #[test]
    fn what_filled_before_a_rate_change_filled_at_the_old_rate() {
        let mut bucket = Bucket::new();
        bucket.set_rate(0.0, 10.0);
        bucket.set_rate(0.5, 2.0);
        // 0.5 s at 10 per second is 5 tokens, spilled down to the new capacity 2.
        assert_eq!(bucket.tokens(), 2.0);
    }

    #[test]
    fn a_refused_take_takes_nothing_and_says_how_long_to_wait() {
        let mut bucket = Bucket::new();
        bucket.set_rate(0.0, 0.0);
        let wait = bucket.take(0.1).expect_err("0.05 tokens are not enough");
        assert!((wait - 1.9).abs() < 1e-9, "{wait}");
        assert!((bucket.tokens() - 0.05).abs() < 1e-12);
        assert_eq!(bucket.take(2.1), Ok(()));
        assert!(bucket.tokens().abs() < 1e-9);
    }

    #[test]
    fn time_read_out_of_order_adds_no_tokens_twice() {
        let mut bucket = Bucket::new();
        bucket.set_rate(0.0, 4.0);
        bucket.set_rate(1.0, 4.0);
        assert_eq!(bucket.tokens(), 4.0);
        assert_eq!(bucket.take(1.0), Ok(()));
        // An earlier reading than the last refill adds nothing, and the one
        // after it counts only from the latest reading.
        assert!(bucket.take(0.5).is_ok());
        bucket.set_rate(1.25, 4.0);
        assert_eq!(bucket.tokens(), 3.0);
    }

    #[test]
    fn a_sub_microsecond_shortfall_is_granted_and_never_drives_the_bucket_negative() {
        let mut bucket = Bucket::new();
        bucket.set_rate(0.0, 1.0);
        bucket.tokens = 1.0 - 1e-12;
        bucket.last_refill = Some(5.0);
        assert_eq!(bucket.take(5.0), Ok(()));
        assert_eq!(bucket.tokens(), 0.0);
    }
}
