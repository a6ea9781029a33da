//! Randomisation of backoff delays.
//!
//! Without jitter, clients that failed together retry together, and a recovering
//! service sees the same spike again at every backoff step. Jitter spreads the
//! retries out. The formulas follow the AWS Architecture Blog post "Exponential
//! Backoff And Jitter" (2015), except [`Jitter::Grpc`], which is gRFC A6's.
//! No variant returns more than the cap but A6's, which may exceed it by a
//! fifth as A6 specifies.

use crate::policy::Jitter;
use crate::random::{JitterRng, uniform};
use std::time::Duration;

/// A6's jitter: "plus or minus 0.2" around the capped exponential delay.
const GRPC_SPREAD: f64 = 0.2;

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
    /// Applies this jitter to one step. The result never exceeds `step.cap`,
    /// but for [`Jitter::Grpc`]'s, which never exceeds 1.2 × `step.cap`.
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
            Jitter::Grpc => {
                let scaled = |factor: f64| Duration::try_from_secs_f64(d.as_secs_f64() * factor).unwrap_or(d);
                // Not capped: A6 lets the jitter carry the wait past maxBackoff.
                return uniform(rng, scaled(1.0 - GRPC_SPREAD), scaled(1.0 + GRPC_SPREAD));
            }
        };
        delay.min(step.cap)
    }
}
