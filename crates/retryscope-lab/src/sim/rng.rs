//! One random sequence for a simulation's own draws and the engine's jitter.

use rand::TryRng;
use retryscope::JitterRng;
use std::convert::Infallible;

/// A simulation's random numbers: the engine's [`JitterRng`], also readable
/// through `rand`'s traits, so that the simulation's own distributions and the
/// policy's jitter draw from one seeded sequence, as in the experiments the
/// simulations reproduce.
#[derive(Debug, Clone)]
pub struct SimRng(JitterRng);

impl SimRng {
    /// A sequence determined by `seed`.
    pub fn seeded(seed: u64) -> Self {
        Self(JitterRng::seeded(seed))
    }

    /// The same sequence, for [`retryscope::Policy::delay`].
    pub fn jitter(&mut self) -> &mut JitterRng {
        &mut self.0
    }
}

impl TryRng for SimRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        // The upper half: the low bits of xoshiro-style generators are the weaker ones.
        Ok((self.0.next_u64() >> 32) as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.0.next_u64())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dst.chunks_mut(8) {
            let word = self.0.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        Ok(())
    }
}
