//! Virtual time and the discrete-event queue every simulation runs on.
//!
//! Time is an integer count of nanoseconds, so it orders exactly and prints the
//! same on every machine. Events are small `Copy` values kept in one binary
//! heap; two events due at the same instant come out in the order they were
//! scheduled (a sequence number breaks the tie), which keeps runs deterministic
//! without ever comparing the events themselves.

use retryscope::clock::ManualClock;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

/// A point in virtual time: nanoseconds since the simulation started.
pub type Nanos = u64;

/// Nanoseconds per millisecond.
pub const NANOS_PER_MILLI: f64 = 1e6;
/// Nanoseconds per second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// `d` in nanoseconds, saturating (virtual time never gets near 584 years).
pub fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `ms` milliseconds in nanoseconds, rounded; negative or NaN inputs give 0.
pub fn from_millis_f64(ms: f64) -> Nanos {
    // `as` saturates for floats: negative and NaN become 0, huge values u64::MAX.
    (ms * NANOS_PER_MILLI).round() as u64
}

/// `s` seconds in nanoseconds, rounded; negative or NaN inputs give 0.
pub fn from_secs_f64(s: f64) -> Nanos {
    (s * 1e9).round() as u64
}

/// A nanosecond time in milliseconds, for reporting.
pub fn to_millis(t: Nanos) -> f64 {
    t as f64 / NANOS_PER_MILLI
}

/// A queue of events in virtual time, popped earliest first.
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_seq: u64,
    now: Nanos,
}

impl<E> EventQueue<E> {
    /// An empty queue at time zero with room for `capacity` pending events.
    pub fn with_capacity(capacity: usize) -> Self {
        Self { heap: BinaryHeap::with_capacity(capacity), next_seq: 0, now: 0 }
    }

    /// Empties the queue and rewinds time to zero, keeping the allocation, so
    /// one queue serves many trials.
    pub fn reset(&mut self) {
        self.heap.clear();
        self.next_seq = 0;
        self.now = 0;
    }

    /// The time of the event popped last (zero before the first).
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Schedules `event` at absolute time `at`, which must not be in the past.
    pub fn schedule(&mut self, at: Nanos, event: E) {
        debug_assert!(at >= self.now, "event scheduled in the past");
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry { at, seq, event });
    }

    /// Schedules `event` `delay` nanoseconds after now.
    pub fn schedule_in(&mut self, delay: Nanos, event: E) {
        self.schedule(self.now.saturating_add(delay), event);
    }

    /// Removes the earliest event, moves time to it and returns both.
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        let entry = self.heap.pop()?;
        self.now = entry.at;
        Some((entry.at, entry.event))
    }

    /// Events still pending.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// One scheduled event. Ordered by time, then by scheduling order, reversed so
/// that the max-heap pops the earliest first.
#[derive(Debug)]
struct Entry<E> {
    at: Nanos,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The engine's [`ManualClock`], kept in step with virtual time so budgets and
/// breakers see simulated seconds pass.
#[derive(Debug, Clone, Default)]
pub struct VirtualClock {
    clock: ManualClock,
    at: Nanos,
}

impl VirtualClock {
    /// A clock at virtual time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle to give to the engine's budgets and breakers; it shares this
    /// clock's time.
    pub fn handle(&self) -> ManualClock {
        self.clock.clone()
    }

    /// Moves the clock forward to `t` (never backward).
    pub fn advance_to(&mut self, t: Nanos) {
        if t > self.at {
            self.clock.advance(Duration::from_nanos(t - self.at));
            self.at = t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_order_and_ties_in_scheduling_order() {
        let mut q = EventQueue::with_capacity(4);
        q.schedule(20, 'c');
        q.schedule(10, 'a');
        q.schedule(10, 'b');
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, [(10, 'a'), (10, 'b'), (20, 'c')]);
        assert_eq!(q.now(), 20);
    }
}
