//! Waits by cause (the AWS SDKs' 2026 retry behaviour), through the engine on
//! tokio's paused clock: a throttling answer backs off from its own base, any
//! other transient failure from the policy's, and an empty quota still leaves
//! a long poll its backoff before the call fails.

mod common;

use common::status_verdict;
use retryscope::budget::RetryCause;
use retryscope::budget::RetryQuota;
use retryscope::dependency::Dependency;
use retryscope::{ErrorType, Jitter, JitterRng, Policy, PolicyError, Retryable, StopReason};
use std::cell::{Cell, RefCell};
use std::time::Duration;
use tokio::time::Instant;

/// Answers each attempt with the next status of `script` (200 ends it), and
/// notes when each attempt started.
fn scripted(
    script: &'static [u16],
    started: &RefCell<Vec<Instant>>,
) -> impl FnMut() -> std::future::Ready<Result<(), u16>> {
    let calls = Cell::new(0);
    move || {
        started.borrow_mut().push(Instant::now());
        let status = script[calls.get()];
        calls.set(calls.get() + 1);
        std::future::ready(if status == 200 { Ok(()) } else { Err(status) })
    }
}

/// The waits between the attempts that started at `started`.
fn waits(started: &RefCell<Vec<Instant>>) -> Vec<Duration> {
    started.borrow().windows(2).map(|pair| pair[1] - pair[0]).collect()
}

#[tokio::test(start_paused = true)]
async fn a_429_then_a_503_waits_from_the_throttled_base_then_from_the_transient_one() {
    // The preset's bases, without jitter so that the curve shows: 1 s after
    // the 429 (retry 0 of the throttled curve), then 50 ms · 2 after the 503
    // (retry 1 of the transient one).
    let policy = Policy::aws_2026().to_builder().jitter(Jitter::None).build().expect("valid");
    let started = RefCell::new(Vec::new());
    let answer = scripted(&[429, 503, 200], &started).retry(policy).classify(status_verdict).await;
    assert!(answer.is_ok(), "{answer:?}");
    assert_eq!(waits(&started), [Duration::from_secs(1), Duration::from_millis(100)]);
}

#[tokio::test(start_paused = true)]
async fn with_the_presets_full_jitter_each_wait_is_drawn_from_its_causes_curve() {
    // Over many calls: after the 429, up to 1 s and mostly beyond what a
    // 50 ms base allows; after the 503, never beyond 100 ms.
    let (mut after_429, mut after_503) = (Vec::new(), Vec::new());
    for seed in 0..200 {
        let started = RefCell::new(Vec::new());
        let answer = scripted(&[429, 503, 200], &started)
            .retry(Policy::aws_2026())
            .classify(status_verdict)
            .seed(seed)
            .await;
        assert!(answer.is_ok(), "{answer:?}");
        let waits = waits(&started);
        after_429.push(waits[0]);
        after_503.push(waits[1]);
    }
    assert!(after_429.iter().all(|w| *w <= Duration::from_secs(1)), "{after_429:?}");
    let beyond = after_429.iter().filter(|w| **w > Duration::from_millis(100)).count();
    assert!(beyond > 150, "{beyond} of 200 beyond 100 ms: {after_429:?}");
    assert!(after_503.iter().all(|w| *w <= Duration::from_millis(100)), "{after_503:?}");
}

#[tokio::test(start_paused = true)]
async fn an_empty_quota_still_leaves_a_long_poll_its_backoff_before_it_fails() {
    let policy = Policy::aws_2026().to_builder().jitter(Jitter::None);
    // The first retry (50 ms on) takes 14 of the 20 tokens; the second,
    // 100 ms after it, finds 6: refused, after its backoff or at once.
    for (wait_out, waited) in [(true, Duration::from_millis(150)), (false, Duration::from_millis(50))] {
        let quota = RetryQuota::builder().capacity(20).build().expect("in range");
        let dependency = Dependency::new("test").with_budget(quota.clone());
        let policy = policy.wait_out_refusal(wait_out).build().expect("valid");
        let started = RefCell::new(Vec::new());
        let begun = Instant::now();
        let refused = scripted(&[503, 503, 200], &started)
            .retry(policy)
            .classify(status_verdict)
            .dependency(&dependency)
            .await;
        let error = refused.expect_err("refused by the quota");
        assert_eq!((error.reason(), error.attempts()), (StopReason::BudgetExhausted, 2));
        assert_eq!(error.error_type(), Some(ErrorType::Status(503)), "the last answer is kept");
        assert_eq!(started.borrow().len(), 2, "the refused retry was not sent");
        assert_eq!(begun.elapsed(), waited, "wait_out_refusal({wait_out})");
        assert_eq!(quota.tokens(), 6, "the refusal spent nothing");
    }
}

#[test]
fn the_throttled_curve_is_its_own_and_defaults_to_the_policys() {
    let mut rng = JitterRng::seeded(1);
    let plain = Policy::builder().jitter(Jitter::None).build().expect("valid");
    assert_eq!(plain.throttled_base_delay(), plain.base_delay());
    assert_eq!(plain.throttled_max_delay(), plain.max_delay());
    assert_eq!(
        plain.delay_after(RetryCause::Throttled, 2, Duration::ZERO, &mut rng),
        plain.delay(2, Duration::ZERO, &mut rng)
    );
    let apart = Policy::builder()
        .jitter(Jitter::None)
        .throttled_base_delay(Duration::from_secs(1))
        .throttled_max_delay(Duration::from_secs(3))
        .build()
        .expect("valid");
    let throttled: Vec<_> =
        (0..4).map(|n| apart.delay_after(RetryCause::Throttled, n, Duration::ZERO, &mut rng)).collect();
    assert_eq!(throttled, [1, 2, 3, 3].map(Duration::from_secs));
    // A timeout is no throttling answer.
    assert_eq!(
        apart.delay_after(RetryCause::Timeout, 0, Duration::ZERO, &mut rng),
        Duration::from_millis(200)
    );
}

#[test]
fn a_throttled_base_above_its_cap_or_zero_is_refused() {
    let refused = |builder: retryscope::PolicyBuilder| match builder.build() {
        Err(PolicyError::OutOfRange { setting, .. }) => setting,
        other => panic!("not refused: {other:?}"),
    };
    let secs = Duration::from_secs;
    assert_eq!(refused(Policy::builder().throttled_base_delay(Duration::ZERO)), "throttled_base_delay");
    // Above the cap it applies to: the policy's own 5 s, or its own.
    assert_eq!(refused(Policy::builder().throttled_base_delay(secs(6))), "throttled_base_delay");
    assert_eq!(
        refused(Policy::builder().throttled_base_delay(secs(2)).throttled_max_delay(secs(1))),
        "throttled_base_delay"
    );
    assert_eq!(refused(Policy::builder().throttled_max_delay(Duration::ZERO)), "throttled_max_delay");
    assert_eq!(refused(Policy::builder().throttled_max_delay(secs(2 * 24 * 60 * 60))), "throttled_max_delay");
    let message = Policy::builder().throttled_base_delay(secs(6)).build().map_err(|e| e.to_string());
    assert_eq!(message, Err("throttled_base_delay must be above zero and at most 5s, got 6s".to_owned()));
}

#[test]
fn a_blocking_long_poll_waits_out_its_refusal_too() {
    let clock = retryscope::clock::ManualClock::new();
    let start = retryscope::clock::Clock::now(&clock);
    let quota = RetryQuota::builder().capacity(20).build().expect("in range");
    let dependency = Dependency::new("test").with_budget(quota.clone());
    let policy =
        Policy::aws_2026().to_builder().jitter(Jitter::None).wait_out_refusal(true).build().expect("valid");
    let mut answers = [503_u16, 503, 200].into_iter();
    let refused = (|| match answers.next() {
        Some(200) | None => Ok(()),
        Some(status) => Err(status),
    })
    .retry(policy)
    .classify(status_verdict)
    .dependency(&dependency)
    .call_with(&clock, |wait| clock.advance(wait));
    assert_eq!(refused.map_err(|e| e.reason()), Err(StopReason::BudgetExhausted));
    // 50 ms before the retry the quota paid for, 100 ms before the refusal.
    assert_eq!(retryscope::clock::Clock::now(&clock) - start, Duration::from_millis(150));
}
