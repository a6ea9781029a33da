//! Retries for job queues: the policy without the loop.
//!
//! A worker that failed a job does not sleep; it requeues the job with a run-at
//! time, or moves it to a dead-letter queue. [`JobPolicy::schedule`] answers which,
//! from what the queue stored about the job.
//!
//! Job retries often span days. A [`Policy`] bounds every duration by
//! [`MAX_DURATION`](crate::MAX_DURATION) (one day), because a process that sleeps
//! longer is almost certainly misconfigured; a [`JobPolicy`], built with
//! [`PolicyBuilder::build_for_jobs`](crate::PolicyBuilder::build_for_jobs), allows
//! up to [`MAX_JOB_DURATION`] (28 days) and can only
//! schedule, never sleep.
//!
//! # The job key of the running handler
//!
//! The job key of the handler running on this task, and a count of the calls
//! it has made: what lets an HTTP call inside a job's handler carry an
//! idempotency key derived from the job's own key, without the handler
//! passing anything down.
//!
//! A job worker (`retryscope-jobs`) wraps each execution of a handler in
//! [`JobKeyScope`]; while that future is polled, the scope is this thread's,
//! and [`next_call`] hands out the job key with the next ordinal (1, 2, 3, …).
//! The HTTP integrations ask for one for each request that needs a key
//! (`retryscope-http`'s `IdempotencyKeys`), so the handler's first keyed POST
//! is call 1 of its job on every run, and a server that stores keys replays
//! the one that completed before a crash.
//!
//! **What keeps the ordinals stable**: the handler makes its keyed calls in
//! the same order on every run. **What breaks it**:
//! - a call made in a spawned task (`tokio::spawn`), or by a client that
//!   runs its calls on a task of its own (a tower `Buffer` around the retry
//!   layer): the scope is the polled future's, and does not follow it to
//!   another task, so such a call gets no derived key;
//! - calls reordered or made conditionally from one run to the next (on the
//!   clock, on data that changed): call *n* then names another request;
//! - concurrent calls (`join!`, `select!`) whose order varies: the ordinal
//!   is taken when a call decides its key, at its first poll, so calls
//!   started together are numbered in the order they are first polled.
//!
//! Only a thread-local is read when no scope is set: code outside a job
//! pays one thread-local read per keyed request. No runtime is needed.
//!
//! ```
//! use retryscope::jobs::{JobKeyScope, next_call};
//!
//! # futures_executor::block_on(async {
//! assert!(next_call().is_none()); // outside any job
//! let calls = JobKeyScope::new("order-7781".into(), async {
//!     let first = next_call().expect("inside the job");
//!     let second = next_call().expect("inside the job");
//!     (first.ordinal(), second.ordinal(), second.job_key().to_owned())
//! })
//! .await;
//! assert_eq!(calls, (1, 2, "order-7781".to_owned()));
//! # });
//! ```

use crate::budget::RetryCause;
use crate::outcome::StopReason;
use crate::policy::{MAX_JOB_DURATION, Policy, PolicyBuilder, PolicyError};
use crate::random::JitterRng;
use crate::verdict::{DelaySource, ErrorType, Hint};
use crate::wait::{Curve, next_wait};
use std::time::{Duration, SystemTime};

mod key;

pub use key::{JobCall, JobKeyScope, next_call};

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
    /// The failure's `error.type`, when the queue knows it: a throttling answer
    /// (429, `RESOURCE_EXHAUSTED`) waits on the policy's throttled curve
    /// ([`PolicyBuilder::throttled_base_delay`]), anything else (and `None`)
    /// on its transient one.
    pub error: Option<ErrorType>,
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

impl PolicyBuilder {
    /// Checks the settings for a job queue, where durations may reach
    /// [`MAX_JOB_DURATION`], and returns a policy that can only
    /// [`schedule`](crate::jobs::JobPolicy::schedule) jobs: the engine, which
    /// sleeps in the process, never sees it.
    ///
    /// ```
    /// use retryscope::{MAX_DURATION, Policy};
    /// use std::time::Duration;
    ///
    /// const DAY: Duration = Duration::from_secs(24 * 60 * 60);
    /// let weekly = Policy::builder().base_delay(Duration::from_secs(60)).max_delay(7 * DAY).no_deadline();
    /// assert!(weekly.build().is_err()); // a retry loop sleeping for a week is a mistake
    /// let jobs = weekly.build_for_jobs()?; // a job queue storing a run-at time is not
    /// # assert!(7 * DAY > MAX_DURATION);
    /// # Ok::<(), retryscope::PolicyError>(())
    /// ```
    pub fn build_for_jobs(self) -> Result<crate::jobs::JobPolicy, PolicyError> {
        self.validate(MAX_JOB_DURATION).map(crate::jobs::JobPolicy::new)
    }
}

/// A policy for job queues, whose delays and deadline may reach
/// [`MAX_JOB_DURATION`] (28 days). It schedules jobs and
/// nothing else: the retry engine takes a [`Policy`], whose one-day bound guards
/// processes that sleep against unit mistakes.
///
/// ```
/// use retryscope::jobs::{JobFailure, Schedule};
/// use retryscope::{Jitter, JitterRng, Policy};
/// use std::time::{Duration, SystemTime};
///
/// const HOUR: Duration = Duration::from_secs(60 * 60);
/// let policy = Policy::builder()
///     .max_attempts(10)
///     .base_delay(HOUR)
///     .multiplier(3.0)
///     .max_delay(48 * HOUR)
///     .deadline(14 * 24 * HOUR)
///     .jitter(Jitter::None)
///     .build_for_jobs()?;
/// let now = SystemTime::now();
/// let failure = JobFailure { attempt: 5, previous_delay: Some(27 * HOUR), first_attempt_at: now - 40 * HOUR, hint: None, error: None };
/// match policy.schedule(&failure, now, &mut JitterRng::from_entropy()) {
///     Schedule::RetryAt { delay, .. } => assert_eq!(delay, 48 * HOUR), // 81 h, capped at two days
///     Schedule::DeadLetter(reason) => panic!("{reason}"),
/// }
/// # Ok::<(), retryscope::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobPolicy(Policy);

impl JobPolicy {
    pub(crate) fn new(policy: Policy) -> Self {
        Self(policy)
    }

    /// Decides when a transiently failed job runs again, or that it is dead.
    /// Permanent failures need no policy: dead-letter them directly. Any
    /// [`Policy`] schedules jobs through this type (`JobPolicy::from(policy)`).
    ///
    /// ```
    /// use retryscope::jobs::{JobFailure, Schedule};
    /// use retryscope::{Jitter, JitterRng, Policy, StopReason};
    /// use std::time::{Duration, SystemTime};
    ///
    /// let policy = Policy::builder().max_attempts(3).jitter(Jitter::None).no_deadline().build_for_jobs()?;
    /// let now = SystemTime::now();
    /// let mut rng = JitterRng::seeded(1);
    /// let failure = JobFailure { attempt: 2, previous_delay: Some(Duration::from_millis(200)), first_attempt_at: now, hint: None, error: None };
    /// match policy.schedule(&failure, now, &mut rng) {
    ///     Schedule::RetryAt { delay, .. } => assert_eq!(delay, Duration::from_millis(400)),
    ///     Schedule::DeadLetter(reason) => panic!("{reason}"),
    /// }
    /// let last = JobFailure { attempt: 3, ..failure };
    /// assert_eq!(policy.schedule(&last, now, &mut rng), Schedule::DeadLetter(StopReason::AttemptsExhausted));
    /// # Ok::<(), retryscope::PolicyError>(())
    /// ```
    pub fn schedule(&self, failure: &JobFailure, now: SystemTime, rng: &mut JitterRng) -> Schedule {
        schedule(&self.0, failure, now, rng)
    }

    /// Attempts allowed, counting the first.
    pub const fn max_attempts(&self) -> u32 {
        self.0.max_attempts()
    }

    /// The total time allowed from the first attempt, if bounded.
    pub const fn deadline(&self) -> Option<Duration> {
        self.0.deadline()
    }
}

impl From<Policy> for JobPolicy {
    /// Every policy is a valid job policy: its bounds are the tighter ones.
    fn from(policy: Policy) -> Self {
        Self(policy)
    }
}

fn schedule(policy: &Policy, failure: &JobFailure, now: SystemTime, rng: &mut JitterRng) -> Schedule {
    // A job stores only its previous delay, not whether a pushback set it, so
    // its curve never restarts: retry `n` is step `n - 1`.
    let curve = Curve::resumed(failure.attempt.saturating_sub(1), failure.previous_delay);
    // A clock that stepped backwards counts as no time elapsed, never as a panic.
    let elapsed = now.duration_since(failure.first_attempt_at).unwrap_or(Duration::ZERO);
    let cause = failure.error.map_or(RetryCause::Transient, RetryCause::of);
    match next_wait(policy, failure.attempt, cause, curve, elapsed, failure.hint, rng) {
        Ok((delay, source)) => match now.checked_add(delay) {
            Some(at) => Schedule::RetryAt { at, delay, source },
            // A run-at time past what SystemTime can hold will never come.
            None => Schedule::DeadLetter(StopReason::DeadlineExceeded),
        },
        Err(reason) => Schedule::DeadLetter(reason),
    }
}
