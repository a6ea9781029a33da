//! The builder of a [`CircuitBreaker`].

use std::fmt;
use std::time::Duration;

use super::{CircuitBreaker, Settings};
use crate::clock::{Clock, GuardClock};
use crate::setting::SettingError;

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

    /// Length of the sliding window, within 1 s to 1 h
    /// (default 10 s). Outcomes expire between 0.9 and 1 window after they
    /// were recorded.
    #[must_use]
    pub fn window(mut self, window: Duration) -> Self {
        self.settings.window = window;
        self
    }

    /// How long the breaker stays open before probing, positive and at most
    /// 24 h (default 5 s). Kept with millisecond resolution,
    /// rounded up.
    #[must_use]
    pub fn cool_down(mut self, cool_down: Duration) -> Self {
        self.settings.cool_down = cool_down;
        self
    }

    /// Probes allowed in flight while half-open, and successes needed to close,
    /// within 1 to 65,535 (default 3).
    #[must_use]
    pub fn half_open_probes(mut self, probes: u32) -> Self {
        self.settings.half_open_probes = probes;
        self
    }

    /// How long a half-open breaker whose probe slots are all taken waits for
    /// one of them to report back, within
    /// 1 ms to 24 h (default
    /// 30 s). After that long without a new probe,
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
    /// [`SettingError`] naming the first setting out of range.
    pub fn build(self) -> Result<CircuitBreaker, SettingError> {
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
