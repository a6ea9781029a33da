//! What a breaker tells its callers: its state, a refusal, a refused setting.

use super::{MAX_COOL_DOWN, MAX_HALF_OPEN_PROBES, MAX_PROBE_TIMEOUT, MIN_PROBE_TIMEOUT};
use crate::budget::{MAX_WINDOW, MIN_WINDOW};
use crate::setting::SettingValue;

use std::fmt;
use std::time::Duration;

/// Where the breaker is in its cycle.
///
/// An open breaker whose cool-down has elapsed still reports `Open` until the
/// next [`CircuitBreaker::try_acquire`](super::CircuitBreaker::try_acquire) moves it to `HalfOpen`: the state is a
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
    pub(crate) fn as_gauge(self) -> i64 {
        match self {
            Self::Closed => 0,
            Self::HalfOpen => 1,
            Self::Open => 2,
        }
    }

    /// A stable lowercase name: `closed`, `half-open` or `open`.
    #[must_use]
    pub(crate) fn as_str(self) -> &'static str {
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
    pub(super) half_open: bool,
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

/// What a breaker setting accepts, in a refusal's message: `failure_ratio` in
/// `(0, 1]`, `min_calls` at least 1, `window` within 1 s to 1 h, `cool_down`
/// positive and at most 24 h, `half_open_probes` within 1 to 65,535,
/// `probe_timeout` within 1 ms to 24 h.
pub(crate) fn describe(
    setting: &'static str,
    value: SettingValue,
    f: &mut fmt::Formatter<'_>,
) -> fmt::Result {
    write!(f, "circuit breaker {setting} must be ")?;
    // What each setting accepts, from the constants that bound it.
    match setting {
        "failure_ratio" => f.write_str("within (0, 1]")?,
        "min_calls" => f.write_str("at least 1")?,
        "window" => write!(f, "within {MIN_WINDOW:?}..={MAX_WINDOW:?}")?,
        "cool_down" => write!(f, "within (0s, {MAX_COOL_DOWN:?}]")?,
        "half_open_probes" => write!(f, "within 1..={MAX_HALF_OPEN_PROBES}")?,
        "probe_timeout" => write!(f, "within {MIN_PROBE_TIMEOUT:?}..={MAX_PROBE_TIMEOUT:?}")?,
        _ => f.write_str("in range")?,
    }
    write!(f, ", got {value}")
}
