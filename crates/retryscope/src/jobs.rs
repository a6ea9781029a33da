//! Retries for job queues: the policy without the loop.
//!
//! A worker that failed a job does not sleep; it requeues the job with a run-at
//! time, or moves it to a dead-letter queue. [`Policy::schedule`] answers which,
//! from what the queue stored about the job.

use crate::driver::next_wait;
use crate::error::StopReason;
use crate::outcome::{DelaySource, Hint};
use crate::policy::Policy;
use crate::random::JitterRng;
use std::time::{Duration, SystemTime};

/// What a queue knows about a job whose latest attempt failed transiently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobFailure {
    /// The attempt that just failed, from 1.
    pub attempt: u32,
    /// The delay the job waited before this attempt (`None` after the first).
    pub previous_delay: Option<Duration>,
    /// When the first attempt ran; the policy's deadline counts from here.
    pub first_attempt_at: SystemTime,
    /// A server hint that came with the failure.
    pub hint: Option<Hint>,
}

/// Where a failed job goes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// Requeue it to run at `at`.
    RetryAt {
        /// When to run the next attempt.
        at: SystemTime,
        /// The delay from now (store it as the next `previous_delay`).
        delay: Duration,
        /// Where the delay came from.
        source: DelaySource,
    },
    /// Give up: move it to the dead-letter queue.
    DeadLetter(StopReason),
}

impl Policy {
    /// Decides when a transiently failed job runs again, or that it is dead.
    /// Permanent failures need no policy: dead-letter them directly.
    ///
    /// ```
    /// use retryscope::jobs::{JobFailure, Schedule};
    /// use retryscope::{Jitter, JitterRng, Policy, StopReason};
    /// use std::time::{Duration, SystemTime};
    ///
    /// let policy = Policy::builder().max_attempts(3).jitter(Jitter::None).no_deadline().build()?;
    /// let now = SystemTime::now();
    /// let mut rng = JitterRng::seeded(1);
    /// let failure = JobFailure { attempt: 2, previous_delay: Some(Duration::from_millis(200)), first_attempt_at: now, hint: None };
    /// match policy.schedule(&failure, now, &mut rng) {
    ///     Schedule::RetryAt { delay, .. } => assert_eq!(delay, Duration::from_millis(400)),
    ///     Schedule::DeadLetter(reason) => panic!("{reason}"),
    /// }
    /// let last = JobFailure { attempt: 3, ..failure };
    /// assert_eq!(policy.schedule(&last, now, &mut rng), Schedule::DeadLetter(StopReason::AttemptsExhausted));
    /// # Ok::<(), retryscope::PolicyError>(())
    /// ```
    pub fn schedule(&self, failure: &JobFailure, now: SystemTime, rng: &mut JitterRng) -> Schedule {
        let previous = failure.previous_delay.unwrap_or(self.base_delay());
        // A clock that stepped backwards counts as no time elapsed, never as a panic.
        let elapsed = now.duration_since(failure.first_attempt_at).unwrap_or(Duration::ZERO);
        match next_wait(self, failure.attempt, previous, elapsed, failure.hint, rng) {
            Ok((delay, source)) => match now.checked_add(delay) {
                Some(at) => Schedule::RetryAt { at, delay, source },
                // A run-at time past what SystemTime can hold will never come.
                None => Schedule::DeadLetter(StopReason::DeadlineExceeded),
            },
            Err(reason) => Schedule::DeadLetter(reason),
        }
    }
}
