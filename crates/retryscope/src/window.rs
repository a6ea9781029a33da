//! A sliding time window of atomic counters, shared by the retry budget and the
//! circuit breaker.
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

use crate::sync::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Number of slots the window is divided into: events expire between
/// `window · (SLOTS - 1) / SLOTS` and `window` after they happened.
pub(crate) const SLOTS: usize = 10;

/// `SLOTS` as the integer type epochs are counted in.
const SLOTS_U64: u64 = SLOTS as u64;

/// Everything below is sequentially consistent: the budget's double-check after
/// a withdrawal relies on a single total order of counter updates and reads, and
/// the hot path is a handful of uncontended atomics, so weaker orderings would
/// buy little.
const ORDER: Ordering = Ordering::SeqCst;

/// Proof that a counter word was changed, precise enough to undo the change.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    slot: usize,
    counter: usize,
    lap: u32,
}

/// `K` counters per slot over a sliding window; see the module docs.
#[derive(Debug)]
pub(crate) struct SlottedWindow<const K: usize> {
    origin: Instant,
    slot_nanos: u64,
    slots: [[AtomicU64; K]; SLOTS],
}

impl<const K: usize> SlottedWindow<K> {
    /// An empty window of length `window`; epochs are counted from `origin`.
    ///
    /// `window` must be at least `SLOTS` nanoseconds; the builders validate far
    /// stricter bounds before calling this.
    pub(crate) fn new(origin: Instant, window: Duration) -> Self {
        let nanos = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        Self {
            origin,
            slot_nanos: (nanos / SLOTS_U64).max(1),
            slots: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }

    /// The slot number (epoch) `now` falls in.
    pub(crate) fn epoch(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(elapsed / u128::from(self.slot_nanos)).unwrap_or(u64::MAX)
    }

    /// Adds `delta` to `counter` in the slot of `epoch`, saturating at the
    /// counter's maximum.
    pub(crate) fn add(&self, epoch: u64, counter: usize, delta: u32) {
        let cell = self.cell(epoch, counter);
        let lap = lap_of(epoch);
        // `fetch_update` retries the CAS until it lands; the closure never refuses.
        let _ = cell.fetch_update(ORDER, ORDER, |word| Some(bump_saturating(word, lap, delta)));
    }

    /// The raw word of `counter` in the slot of `epoch`, to be passed to
    /// [`Self::try_add`] after deciding on a snapshot read *after* this call.
    pub(crate) fn observe(&self, epoch: u64, counter: usize) -> u64 {
        self.cell(epoch, counter).load(ORDER)
    }

    /// Adds `delta` to `counter` in the slot of `epoch` only if the word still
    /// equals `observed`, i.e. nobody else touched it since [`Self::observe`].
    ///
    /// Returns `None` if the word changed or the count would overflow; the caller
    /// then re-reads and decides again.
    pub(crate) fn try_add(&self, epoch: u64, counter: usize, observed: u64, delta: u32) -> Option<Stamp> {
        let lap = lap_of(epoch);
        let next = bump_checked(observed, lap, delta)?;
        self.cell(epoch, counter).compare_exchange(observed, next, ORDER, ORDER).ok()?;
        Some(Stamp { slot: slot_of(epoch), counter, lap: lap_of_word(next) })
    }

    /// Takes back a `delta` added by [`Self::try_add`], unless the slot has been
    /// recycled since (then the addition has already expired with it).
    pub(crate) fn undo(&self, stamp: Stamp, delta: u32) {
        let cell = &self.slots[stamp.slot][stamp.counter];
        let _ = cell.fetch_update(ORDER, ORDER, |word| {
            (lap_of_word(word) == stamp.lap).then(|| pack(stamp.lap, count_of(word).saturating_sub(delta)))
        });
    }

    /// Sums of every counter over the slots still inside the window that ends
    /// in `epoch`. Slots written by a thread that is already in a later epoch
    /// count too: they hold real, recent events.
    pub(crate) fn totals(&self, epoch: u64) -> [u64; K] {
        let mut sums = [0_u64; K];
        let current_lap = lap_of(epoch);
        let oldest_live = i128::from(epoch) - i128::from(SLOTS_U64) + 1;
        for (index, slot) in self.slots.iter().enumerate() {
            for (sum, cell) in sums.iter_mut().zip(slot) {
                let word = cell.load(ORDER);
                if word_epoch(word, current_lap, index) >= oldest_live {
                    *sum += u64::from(count_of(word));
                }
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

/// The full epoch a word in slot `index` was written in, reconstructed from its
/// truncated lap relative to the reader's lap.
fn word_epoch(word: u64, current_lap: u32, index: usize) -> i128 {
    let full_lap = i128::from(current_lap) + i128::from(lap_offset(word, current_lap));
    full_lap * i128::from(SLOTS_U64) + index as i128
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
mod tests {
    use super::*;

    fn window() -> (Instant, SlottedWindow<2>) {
        let origin = Instant::now();
        (origin, SlottedWindow::new(origin, Duration::from_secs(10)))
    }

    #[test]
    fn counts_stay_for_one_window_then_expire() {
        let (origin, w) = window();
        let e0 = w.epoch(origin);
        w.add(e0, 0, 3);
        w.add(e0, 1, 1);
        assert_eq!(w.totals(e0), [3, 1]);
        assert_eq!(w.totals(e0 + 9), [3, 1]);
        assert_eq!(w.totals(e0 + 10), [0, 0]);
        // Writing the recycled slot restarts it.
        w.add(e0 + 10, 0, 2);
        assert_eq!(w.totals(e0 + 10), [2, 0]);
    }

    #[test]
    fn epochs_follow_slot_length() {
        let (origin, w) = window();
        assert_eq!(w.epoch(origin + Duration::from_millis(999)), 0);
        assert_eq!(w.epoch(origin + Duration::from_secs(1)), 1);
        assert_eq!(w.epoch(origin + Duration::from_secs(25)), 25);
    }

    #[test]
    fn try_add_refuses_a_changed_word_and_undo_reverts() {
        let (_, w) = window();
        let seen = w.observe(3, 1);
        w.add(3, 1, 1);
        assert!(w.try_add(3, 1, seen, 1).is_none());
        let seen = w.observe(3, 1);
        let stamp = w.try_add(3, 1, seen, 1);
        assert_eq!(w.totals(3), [0, 2]);
        if let Some(stamp) = stamp {
            w.undo(stamp, 1);
        }
        assert_eq!(w.totals(3), [0, 1]);
    }

    #[test]
    fn undo_after_recycling_is_a_no_op() {
        let (_, w) = window();
        let seen = w.observe(2, 0);
        let stamp = w.try_add(2, 0, seen, 5).expect("fresh word");
        w.add(12, 0, 1);
        w.undo(stamp, 5);
        assert_eq!(w.totals(12), [1, 0]);
    }

    #[test]
    fn counts_saturate_instead_of_wrapping() {
        let (_, w) = window();
        w.add(0, 0, u32::MAX);
        w.add(0, 0, 7);
        assert_eq!(w.totals(0), [u64::from(u32::MAX), 0]);
        let seen = w.observe(0, 0);
        assert!(w.try_add(0, 0, seen, 1).is_none());
    }

    #[test]
    fn lagging_writer_lands_in_the_newer_lap() {
        let (_, w) = window();
        w.add(11, 0, 1);
        // A thread still in epoch 1 writes the same physical slot.
        w.add(1, 0, 1);
        assert_eq!(w.totals(11), [2, 0]);
    }

    #[test]
    fn clear_empties_every_slot() {
        let (_, w) = window();
        for e in 0..10 {
            w.add(e, 0, 1);
        }
        w.clear();
        assert_eq!(w.totals(9), [0, 0]);
    }
}
