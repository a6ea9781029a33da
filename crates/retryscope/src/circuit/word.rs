//! The packed state word: the whole state machine in one `AtomicU64`.

use std::time::Duration;

/// Layout of the state word, high to low: 2 bits phase, 22 bits generation,
/// 40 bits payload. Open: the cool-down's end in milliseconds since the
/// breaker's origin (wrapping; compared as a signed difference, sound for 17
/// years of idleness). Half-open: 20 bits probes in flight, 20 bits successes.
pub(super) const PAYLOAD_BITS: u32 = 40;
pub(super) const PAYLOAD_MASK: u64 = (1 << PAYLOAD_BITS) - 1;
pub(super) const GENERATION_BITS: u32 = 22;
pub(super) const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;
pub(super) const COUNT_BITS: u32 = 20;
pub(super) const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Closed,
    HalfOpen { in_flight: u32, successes: u32 },
    Open { until_ms: u64 },
}

/// The unpacked state word. The generation changes on every phase change, so
/// a permit can tell whether the phase it was issued in is still current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Word {
    pub(super) generation: u32,
    pub(super) phase: Phase,
}

impl Word {
    pub(super) fn pack(self) -> u64 {
        let (tag, payload) = match self.phase {
            Phase::Closed => (0, 0),
            Phase::HalfOpen { in_flight, successes } => {
                (1, (u64::from(in_flight) << COUNT_BITS) | u64::from(successes))
            }
            Phase::Open { until_ms } => (2, until_ms & PAYLOAD_MASK),
        };
        let generation = u64::from(self.generation) & GENERATION_MASK;
        (tag << (GENERATION_BITS + PAYLOAD_BITS)) | (generation << PAYLOAD_BITS) | payload
    }

    pub(super) fn unpack(word: u64) -> Self {
        let payload = word & PAYLOAD_MASK;
        // Masked to 22 and 20 bits, so the casts cannot truncate.
        let generation = ((word >> PAYLOAD_BITS) & GENERATION_MASK) as u32;
        let phase = match word >> (GENERATION_BITS + PAYLOAD_BITS) {
            0 => Phase::Closed,
            1 => Phase::HalfOpen {
                in_flight: ((payload >> COUNT_BITS) & COUNT_MASK) as u32,
                successes: (payload & COUNT_MASK) as u32,
            },
            _ => Phase::Open { until_ms: payload },
        };
        Self { generation, phase }
    }

    /// The same phase's successor: a new phase and a new generation.
    pub(super) fn advance(self, phase: Phase) -> Self {
        let generation = (self.generation + 1) & (GENERATION_MASK as u32);
        Self { generation, phase }
    }
}

/// Whole milliseconds in `elapsed`, wrapped to the 40-bit payload.
pub(super) fn millis(elapsed: Duration) -> u64 {
    // Truncation is intended: times are compared wrapping.
    (elapsed.as_millis() as u64) & PAYLOAD_MASK
}

/// The contents of [`Inner::last_probe`]: 22 bits generation, 40 bits time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LastProbe {
    pub(super) generation: u32,
    pub(super) at_ms: u64,
}

impl LastProbe {
    pub(super) fn pack(self) -> u64 {
        ((u64::from(self.generation) & GENERATION_MASK) << PAYLOAD_BITS) | (self.at_ms & PAYLOAD_MASK)
    }

    pub(super) fn unpack(word: u64) -> Self {
        // Masked to 22 bits, so the cast cannot truncate.
        Self { generation: ((word >> PAYLOAD_BITS) & GENERATION_MASK) as u32, at_ms: word & PAYLOAD_MASK }
    }

    /// Whether this note is newer than `other`: a later generation, or the
    /// same one at a later time (both compared wrapping, in their upper half
    /// meaning "behind").
    pub(super) fn is_after(self, other: Self) -> bool {
        let generations = self.generation.wrapping_sub(other.generation) & (GENERATION_MASK as u32);
        if generations != 0 {
            return generations < 1 << (GENERATION_BITS - 1);
        }
        let ahead = self.at_ms.wrapping_sub(other.at_ms) & PAYLOAD_MASK;
        ahead != 0 && ahead < 1 << (PAYLOAD_BITS - 1)
    }
}
