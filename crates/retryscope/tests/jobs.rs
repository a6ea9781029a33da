//! The stateless scheduling API for job queues.

use retryscope::jobs::{JobFailure, JobPolicy, Schedule};
use retryscope::{
    DelaySource, ErrorType, Hint, Jitter, JitterRng, MAX_DURATION, MAX_JOB_DURATION, Policy, PolicyBuilder,
    PolicyError, SettingValue, StopReason,
};
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
        error: None,
    }
}

#[test]
fn each_failure_is_requeued_with_the_next_delay() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut rng = JitterRng::seeded(0);
    let delays: Vec<_> = (1..=4)
        .map(|attempt| {
            match JobPolicy::from(policy()).schedule(&failure(attempt, None, 0, now), now, &mut rng) {
                Schedule::RetryAt { at, delay, source } => {
                    assert_eq!((at, source), (now + delay, DelaySource::Policy));
                    delay.as_secs()
                }
                Schedule::DeadLetter(reason) => panic!("attempt {attempt}: {reason}"),
            }
        })
        .collect();
    assert_eq!(delays, [1, 2, 4, 8]);
}

#[test]
fn the_last_attempt_goes_to_the_dead_letter_queue() {
    let now = SystemTime::now();
    let s = JobPolicy::from(policy()).schedule(&failure(5, Some(8), 20, now), now, &mut JitterRng::seeded(0));
    assert_eq!(s, Schedule::DeadLetter(StopReason::AttemptsExhausted));
}

#[test]
fn an_old_job_past_its_deadline_is_dead() {
    let now = SystemTime::now();
    let s =
        JobPolicy::from(policy()).schedule(&failure(2, Some(1), 599, now), now, &mut JitterRng::seeded(0));
    assert_eq!(s, Schedule::DeadLetter(StopReason::DeadlineExceeded));
}

#[test]
fn a_server_hint_sets_the_run_at_time() {
    let now = SystemTime::now();
    let job =
        JobFailure { hint: Some(Hint::retry_after(Duration::from_secs(30))), ..failure(1, None, 0, now) };
    let s = JobPolicy::from(policy()).schedule(&job, now, &mut JitterRng::seeded(0));
    // The hint is a floor with a spread of up to a fifth of it on top (6 s here).
    let Schedule::RetryAt { at, delay, source } = s else { panic!("not scheduled: {s:?}") };
    assert_eq!((at, source), (now + delay, DelaySource::RetryAfter));
    assert!((Duration::from_secs(30)..=Duration::from_secs(36)).contains(&delay), "{delay:?}");
}

#[test]
fn a_clock_that_stepped_back_is_not_a_panic() {
    let now = SystemTime::now();
    let job = JobFailure { first_attempt_at: now + Duration::from_secs(3_600), ..failure(1, None, 0, now) };
    assert!(matches!(
        JobPolicy::from(policy()).schedule(&job, now, &mut JitterRng::seeded(0)),
        Schedule::RetryAt { .. }
    ));
}

const HOUR: Duration = Duration::from_secs(60 * 60);
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// Up to a retry every week, for three weeks.
fn weekly() -> PolicyBuilder {
    Policy::builder()
        .max_attempts(12)
        .base_delay(HOUR)
        .multiplier(4.0)
        .max_delay(7 * DAY)
        .max_server_delay(7 * DAY)
        .deadline(21 * DAY)
        .jitter(Jitter::None)
}

#[test]
fn job_policies_schedule_across_days_and_weeks() {
    let policy = weekly().build_for_jobs().expect("job durations up to 28 days are valid");
    let first_attempt_at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut now = first_attempt_at;
    let mut previous_delay = None;
    let mut delays = Vec::new();
    let mut rng = JitterRng::seeded(0);
    for attempt in 1.. {
        let failure = JobFailure { attempt, previous_delay, first_attempt_at, hint: None, error: None };
        match policy.schedule(&failure, now, &mut rng) {
            Schedule::RetryAt { at, delay, source } => {
                assert_eq!((at, source), (now + delay, DelaySource::Policy));
                delays.push(delay);
                previous_delay = Some(delay);
                now = at;
            }
            Schedule::DeadLetter(reason) => {
                assert_eq!(reason, StopReason::DeadlineExceeded);
                break;
            }
        }
    }
    // 1 h, 4 h, 16 h, 64 h, then a week each time until the three weeks are up.
    assert_eq!(delays, [HOUR, 4 * HOUR, 16 * HOUR, 64 * HOUR, 7 * DAY, 7 * DAY]);
    assert!(now.duration_since(first_attempt_at).expect("forward") < 21 * DAY);
}

#[test]
fn a_job_may_honour_a_retry_after_of_days() {
    let policy = weekly().build_for_jobs().expect("valid job policy");
    let now = SystemTime::now();
    let job = JobFailure { hint: Some(Hint::retry_after(3 * DAY)), ..failure(1, None, 0, now) };
    let s = policy.schedule(&job, now, &mut JitterRng::seeded(0));
    // At most 5 s (the widest spread, in `Hint`'s docs) on top of the three days.
    let Schedule::RetryAt { at, delay, source } = s else { panic!("not scheduled: {s:?}") };
    assert_eq!((at, source), (now + delay, DelaySource::RetryAfter));
    assert!((3 * DAY..=3 * DAY + Duration::from_secs(5)).contains(&delay), "{delay:?}");
}

#[test]
fn interactive_policies_keep_the_one_day_guard() {
    let err = weekly().build().expect_err("a week-long sleep in a process is a unit mistake");
    assert_eq!(
        err,
        PolicyError::OutOfRange {
            setting: "max_delay",
            value: SettingValue::Duration(7 * DAY),
            limit: SettingValue::Duration(MAX_DURATION)
        }
    );
    assert!(err.to_string().contains("at most 86400s"), "{err}");
}

#[test]
fn job_policies_have_their_own_limit() {
    let too_long = weekly().deadline(MAX_JOB_DURATION + Duration::from_secs(1)).build_for_jobs();
    assert_eq!(
        too_long,
        Err(PolicyError::OutOfRange {
            setting: "deadline",
            value: SettingValue::Duration(MAX_JOB_DURATION + Duration::from_secs(1)),
            limit: SettingValue::Duration(MAX_JOB_DURATION),
        })
    );
    assert_eq!(
        weekly().deadline(MAX_JOB_DURATION).build_for_jobs().map(|p| p.deadline()),
        Ok(Some(MAX_JOB_DURATION))
    );
    // The other rules still hold.
    assert_eq!(weekly().max_attempts(0).build_for_jobs(), Err(PolicyError::ZeroAttempts));
    assert!(matches!(
        weekly().base_delay(Duration::ZERO).build_for_jobs(),
        Err(PolicyError::OutOfRange { .. })
    ));
}

#[test]
fn every_policy_is_a_job_policy_with_the_same_schedule() {
    let now = SystemTime::now();
    let job = failure(2, Some(1), 10, now);
    let as_job = JobPolicy::from(policy());
    assert_eq!(as_job.max_attempts(), policy().max_attempts());
    assert_eq!(
        as_job.schedule(&job, now, &mut JitterRng::seeded(3)),
        JobPolicy::from(policy()).schedule(&job, now, &mut JitterRng::seeded(3))
    );
}

/// A job that failed on a throttling answer waits on the throttled curve, as a
/// retried call does; any other failure on the transient one.
#[test]
fn a_throttled_job_waits_from_the_throttled_base() {
    let now = SystemTime::now();
    let policy = Policy::builder()
        .base_delay(Duration::from_millis(50))
        .throttled_base_delay(Duration::from_secs(1))
        .jitter(Jitter::None)
        .build_for_jobs()
        .expect("valid settings");
    let delay = |error| match policy.schedule(
        &JobFailure { error, ..failure(1, None, 0, now) },
        now,
        &mut JitterRng::seeded(0),
    ) {
        Schedule::RetryAt { delay, .. } => delay,
        Schedule::DeadLetter(reason) => panic!("{reason}"),
    };
    assert_eq!(delay(Some(ErrorType::Status(429))), Duration::from_secs(1));
    assert_eq!(delay(Some(ErrorType::Status(503))), Duration::from_millis(50));
    assert_eq!(delay(None), Duration::from_millis(50));
}
