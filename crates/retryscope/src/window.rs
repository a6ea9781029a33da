//! Sliding time windows of atomic counters: [`SlottedWindow`], shared by the
//! retry budget's deposits and the circuit breaker, and [`Ledger`], the retry
//! budget's withdrawals.
//!
//! The window is a ring of [`SLOTS`] time slots. Each slot holds `K` counters, and
//! each counter is a single `AtomicU64` that packs the slot's *lap* (how many times
//! the ring has turned when the count was made) in its high 32 bits and the count
//! in its low 32 bits. Keeping the lap in the same word as the count is what makes
//! recycling lock-free and exact: a writer that finds a stale lap replaces the
//! whole word with one compare-exchange, so no increment can slip in between
//! "reset the slot" and "mark it current" (the race a separate epoch word has).
//!
//! Laps are compared with wrapping arithmetic, so a 32-bit lap is only ambiguous
//! when a counter has not been written for 2^32 turns of the ring (136 years for
//! a one-second window, the shortest the public builders accept).

use crate::sync::{AtomicU64, CachePadded, Ordering};
use std::time::{Duration, Instant};

/// Number of slots the window is divided into: events expire between
/// `window · (SLOTS - 1) / SLOTS` and `window` after they happened.
pub(crate) const SLOTS: usize = 10;

/// `SLOTS` as the integer type epochs are counted in.
const SLOTS_U64: u64 = SLOTS as u64;

/// Everything below is sequentially consistent: the breaker's judgement after a
/// failure relies on a single total order of counter updates and reads (with
/// its fence), the ledger on a retired slot being visible to whoever sees the
/// head that replaced it, and the hot path is a handful of uncontended
/// atomics, so weaker orderings would buy little.
const ORDER: Ordering = Ordering::SeqCst;

/// `K` counters per slot over a sliding window; see the module docs.
#[derive(Debug)]
pub(crate) struct SlottedWindow<const K: usize> {
    slot: SlotLength,
    slots: [[AtomicU64; K]; SLOTS],
}

/// The length of a window's slots, and the slot a reading fell in.
///
/// Every call of a guard turns a reading into a slot number, and a 64-bit
/// division costs as much as the rest of the arithmetic together, so the
/// last slot number computed is kept as a hint: a reading inside that slot
/// (the common case, slots being at least 100 ms) needs a multiplication and
/// a comparison instead. The hint is checked before use, so any value in it
/// is harmless; that is why it is a plain std atomic even under loom (which
/// would otherwise explore its every interleaving for nothing).
#[derive(Debug)]
pub(crate) struct SlotLength {
    nanos: u64,
    recent: std::sync::atomic::AtomicU64,
}

impl SlotLength {
    /// The slots of a window of length `window` (at least `SLOTS` ns).
    pub(crate) fn new(window: Duration) -> Self {
        let nanos = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        Self { nanos: (nanos / SLOTS_U64).max(1), recent: std::sync::atomic::AtomicU64::new(0) }
    }

    /// The slot number (epoch) of the instant `nanos` after the owner's origin
    /// (see [`nanos_since`]): `nanos / slot length`.
    pub(crate) fn epoch(&self, nanos: u64) -> u64 {
        let recent = self.recent.load(Ordering::Relaxed);
        // `recent` came from a division, so `recent · length` cannot
        // overflow.
        if nanos.checked_sub(recent * self.nanos).is_some_and(|offset| offset < self.nanos) {
            return recent;
        }
        let epoch = nanos / self.nanos;
        self.recent.store(epoch, Ordering::Relaxed);
        epoch
    }
}

/// Nanoseconds from `origin` to `now` (zero if `now` is earlier), as the plain
/// integer every time comparison of the guards works in: one subtraction of
/// instants per clock read, and no `Duration` or `u128` arithmetic after it.
/// Saturates after 584 years.
pub(crate) fn nanos_since(origin: Instant, now: Instant) -> u64 {
    let elapsed = now.saturating_duration_since(origin);
    elapsed.as_secs().saturating_mul(1_000_000_000).saturating_add(u64::from(elapsed.subsec_nanos()))
}

impl<const K: usize> SlottedWindow<K> {
    /// An empty window of length `window`.
    ///
    /// `window` must be at least `SLOTS` nanoseconds; the builders validate far
    /// stricter bounds before calling this.
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            slot: SlotLength::new(window),
            slots: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }

    /// The slot number (epoch) of the instant `nanos` after the owner's origin
    /// (see [`nanos_since`]).
    pub(crate) fn epoch(&self, nanos: u64) -> u64 {
        self.slot.epoch(nanos)
    }

    /// Adds `delta` to `counter` in the slot of `epoch`, saturating at the
    /// counter's maximum.
    pub(crate) fn add(&self, epoch: u64, counter: usize, delta: u32) {
        let cell = self.cell(epoch, counter);
        let lap = lap_of(epoch);
        // `fetch_update` retries the CAS until it lands; the closure never refuses.
        let _ = cell.fetch_update(ORDER, ORDER, |word| Some(bump_saturating(word, lap, delta)));
    }

    /// Sums of every counter over the slots still inside the window that ends
    /// in `epoch`. Slots written by a thread that is already in a later epoch
    /// count too: they hold real, recent events.
    pub(crate) fn totals(&self, epoch: u64) -> [u64; K] {
        let mut sums = [0_u64; K];
        let (lap, current) = (lap_of(epoch), slot_of(epoch));
        for (index, slot) in self.slots.iter().enumerate() {
            // The live epochs are `epoch - SLOTS + 1 ..= epoch`: the slots up
            // to the current one are live from this lap on, the ones after it
            // from the previous lap on. Later laps (a thread ahead of this
            // one) count too.
            let oldest_live_lap = lap.wrapping_sub(u32::from(index > current));
            for (sum, cell) in sums.iter_mut().zip(slot) {
                let word = cell.load(ORDER);
                let live = lap_offset(word, oldest_live_lap) >= 0;
                *sum += u64::from(count_of(word)) * u64::from(live);
            }
        }
        sums
    }

    /// Empties the window. An update racing with the reset may survive it; it
    /// was made at the moment of the reset, so either outcome is truthful.
    pub(crate) fn clear(&self) {
        for cell in self.slots.iter().flatten() {
            cell.store(0, ORDER);
        }
    }

    fn cell(&self, epoch: u64, counter: usize) -> &AtomicU64 {
        &self.slots[slot_of(epoch)][counter]
    }
}

/// Bits of [`Ledger::head`] holding the current slot's count; the epoch is in
/// the 36 bits above (unambiguous for 2^36 slots, over 200 years at the
/// shortest slot).
const HEAD_COUNT_BITS: u32 = 28;
const HEAD_COUNT_MAX: u64 = (1 << HEAD_COUNT_BITS) - 1;
const HEAD_EPOCH_MASK: u64 = (1 << (64 - HEAD_COUNT_BITS)) - 1;

/// A sliding window of one counter that is only ever *reserved* into: a
/// caller decides on the window's total and adds one only if nobody added
/// since, in one compare-exchange. The retry budget's withdrawals.
///
/// The current slot's count lives in one `head` word (its epoch and its
/// count), which every reservation compare-exchanges: reservations are
/// totally ordered, whichever slot their callers think it is, so the window
/// never holds more than the total a reservation was decided on plus one.
/// A reservation in a later slot first *retires* the head's count into a
/// ring of past slots, then replaces the head. The ring's words pack the
/// slot's lap and count like [`SlottedWindow`]'s; a slot is retired with a
/// `fetch_max`, so a retirer that lost the race to a newer head can only
/// write a count the winner has already written or exceeded.
///
/// Once the head has reached epoch `e`, the ring's slots for earlier epochs
/// never change again (until recycled a lap later), so their sum for the
/// window ending at `e` is computed once per slot and remembered in
/// `retired`, tagged like the head.
#[derive(Debug)]
pub(crate) struct Ledger {
    /// Written by every reservation: alone on its cache lines, so that the
    /// reads of the other words, written once per slot, stay local.
    head: CachePadded<AtomicU64>,
    ring: CachePadded<[AtomicU64; SLOTS]>,
    /// The ring's sum for the window ending at the epoch in its high bits,
    /// that slot excluded; only stored when it fits the low bits.
    retired: AtomicU64,
}

/// What became of a [`Ledger::reserve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reserved {
    /// Reserved.
    Yes,
    /// Something was reserved since the reading: read again, decide again.
    Raced,
    /// The slot holds all it can count (2^28 - 1): refused.
    Full,
}

/// A [`Ledger`]'s state as one reservation sees it: the epoch it decides in
/// and the count the window holds there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    /// The epoch the decision is made in: the caller's, or the head's when a
    /// caller lags behind it (every reservation lands in the head's slot or a
    /// later one, so the head's epoch never moves back).
    pub(crate) epoch: u64,
    /// Reservations inside the window ending at `epoch`.
    pub(crate) total: u64,
    head: u64,
}

impl Default for Ledger {
    fn default() -> Self {
        Self {
            head: CachePadded(AtomicU64::new(0)),
            ring: CachePadded(std::array::from_fn(|_| AtomicU64::new(0))),
            retired: AtomicU64::new(0),
        }
    }
}

impl Ledger {
    /// The window as of `epoch` (or the head's epoch, if later), for deciding
    /// whether to [`reserve`](Self::reserve).
    pub(crate) fn read(&self, epoch: u64) -> Reading {
        self.read_from(epoch, self.head.load(ORDER))
    }

    fn read_from(&self, epoch: u64, head: u64) -> Reading {
        let (head_epoch, count) = unpack_head(head);
        // How far the caller is ahead of the head, in the head's 36 bits.
        let ahead = (epoch & HEAD_EPOCH_MASK).wrapping_sub(head_epoch) & HEAD_EPOCH_MASK;
        if ahead == 0 {
            return Reading { epoch, total: self.retired(epoch) + count, head };
        }
        if ahead >= 1 << (63 - HEAD_COUNT_BITS) {
            // The caller lags behind the head: decide in the head's epoch.
            let epoch = epoch.wrapping_add(ahead.wrapping_neg() & HEAD_EPOCH_MASK);
            return Reading { epoch, total: self.retired(epoch) + count, head };
        }
        // The head's slot is over. Its count is the ring's to hold from now
        // on, whether or not this caller's reservation goes through.
        let head_epoch = epoch.wrapping_sub(ahead);
        if count > 0 && ahead < SLOTS_U64 {
            // At most HEAD_COUNT_MAX, so the cast cannot truncate.
            self.ring[slot_of(head_epoch)].fetch_max(pack(lap_of(head_epoch), count as u32), ORDER);
        }
        Reading { epoch, total: self.ring_total(epoch), head }
    }

    /// Adds one in `reading.epoch` if nothing was reserved since `reading`
    /// was taken.
    pub(crate) fn reserve(&self, reading: Reading) -> Reserved {
        let (head_epoch, count) = unpack_head(reading.head);
        let same_slot = head_epoch == reading.epoch & HEAD_EPOCH_MASK;
        let count = if same_slot { count } else { 0 };
        if count >= HEAD_COUNT_MAX {
            return Reserved::Full;
        }
        let next = pack_head(reading.epoch, count + 1);
        match self.head.compare_exchange(reading.head, next, ORDER, ORDER) {
            Ok(_) => Reserved::Yes,
            Err(_) => Reserved::Raced,
        }
    }

    /// The ring's sum for the window ending at `epoch`, that slot excluded
    /// (it is the head's, or expired): remembered per slot, see the type docs.
    /// Only called once the head has reached `epoch`.
    fn retired(&self, epoch: u64) -> u64 {
        let tag = epoch & HEAD_EPOCH_MASK;
        let word = self.retired.load(ORDER);
        if word >> HEAD_COUNT_BITS == tag {
            return word & HEAD_COUNT_MAX;
        }
        let total = self.ring_total(epoch);
        if total <= HEAD_COUNT_MAX {
            self.retired.store(pack_head(epoch, total), ORDER);
        }
        total
    }

    /// Sum of the ring's slots live in the window ending at `epoch`, that
    /// epoch's own slot excluded.
    fn ring_total(&self, epoch: u64) -> u64 {
        let (lap, current) = (lap_of(epoch), slot_of(epoch));
        self.ring
            .iter()
            .enumerate()
            .filter(|&(index, _)| index != current)
            .map(|(index, cell)| {
                let word = cell.load(ORDER);
                let oldest_live_lap = lap.wrapping_sub(u32::from(index > current));
                u64::from(count_of(word)) * u64::from(lap_offset(word, oldest_live_lap) >= 0)
            })
            .sum()
    }

    /// The window's total as of `epoch`.
    #[cfg(test)]
    pub(crate) fn total(&self, epoch: u64) -> u64 {
        self.read(epoch).total
    }
}

fn pack_head(epoch: u64, count: u64) -> u64 {
    ((epoch & HEAD_EPOCH_MASK) << HEAD_COUNT_BITS) | count
}

fn unpack_head(word: u64) -> (u64, u64) {
    (word >> HEAD_COUNT_BITS, word & HEAD_COUNT_MAX)
}

fn slot_of(epoch: u64) -> usize {
    // The remainder is below SLOTS, so it always fits.
    usize::try_from(epoch % SLOTS_U64).unwrap_or(0)
}

fn lap_of(epoch: u64) -> u32 {
    // Truncation is intended: laps are compared with wrapping arithmetic.
    (epoch / SLOTS_U64) as u32
}

fn lap_of_word(word: u64) -> u32 {
    (word >> 32) as u32
}

fn count_of(word: u64) -> u32 {
    // Truncation is intended: the count lives in the low half.
    word as u32
}

fn pack(lap: u32, count: u32) -> u64 {
    (u64::from(lap) << 32) | u64::from(count)
}

/// How many laps `word` is ahead of `lap` (negative: behind).
fn lap_offset(word: u64, lap: u32) -> i32 {
    // Reinterpreting the wrapped difference as signed is the point.
    lap_of_word(word).wrapping_sub(lap) as i32
}

/// The word after adding `delta` in lap `lap`, or `None` on overflow.
///
/// A word from an older lap is stale and restarts at `delta`. A word from a
/// *newer* lap means this thread is lagging behind another; its event is added
/// to the newer slot, which keeps it inside the window a little longer, never
/// shorter.
fn bump_checked(word: u64, lap: u32, delta: u32) -> Option<u64> {
    if lap_offset(word, lap) < 0 {
        return Some(pack(lap, delta));
    }
    let count = count_of(word).checked_add(delta)?;
    Some(pack(lap_of_word(word), count))
}

fn bump_saturating(word: u64, lap: u32, delta: u32) -> u64 {
    bump_checked(word, lap, delta).unwrap_or(word | u64::from(u32::MAX))
}

#[cfg(test)]
mod tests;
