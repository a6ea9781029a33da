//! The schedule harness: the exact waits a [`Policy`] produces for a script
//! of failures, with the jitter's generator seeded and time driven by hand.
//!
//! The real retry loop runs (the engine's blocking front end, the same driver
//! an awaited retry uses) on a [`ManualClock`] that each wait advances, so a
//! deadline, `Retry-After` hints and the attempt limit act as they would in
//! production, in no time and without a runtime. Same policy, same script,
//! same seed: the same schedule, to the nanosecond.
//!
//! ```
//! use retryscope::{Jitter, Policy};
//! use retryscope_testkit::schedule::schedule_of;
//! use std::time::Duration;
//!
//! let policy = Policy::builder()
//!     .max_attempts(4)
//!     .base_delay(Duration::from_millis(100))
//!     .jitter(Jitter::None)
//!     .build()?;
//! let ms = |n| Duration::from_millis(n);
//! assert_eq!(schedule_of(policy, 10), [ms(100), ms(200), ms(400)]);
//! # Ok::<(), retryscope::PolicyError>(())
//! ```
//!
//! With jitter, a seed fixes the sequence; [`Schedule`] scripts server hints
//! and reads how the run ended:
//!
//! ```
//! use retryscope::{Hint, Policy, StopReason};
//! use retryscope_testkit::schedule::{Schedule, Step};
//! use std::time::Duration;
//!
//! let policy = Policy::builder().max_attempts(3).base_delay(Duration::from_millis(100)).build()?;
//! let script = [Step::Fail, Step::Hint(Hint::retry_after(Duration::from_secs(2)))];
//! let run = Schedule::of(policy).seed(7).script(script).run();
//! assert_eq!((run.attempts, run.stop), (3, Some(StopReason::AttemptsExhausted)));
//! assert!(run.waits[0] <= Duration::from_millis(100));
//! // A Retry-After is a floor, with at most 5 s of spread above it.
//! assert!((Duration::from_secs(2)..=Duration::from_secs(7)).contains(&run.waits[1]));
//! assert_eq!(run, Schedule::of(policy).seed(7).script(script).run(), "same seed, same schedule");
//!
//! // A 20 s Retry-After does not fit in the default 15 s deadline: no wait, a stop.
//! let late = Schedule::of(policy).script([Step::Hint(Hint::retry_after(Duration::from_secs(20)))]).run();
//! assert!(matches!(late.stop, Some(StopReason::HintTooLong { .. })));
//! assert_eq!((late.attempts, late.waits.len()), (1, 0));
//! # Ok::<(), retryscope::PolicyError>(())
//! ```

use retryscope::clock::ManualClock;
use retryscope::{ErrorType, Hint, Policy, Retryable, StopReason, Verdict};
use std::time::Duration;

/// The seed [`schedule_of`] uses, and [`Schedule`] unless told another.
pub const DEFAULT_SEED: u64 = 0;

/// What one attempt of the script answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// A transient failure (a reset connection) without a hint.
    Fail,
    /// A transient failure carrying a server's hint (`Retry-After`,
    /// `RateLimit`, gRPC pushback).
    Hint(Hint),
    /// A permanent failure: the policy must stop.
    Permanent,
    /// Success.
    Succeed,
}

/// The waits of `policy` over `failures` transient failures followed by a
/// success (or by the policy giving up first), seeded with [`DEFAULT_SEED`].
pub fn schedule_of(policy: Policy, failures: u32) -> Vec<Duration> {
    Schedule::of(policy).failures(failures).run().waits
}

/// A run of a policy to set up: its script, its seed.
#[derive(Debug, Clone)]
#[must_use]
pub struct Schedule {
    policy: Policy,
    seed: u64,
    script: Vec<Step>,
    /// What every attempt after the script answers.
    then: Step,
}

/// What a [`Schedule`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Run {
    /// Every wait between two attempts, in order.
    pub waits: Vec<Duration>,
    /// How many attempts ran.
    pub attempts: u32,
    /// Why the policy gave up, or `None` when an attempt succeeded.
    pub stop: Option<StopReason>,
    /// The time the whole run took on the manual clock (the waits' sum).
    pub elapsed: Duration,
}

impl Schedule {
    /// `policy` against a dependency that fails transiently forever, seeded
    /// with [`DEFAULT_SEED`].
    pub fn of(policy: Policy) -> Self {
        Self { policy, seed: DEFAULT_SEED, script: Vec::new(), then: Step::Fail }
    }

    /// Seeds the jitter's generator.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// `failures` transient failures, then success.
    pub fn failures(mut self, failures: u32) -> Self {
        self.script = vec![Step::Fail; failures as usize];
        self.then = Step::Succeed;
        self
    }

    /// The attempts' answers in order; after them, transient failures.
    pub fn script(mut self, steps: impl IntoIterator<Item = Step>) -> Self {
        self.script = steps.into_iter().collect();
        self.then = Step::Fail;
        self
    }

    /// Runs the policy's retry loop over the script; no real time passes.
    pub fn run(self) -> Run {
        let clock = ManualClock::new();
        let mut waits = Vec::new();
        let mut attempts: u32 = 0;
        let (script, then) = (self.script, self.then);
        let result = (|| {
            let step = script.get(attempts as usize).copied().unwrap_or(then);
            attempts = attempts.saturating_add(1);
            match step {
                Step::Succeed => Ok(()),
                failed => Err(failed),
            }
        })
        .retry(self.policy)
        .seed(self.seed)
        .classify(|result: &Result<(), Step>| match result {
            Ok(()) => Verdict::Success,
            Err(Step::Hint(hint)) => Verdict::Retryable { error: ErrorType::RESET, hint: Some(*hint) },
            Err(Step::Permanent) => Verdict::permanent(ErrorType::OTHER),
            Err(_) => Verdict::retryable(ErrorType::RESET),
        })
        .call_with(&clock, |wait| {
            waits.push(wait);
            clock.advance(wait);
        });
        Run { waits, attempts, stop: result.err().map(|e| e.reason()), elapsed: clock.elapsed() }
    }
}
