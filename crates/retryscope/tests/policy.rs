//! Policy construction: presets and rejected settings.

use retryscope::{Jitter, Policy, PolicyError};
use std::time::Duration;

#[test]
fn presets_carry_the_field_defaults() {
    let i = Policy::interactive();
    assert_eq!(
        (i.max_attempts(), i.base_delay(), i.max_delay(), i.deadline(), i.attempt_timeout()),
        (
            4,
            Duration::from_millis(200),
            Duration::from_secs(5),
            Some(Duration::from_secs(15)),
            Some(Duration::from_secs(5))
        )
    );
    let b = Policy::background();
    assert_eq!(
        (b.max_attempts(), b.base_delay(), b.max_delay(), b.deadline(), b.attempt_timeout()),
        (
            8,
            Duration::from_secs(1),
            Duration::from_secs(60),
            Some(Duration::from_secs(600)),
            Some(Duration::from_secs(60))
        )
    );
    assert_eq!(i.multiplier(), 2.0);
    // The presets are valid policies.
    assert_eq!(i.to_builder().build(), Ok(i));
    assert_eq!(b.to_builder().build(), Ok(b));
}

#[test]
fn every_preset_bounds_every_attempt_and_every_call() {
    for preset in [Policy::interactive(), Policy::background()] {
        let (timeout, deadline) = (preset.attempt_timeout(), preset.deadline());
        assert!(timeout.is_some() && deadline.is_some(), "{preset:?}");
        // Room for a retry after an attempt that used its whole time limit.
        let first_retry = timeout.unwrap_or_default() + preset.base_delay() + timeout.unwrap_or_default();
        assert!(Some(first_retry) < deadline, "{preset:?}");
    }
}

#[test]
fn an_unbounded_policy_takes_saying_so() {
    let unbounded = Policy::builder().no_deadline().no_attempt_timeout().build().expect("valid");
    assert_eq!((unbounded.deadline(), unbounded.attempt_timeout()), (None, None));
    assert!(Policy::builder().build().is_ok_and(|p| p.deadline().is_some() && p.attempt_timeout().is_some()));
}

#[test]
fn bad_settings_are_rejected_with_a_clear_error() {
    let b = Policy::builder;
    let cases: Vec<(PolicyError, &str)> = vec![
        (b().max_attempts(0).build().unwrap_err(), "max_attempts must be at least 1"),
        (b().base_delay(Duration::ZERO).build().unwrap_err(), "base_delay must be above zero"),
        (b().max_delay(Duration::ZERO).build().unwrap_err(), "max_delay must be above zero"),
        (b().deadline(Duration::ZERO).build().unwrap_err(), "deadline must be above zero"),
        (b().attempt_timeout(Duration::ZERO).build().unwrap_err(), "attempt_timeout must be above zero"),
        (
            b().max_delay(Duration::from_secs(90_000)).build().unwrap_err(),
            "max_delay must be above zero and at most",
        ),
        (b().multiplier(0.0).build().unwrap_err(), "multiplier must be a finite number above 0, got 0"),
        (b().multiplier(-2.0).build().unwrap_err(), "got -2"),
        (b().multiplier(f64::NAN).build().unwrap_err(), "got NaN"),
        (b().multiplier(f64::INFINITY).build().unwrap_err(), "got inf"),
        (
            b().base_delay(Duration::from_secs(10)).max_delay(Duration::from_secs(1)).build().unwrap_err(),
            "base_delay (10s) must not exceed max_delay (1s)",
        ),
        (b().jitter(Jitter::Proportional(-0.1)).build().unwrap_err(), "jitter parameter must be finite"),
        (b().jitter(Jitter::Proportional(f64::NAN)).build().unwrap_err(), "jitter parameter must be finite"),
    ];
    for (error, expected) in cases {
        let message = error.to_string();
        assert!(message.contains(expected), "{message:?} should contain {expected:?}");
    }
}

#[test]
fn one_attempt_means_no_retries() {
    assert!(Policy::builder().max_attempts(1).build().is_ok());
}

#[test]
fn exponential_delay_saturates_at_the_cap_for_huge_retry_numbers() {
    let p = Policy::interactive();
    assert_eq!(p.exponential_delay(u32::MAX), p.max_delay());
    assert_eq!(p.exponential_delay(2_000), p.max_delay());
}

/// A policy keeps every setting exactly, to the nanosecond, and reads as its
/// settings when printed.
#[test]
fn settings_survive_to_the_nanosecond_and_print_as_durations() {
    let policy = Policy::builder()
        .max_attempts(7)
        .base_delay(Duration::from_nanos(1_234_567_891))
        .max_delay(Duration::from_secs(86_400))
        .multiplier(1.5)
        .jitter(Jitter::Proportional(0.25))
        .deadline(Duration::new(3_600, 999_999_999))
        .attempt_timeout(Duration::from_nanos(1))
        .max_server_delay(Duration::ZERO)
        .build()
        .expect("valid");
    assert_eq!(policy.base_delay(), Duration::from_nanos(1_234_567_891));
    assert_eq!(policy.max_delay(), Duration::from_secs(86_400));
    assert_eq!(policy.deadline(), Some(Duration::new(3_600, 999_999_999)));
    assert_eq!(policy.attempt_timeout(), Some(Duration::from_nanos(1)));
    assert_eq!(policy.max_server_delay(), Duration::ZERO);
    assert_eq!(policy.to_builder().build(), Ok(policy));
    let printed = format!("{policy:?}");
    assert!(printed.starts_with("Policy { max_attempts: 7, base_delay: 1.234567891s"), "{printed}");
    assert!(printed.contains("deadline: Some(3600.999999999s)"), "{printed}");
}
