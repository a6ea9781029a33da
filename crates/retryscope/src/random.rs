//! The random numbers behind jitter.

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::time::Duration;

/// The random-number generator jitter draws from.
///
/// Seed it ([`JitterRng::seeded`]) for reproducible delays in tests and
/// simulations, or let it seed itself ([`JitterRng::from_entropy`]). It is a
/// small, fast, non-cryptographic generator; this crate's own type, so that no
/// random-number crate's release cycle is part of this crate's API.
///
/// ```
/// use retryscope::{JitterRng, Policy};
///
/// let policy = Policy::interactive();
/// let first = policy.delay(0, policy.base_delay(), &mut JitterRng::seeded(7));
/// let again = policy.delay(0, policy.base_delay(), &mut JitterRng::seeded(7));
/// assert_eq!(first, again);
/// ```
#[derive(Debug, Clone)]
pub struct JitterRng(SmallRng);

impl JitterRng {
    /// A generator whose sequence is determined by `seed`.
    pub fn seeded(seed: u64) -> Self {
        Self(SmallRng::seed_from_u64(seed))
    }

    /// A generator seeded from the thread-local generator, itself seeded by
    /// the operating system.
    pub fn from_entropy() -> Self {
        Self(rand::make_rng())
    }

    /// The next 64 random bits, for simulations that draw their own numbers
    /// from the same sequence as the jitter.
    pub fn next_u64(&mut self) -> u64 {
        rand::Rng::next_u64(&mut self.0)
    }

    /// A uniformly distributed value in `low..=high` (`low` when `high < low`).
    pub(crate) fn between(&mut self, low: u64, high: u64) -> u64 {
        if high <= low { low } else { self.0.random_range(low..=high) }
    }
}

/// SplitMix64 of `seed` and `n`: a well-mixed 64-bit number, the same for
/// the same pair, that draws nothing from any generator.
pub(crate) fn mix(seed: u64, n: u64) -> u64 {
    let mut z = seed.wrapping_add(n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Default for JitterRng {
    /// [`JitterRng::from_entropy`].
    fn default() -> Self {
        Self::from_entropy()
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
fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
