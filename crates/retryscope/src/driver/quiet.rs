//! The quiet first attempt (see [the driver](super)): started with only
//! what must happen before it, booked only if it fails.

use super::{Driver, Started};
use crate::guard::{Attempt, End};
use crate::observe::Observer;
use crate::outcome::StopReason;
use std::time::{Duration, Instant};

impl<O: Observer> Driver<'_, O> {
    /// Starts the next attempt at `now`, or says why none may start.
    ///
    /// The first attempt of a quiet operation (a silent observer, no breaker)
    /// starts with only what must happen before it: the budget counts the
    /// request. The rest of its bookkeeping matters only if it fails, and
    /// [`book_quiet_attempt`](Self::book_quiet_attempt) does it then; a success
    /// needs only [`quiet_success`](Self::quiet_success).
    ///
    /// With a pacer, the front end asks [`pace`](Self::pace) first.
    #[inline]
    pub(crate) fn start_attempt(&mut self, now: Instant) -> Result<Started, StopReason> {
        match self.begin_quietly(now) {
            Some(limit) => Ok(Started { limit, quiet: Some(now) }),
            None => Ok(Started { limit: self.begin_attempt(now)?, quiet: None }),
        }
    }

    /// The quiet first attempt started at `started` without this driver (the
    /// async front end's fast path, which counted the request): take over
    /// from there, as [`start_attempt`](Self::start_attempt) would have left
    /// it. Returns the attempt's time limit, if any.
    pub(crate) fn resume_quiet(&mut self, started: Instant) -> Option<Duration> {
        self.started = Some(started);
        self.attempt_limit(self.setup.policy.deadline())
    }

    /// Starts a quiet first attempt; `None` when this attempt is not one.
    #[inline]
    fn begin_quietly(&mut self, now: Instant) -> Option<Option<Duration>> {
        // Not once the operation is observed: a pace that held the first
        // attempt began it (and the pacer, which may have cleared it, is the
        // only guard a quiet operation asks).
        if !self.quiet || self.attempts > 0 || self.operation.is_some() {
            return None;
        }
        self.count_request(now);
        Some(self.attempt_limit(self.setup.policy.deadline()))
    }

    /// The quiet first attempt succeeded: the operation is over, and its
    /// guards hear so. A quiet operation's are a budget and a pacer at most
    /// (see [`Setup::admits`](super::Setup::admits)), whose permits for a
    /// first attempt hold nothing to hand back: settled as such, without
    /// moving the admission out.
    pub(crate) fn quiet_success(&mut self) {
        let guards = &self.setup.dependency;
        if guards.is_guarded() {
            guards.settle_quiet(Attempt::first(), End::Succeeded);
            guards.call_finished();
        }
    }

    /// The quiet first attempt, started at `started`, did not succeed: book it
    /// as [`begin_attempt`](Self::begin_attempt) would have, so that
    /// [`end_attempt`](Self::end_attempt) can judge it.
    pub(crate) fn book_quiet_attempt(&mut self, started: Instant) {
        // Neither a breaker (a quiet operation has none) nor the deadline (it
        // has only just started) can refuse a first attempt.
        if let Err(reason) = self.begin_attempt(started) {
            unreachable_refusal(reason)
        }
    }
}

#[cold]
fn unreachable_refusal(reason: StopReason) -> ! {
    // See `book_quiet_attempt`: reaching this is a bug in the driver, not
    // something a caller can provoke.
    unreachable!("a quiet first attempt was refused: {reason:?}")
}
