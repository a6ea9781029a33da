//! The CUBIC curve the allowed rate climbs back along after a throttling
//! answer (RFC 9438's window growth, applied to a send rate as the AWS SDKs do).
//!
//! A throttling answer at time `t₀` while sending at `peak` cuts the rate to
//! `peak · β`; from then on the rate is `C · (t − t₀ − K)³ + peak`, with `K`
//! chosen so that the curve starts at `peak · β`: `K = ∛(peak · (1 − β) / C)`.
//! The curve is concave up to `t₀ + K`, where it regains `peak`, flat around
//! it (probing gently at the rate that was last too much), and convex after.

/// The multiplicative decrease on a throttling answer (the AWS SDKs' 0.7).
pub(super) const BETA: f64 = 0.7;
/// How steeply the curve climbs, `C` (the AWS SDKs' 0.4, as RFC 9438).
pub(super) const SCALE: f64 = 0.4;

/// The curve since the last throttling answer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cubic {
    /// The rate sent at when last throttled (`W_max`).
    peak: f64,
    /// Seconds from the last throttle until the curve is back at `peak` (`K`).
    back_at_peak_after: f64,
    /// When the last throttling answer came, in seconds on the limiter's time.
    last_throttle: f64,
}

impl Cubic {
    /// A curve that has never been throttled, starting at `start`: its peak
    /// is zero, so it climbs from zero as `C · t³`.
    pub(super) fn new(start: f64) -> Self {
        Self::throttled_at(0.0, start)
    }

    /// A curve whose last throttle came at `at` while sending at `peak`.
    pub(super) fn throttled_at(peak: f64, at: f64) -> Self {
        let back_at_peak_after = (peak * (1.0 - BETA) / SCALE).cbrt();
        Self { peak, back_at_peak_after, last_throttle: at }
    }

    /// The rate the curve allows at `t`.
    pub(super) fn rate_at(&self, t: f64) -> f64 {
        let since_peak = t - self.last_throttle - self.back_at_peak_after;
        SCALE * since_peak.powi(3) + self.peak
    }

    /// A throttling answer at `t` while sending at `rate`: the curve restarts
    /// from there, and the rate allowed now is `rate · β`.
    pub(super) fn throttle(&mut self, rate: f64, t: f64) -> f64 {
        *self = Self::throttled_at(rate, t);
        rate * BETA
    }

    #[cfg(test)]
    pub(super) fn back_at_peak_after(&self) -> f64 {
        self.back_at_peak_after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_curve_starts_at_beta_times_the_peak_and_regains_the_peak_after_k() {
        let mut curve = Cubic::new(0.0);
        assert!((curve.throttle(10.0, 1.0) - 7.0).abs() < 1e-12);
        assert!((curve.rate_at(1.0) - 7.0).abs() < 1e-12);
        let k = curve.back_at_peak_after();
        assert!((curve.rate_at(1.0 + k) - 10.0).abs() < 1e-12);
        // Concave before K, convex after: below the peak, then above it.
        assert!(curve.rate_at(1.0 + k / 2.0) < 10.0);
        assert!(curve.rate_at(1.0 + k * 1.5) > 10.0);
    }

    #[test]
    fn an_untouched_curve_climbs_from_zero() {
        let curve = Cubic::new(0.0);
        assert_eq!(curve.rate_at(0.0), 0.0);
        assert!((curve.rate_at(2.0) - SCALE * 8.0).abs() < 1e-12);
    }
}
