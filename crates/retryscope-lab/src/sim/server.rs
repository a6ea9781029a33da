//! A load-sensitive server: processor sharing whose speed falls with load.
//!
//! Every call needs one unit of work. With `n` calls in flight, all of them
//! progress together at `1 / (base + per_call · n)` units per second, so under
//! steady load a call takes `base + per_call · n`, and a burst of new calls
//! slows down the ones already in flight. Since every call needs the same work
//! and all progress at the same speed, calls finish in arrival order: the
//! server only tracks the cumulative work each call in flight has received
//! (one number) and, per call, the total at which it will be done.
//!
//! The server owns no event queue: after every change it reports when its
//! next call will finish, stamped with a generation, and ignores finishing
//! notices whose generation is stale.

use super::events::{Nanos, from_secs_f64};
use std::collections::VecDeque;
use std::time::Duration;

/// Nanoseconds per second, as a float.
const NANOS_PER_SEC_F64: f64 = 1e9;

/// The server; `J` identifies a call (e.g. request and attempt).
#[derive(Debug, Clone)]
pub struct LoadSensitiveServer<J> {
    base: f64,
    per_call: f64,
    /// Work received by every call in flight since time zero (units).
    received: f64,
    /// When `received` was last brought up to date.
    updated: Nanos,
    /// Calls in flight, in arrival (= completion) order, with the value of
    /// `received` at which each is done.
    calls: VecDeque<(f64, J)>,
    generation: u64,
}

/// When the next call finishes, to be handed back to
/// [`LoadSensitiveServer::finish`] at that time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextFinish {
    /// The virtual time of the next completion.
    pub at: Nanos,
    /// Identifies the server state that predicted it.
    pub generation: u64,
}

impl<J: Copy> LoadSensitiveServer<J> {
    /// An idle server: a lone call takes `base + per_call`.
    pub fn new(base: Duration, per_call: Duration) -> Self {
        Self {
            base: base.as_secs_f64(),
            per_call: per_call.as_secs_f64(),
            received: 0.0,
            updated: 0,
            calls: VecDeque::new(),
            generation: 0,
        }
    }

    /// Calls in flight.
    pub fn in_flight(&self) -> usize {
        self.calls.len()
    }

    /// Starts `call` at `now`; returns the new prediction of the next finish.
    pub fn admit(&mut self, now: Nanos, call: J) -> NextFinish {
        self.catch_up(now);
        self.calls.push_back((self.received + 1.0, call));
        self.predict(now)
    }

    /// Handles a finishing notice: if `generation` is current, removes and
    /// returns the finished call and the prediction of the one after it.
    pub fn finish(&mut self, now: Nanos, generation: u64) -> Option<(J, Option<NextFinish>)> {
        if generation != self.generation {
            return None;
        }
        self.catch_up(now);
        let (_, call) = self.calls.pop_front()?;
        let next = (!self.calls.is_empty()).then(|| self.predict(now));
        Some((call, next))
    }

    /// Units of work per second each call in flight receives.
    fn speed(&self) -> f64 {
        1.0 / (self.base + self.per_call * self.calls.len() as f64)
    }

    fn catch_up(&mut self, now: Nanos) {
        let elapsed = (now - self.updated) as f64 / NANOS_PER_SEC_F64;
        self.received += elapsed * self.speed();
        self.updated = now;
    }

    /// When the first call in flight will finish at the current speed; a new
    /// generation invalidates every earlier prediction.
    fn predict(&mut self, now: Nanos) -> NextFinish {
        self.generation += 1;
        let remaining = self.calls.front().map_or(0.0, |(done_at, _)| (done_at - self.received).max(0.0));
        NextFinish { at: now + from_secs_f64(remaining / self.speed()), generation: self.generation }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_call_takes_base_plus_one_per_call() {
        let mut server = LoadSensitiveServer::new(Duration::from_secs(1), Duration::from_millis(10));
        let next = server.admit(0, 'a');
        assert_eq!(next.at, 1_010_000_000);
        assert_eq!(server.finish(next.at, next.generation), Some(('a', None)));
    }

    #[test]
    fn a_second_call_slows_the_first_and_stale_notices_are_ignored() {
        let mut server = LoadSensitiveServer::new(Duration::from_secs(1), Duration::from_millis(10));
        let first = server.admit(0, 'a');
        // Halfway through 'a', 'b' arrives: 'a' has 0.5 units left at 1/1.02 units/s.
        let second = server.admit(505_000_000, 'b');
        assert_eq!(second.at, 505_000_000 + 510_000_000);
        assert_eq!(server.finish(first.at, first.generation), None);
        let (call, next) = server.finish(second.at, second.generation).expect("current prediction");
        assert_eq!(call, 'a');
        assert!(next.is_some());
    }
}
