//! The blocking engine, driven by a manual clock: time moves only when it sleeps.

mod common;

use retryscope::clock::ManualClock;
use retryscope::{Jitter, Policy, Retryable, StopReason};
use std::time::Duration;

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(4)
        .base_delay(Duration::from_millis(100))
        .max_delay(Duration::from_secs(1))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid settings")
}

#[test]
fn retries_a_blocking_operation_with_the_policy_delays() {
    let clock = ManualClock::new();
    let mut slept = Vec::new();
    let mut calls = 0;
    let result = (|| {
        calls += 1;
        if calls < 3 { Err("busy") } else { Ok(calls) }
    })
    .retry(policy())
    .retry_any_error()
    .call_with(&clock, |d| {
        slept.push(d);
        clock.advance(d);
    });
    assert_eq!(result.unwrap(), 3);
    assert_eq!(slept, [Duration::from_millis(100), Duration::from_millis(200)]);
    assert_eq!(clock.elapsed(), Duration::from_millis(300));
}

#[test]
fn a_slow_blocking_attempt_ends_the_operation_at_the_deadline() {
    let clock = ManualClock::new();
    let policy = policy().to_builder().deadline(Duration::from_millis(500)).build().unwrap();
    let mut calls = 0;
    let err = (|| {
        calls += 1;
        clock.advance(Duration::from_millis(450)); // the call itself is slow
        Err::<(), _>("busy")
    })
    .retry(policy)
    .retry_any_error()
    .call_with(&clock, |d| clock.advance(d))
    .unwrap_err();
    // After 450 ms a 100 ms wait would cross the 500 ms deadline: stop at once.
    assert_eq!((calls, err.reason()), (1, StopReason::DeadlineExceeded));
    assert_eq!(clock.elapsed(), Duration::from_millis(450));
}

#[test]
fn call_uses_real_time_and_returns_permanent_errors_at_once() {
    let mut calls = 0;
    let err = (|| {
        calls += 1;
        Err::<(), _>(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
    })
    .retry(policy())
    .when(|e: &std::io::Error| e.kind() != std::io::ErrorKind::PermissionDenied)
    .call()
    .unwrap_err();
    assert_eq!((calls, err.attempts(), err.reason()), (1, 1, StopReason::Permanent));
    // The underlying error stays reachable through `source()`.
    let source = std::error::Error::source(&err).map(ToString::to_string);
    assert_eq!(source.as_deref(), Some("permission denied"));
}

#[test]
fn a_panicking_operation_still_finishes_its_telemetry() {
    let rec = common::Recorder::default();
    let observer = rec.clone();
    let unwound = std::panic::catch_unwind(move || {
        let _ = (|| -> Result<(), &str> { panic!("the operation blew up") })
            .retry(policy())
            .retry_any_error()
            .observe(observer)
            .call_with(&ManualClock::new(), |_| {});
    });
    assert!(unwound.is_err());
    let finish = rec.finish();
    assert_eq!((finish.outcome, finish.attempts), (retryscope::Outcome::Cancelled, 1));
}
