//! Randomisation of backoff delays.
//!
//! Without jitter, clients that failed together retry together, and a recovering
//! service sees the same spike again at every backoff step. Jitter spreads the
//! retries out. The formulas follow the AWS Architecture Blog post "Exponential
//! Backoff And Jitter" (2015). No variant ever returns more than the cap.

use crate::random::JitterRng;
use std::time::Duration;

/// How a backoff delay is randomised.
///
/// `d` is the capped exponential delay `min(cap, base · multiplier^n)`:
///
/// | variant | delay |
/// |---|---|
/// | [`Jitter::None`] | `d` |
/// | [`Jitter::Full`] | `U(0, d)` |
/// | [`Jitter::Equal`] | `d/2 + U(0, d/2)` |
/// | [`Jitter::Decorrelated`] | `min(cap, U(base, prev · 3))` |
/// | [`Jitter::Proportional`]`(f)` | `U(u - f · d, u)` with `u = min(cap, d + f · d)` |
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum Jitter {
    /// The plain exponential delay. Clients that failed together retry together:
    /// use only where a single client talks to a dependency.
    None,
    /// Uniform between zero and the exponential delay. The best spread, the fewest
    /// calls in the AWS experiment; the default.
    #[default]
    Full,
    /// Half the exponential delay plus a uniform share of the other half: never
    /// retries very early.
    Equal,
    /// Uniform between the base and three times the previous delay, capped.
    Decorrelated,
    /// The exponential delay plus up to `f` times itself; `f` ≥ 0. Near the cap
    /// the window of width `f · d` slides below the cap instead of being clipped
    /// at it, so clients that reached the cap together keep their spread rather
    /// than all waiting exactly the cap.
    Proportional(f64),
}

/// The inputs of one jitter computation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step {
    /// `min(cap, base · multiplier^n)`.
    pub(crate) exponential: Duration,
    /// The delay returned for the previous retry (the base before the first).
    pub(crate) previous: Duration,
    pub(crate) base: Duration,
    pub(crate) cap: Duration,
}

impl Jitter {
    /// Applies this jitter to one step. The result never exceeds `step.cap`.
    pub(crate) fn apply(self, step: Step, rng: &mut JitterRng) -> Duration {
        let d = step.exponential;
        let delay = match self {
            Jitter::None => d,
            Jitter::Full => uniform(rng, Duration::ZERO, d),
            Jitter::Equal => d / 2 + uniform(rng, Duration::ZERO, d - d / 2),
            Jitter::Decorrelated => {
                let upper = step.previous.saturating_mul(3).max(step.base);
                uniform(rng, step.base, upper)
            }
            Jitter::Proportional(f) => {
                let spread = Duration::try_from_secs_f64(d.as_secs_f64() * f).unwrap_or(step.cap);
                let upper = d.saturating_add(spread).min(step.cap);
                uniform(rng, upper.saturating_sub(spread), upper)
            }
        };
        delay.min(step.cap)
    }

    /// Whether this variant's parameter is usable (`f` finite and ≥ 0).
    pub(crate) fn is_valid(self) -> bool {
        match self {
            Jitter::Proportional(f) => f.is_finite() && f >= 0.0,
            _ => true,
        }
    }
}

/// A uniformly distributed duration in `[low, high]`, at nanosecond resolution.
pub(crate) fn uniform(rng: &mut JitterRng, low: Duration, high: Duration) -> Duration {
    let low_ns = saturating_nanos(low);
    let high_ns = saturating_nanos(high);
    if high_ns <= low_ns {
        return low;
    }
    Duration::from_nanos(rng.between(low_ns, high_ns))
}

/// Nanoseconds in `d`, saturating at `u64::MAX` (584 years).
pub(crate) fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
