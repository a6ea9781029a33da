//! The atomics the lock-free guards are built from, and the lanes that keep
//! threads off each other's cache lines.
//!
//! Normally std's. Built with `RUSTFLAGS="--cfg retryscope_loom"`, loom's, so
//! that `tests/loom.rs` can check the budget, its window and the breaker under
//! every interleaving of a few threads. The cfg has its own name because
//! `--cfg loom` would also switch tokio to loom, which tokio only supports in its
//! own test suite.

#[cfg(retryscope_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, fence};
pub(crate) use std::sync::atomic::Ordering;
#[cfg(not(retryscope_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, fence};

/// The most lanes a guard spreads its hot counters over.
const MAX_LANES: usize = 16;

/// How many lanes a guard built now should have: a power of two, one per
/// hardware thread up to [`MAX_LANES`], so that threads on different cores
/// mostly write different cache lines. Two under loom, so that the models
/// explore both threads sharing a lane and threads on different lanes.
pub(crate) fn lane_count() -> usize {
    if cfg!(retryscope_loom) {
        return 2;
    }
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get).next_power_of_two().min(MAX_LANES)
}

/// A number fixed for the calling thread's lifetime, handed out round-robin to
/// threads as they first ask: `lane_hint() % lane_count()` spreads the threads
/// of a pool evenly over the lanes.
#[cfg(not(retryscope_loom))]
pub(crate) fn lane_hint() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;

    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static LANE: Cell<Option<usize>> = const { Cell::new(None) };
    }
    LANE.with(|lane| {
        lane.get().unwrap_or_else(|| {
            let fresh = NEXT.fetch_add(1, Ordering::Relaxed);
            lane.set(Some(fresh));
            fresh
        })
    })
}

/// Loom's version: the counter and the thread-locals are loom's, so that every
/// execution of a model hands out the same lanes in the same order.
#[cfg(retryscope_loom)]
pub(crate) fn lane_hint() -> usize {
    loom::lazy_static! {
        static ref NEXT: loom::sync::atomic::AtomicUsize = loom::sync::atomic::AtomicUsize::new(0);
    }
    loom::thread_local! {
        static LANE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    LANE.with(|lane| *lane)
}

/// A value alone on its cache lines: 128 bytes covers the adjacent-line
/// prefetcher of x86 and the 128-byte lines of Apple's cores.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(all(test, not(retryscope_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_lane_and_threads_get_different_ones() {
        let mine = lane_hint();
        assert_eq!(lane_hint(), mine);
        let theirs: Vec<usize> =
            (0..3).map(|_| std::thread::spawn(lane_hint).join().expect("no panic")).collect();
        // Handed out round-robin: no two threads share a hint.
        let mut all = theirs.clone();
        all.push(mine);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 4, "{mine} and {theirs:?}");
    }

    #[test]
    fn lane_counts_are_powers_of_two_within_bounds() {
        let lanes = lane_count();
        assert!(lanes.is_power_of_two() && lanes <= MAX_LANES, "{lanes}");
    }

    #[test]
    fn padded_values_sit_on_their_own_cache_lines() {
        assert_eq!(std::mem::align_of::<CachePadded<u8>>(), 128);
        let pair = [CachePadded(1_u64), CachePadded(2_u64)];
        let gap = std::ptr::from_ref(&pair[1]) as usize - std::ptr::from_ref(&pair[0]) as usize;
        assert_eq!((gap, *pair[1]), (128, 2));
    }
}
