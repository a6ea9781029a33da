//! The stateless scheduling API for job queues.

use retryscope::jobs::{JobFailure, Schedule};
use retryscope::{DelaySource, Hint, Jitter, JitterRng, Policy, StopReason};
use std::time::{Duration, SystemTime};

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(5)
        .base_delay(Duration::from_secs(1))
        .max_delay(Duration::from_secs(60))
        .jitter(Jitter::None)
        .deadline(Duration::from_secs(600))
        .build()
        .expect("valid settings")
}

fn failure(attempt: u32, previous: Option<u64>, age_secs: u64, now: SystemTime) -> JobFailure {
    JobFailure {
        attempt,
        previous_delay: previous.map(Duration::from_secs),
        first_attempt_at: now - Duration::from_secs(age_secs),
        hint: None,
    }
}

#[test]
fn each_failure_is_requeued_with_the_next_delay() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut rng = JitterRng::seeded(0);
    let delays: Vec<_> = (1..=4)
        .map(|attempt| match policy().schedule(&failure(attempt, None, 0, now), now, &mut rng) {
            Schedule::RetryAt { at, delay, source } => {
                assert_eq!((at, source), (now + delay, DelaySource::Policy));
                delay.as_secs()
            }
            Schedule::DeadLetter(reason) => panic!("attempt {attempt}: {reason}"),
        })
        .collect();
    assert_eq!(delays, [1, 2, 4, 8]);
}

#[test]
fn the_last_attempt_goes_to_the_dead_letter_queue() {
    let now = SystemTime::now();
    let s = policy().schedule(&failure(5, Some(8), 20, now), now, &mut JitterRng::seeded(0));
    assert_eq!(s, Schedule::DeadLetter(StopReason::AttemptsExhausted));
}

#[test]
fn an_old_job_past_its_deadline_is_dead() {
    let now = SystemTime::now();
    let s = policy().schedule(&failure(2, Some(1), 599, now), now, &mut JitterRng::seeded(0));
    assert_eq!(s, Schedule::DeadLetter(StopReason::DeadlineExceeded));
}

#[test]
fn a_server_hint_sets_the_run_at_time() {
    let now = SystemTime::now();
    let job =
        JobFailure { hint: Some(Hint::retry_after(Duration::from_secs(30))), ..failure(1, None, 0, now) };
    let s = policy().schedule(&job, now, &mut JitterRng::seeded(0));
    let thirty = Duration::from_secs(30);
    assert_eq!(s, Schedule::RetryAt { at: now + thirty, delay: thirty, source: DelaySource::RetryAfter });
}

#[test]
fn a_clock_that_stepped_back_is_not_a_panic() {
    let now = SystemTime::now();
    let job = JobFailure { first_attempt_at: now + Duration::from_secs(3_600), ..failure(1, None, 0, now) };
    assert!(matches!(policy().schedule(&job, now, &mut JitterRng::seeded(0)), Schedule::RetryAt { .. }));
}
