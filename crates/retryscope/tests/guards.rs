//! Budget and breaker wired into the engine: retries refused, calls short-circuited.

mod common;

use common::Recorder;
use retryscope::breaker::BreakerState;
use retryscope::clock::ManualClock;
use retryscope::dependency::Dependency;
use retryscope::{
    CircuitBreaker, ErrorType, Jitter, Outcome, Policy, RetryBudget, Retryable, StopReason, TokenBucket,
    Verdict,
};
use std::time::Duration;

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(4)
        .base_delay(Duration::from_millis(10))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid settings")
}

fn always_failing() -> impl FnMut() -> std::future::Ready<Result<(), &'static str>> {
    || std::future::ready(Err("unavailable"))
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_budget_refuses_retries_and_says_so() {
    // Frozen clock, ratio 0 and no floor: the budget has no retry to give.
    let budget = RetryBudget::builder()
        .ratio(0.0)
        .min_per_second(0)
        .clock(ManualClock::new())
        .build()
        .expect("valid settings");
    let dependency = Dependency::new("test").with_budget(budget.clone());
    let rec = Recorder::default();
    let err = always_failing()
        .retry(policy())
        .retry_any_error()
        .dependency(&dependency)
        .observe(rec.clone())
        .await
        .unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (StopReason::BudgetExhausted, 1));
    assert_eq!(err.last_error(), Some(&"unavailable"));
    assert_eq!(rec.finish().outcome, Outcome::Throttled);
}

#[tokio::test(start_paused = true)]
async fn a_budget_caps_retries_across_a_failure_storm() {
    // 10 % of 1,000 requests plus a floor of 1/s over a 10 s window, clock frozen:
    // at most 100 + 10 retries, whatever the policy would allow.
    let budget = RetryBudget::builder()
        .ratio(0.1)
        .min_per_second(1)
        .window(Duration::from_secs(10))
        .clock(ManualClock::new())
        .build()
        .expect("valid settings");
    let dependency = Dependency::new("test").with_budget(budget.clone());
    let mut attempts = 0;
    for _ in 0..1_000 {
        let err =
            always_failing().retry(policy()).retry_any_error().dependency(&dependency).await.unwrap_err();
        attempts += err.attempts();
    }
    assert_eq!(attempts - 1_000, 110);
}

#[tokio::test(start_paused = true)]
async fn a_token_bucket_stops_retries_once_half_empty() {
    // 10 tokens; each failed attempt costs one; retries need more than 5.
    let bucket = TokenBucket::builder().max_tokens(10).token_ratio(0.1).build().unwrap();
    let dependency = Dependency::new("test").with_budget(bucket.clone());
    let first = always_failing().retry(policy()).retry_any_error().dependency(&dependency).await.unwrap_err();
    // Attempts 1..=4 fail: 10 → 6 tokens, all retries allowed (6 > 5).
    assert_eq!((first.attempts(), first.reason()), (4, StopReason::AttemptsExhausted));
    let second =
        always_failing().retry(policy()).retry_any_error().dependency(&dependency).await.unwrap_err();
    // One more failure leaves 5: no retry.
    assert_eq!((second.attempts(), second.reason()), (1, StopReason::BudgetExhausted));
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_short_circuits_before_the_first_attempt() {
    let clock = ManualClock::new();
    let breaker = CircuitBreaker::builder()
        .min_calls(4)
        .failure_ratio(0.5)
        .cool_down(Duration::from_secs(5))
        .half_open_probes(1)
        .clock(clock.clone())
        .build()
        .expect("valid settings");
    let dependency = Dependency::new("test").with_breaker(breaker.clone());
    // Four failing attempts open it.
    let err = always_failing().retry(policy()).retry_any_error().dependency(&dependency).await.unwrap_err();
    assert_eq!(err.attempts(), 4);
    assert_eq!(breaker.state(), BreakerState::Open);

    let mut calls = 0;
    let rec = Recorder::default();
    let err = (|| {
        calls += 1;
        std::future::ready(Ok::<(), &str>(()))
    })
    .retry(policy())
    .retry_any_error()
    .dependency(&dependency)
    .observe(rec.clone())
    .await
    .unwrap_err();
    assert_eq!((calls, err.attempts(), err.reason()), (0, 0, StopReason::CircuitOpen));
    assert!(err.last_error().is_none());
    assert_eq!(rec.finish().outcome, Outcome::Throttled);

    // After the cool-down one probe goes through; its success closes the breaker.
    clock.advance(Duration::from_secs(5));
    let ok = (|| std::future::ready(Ok::<_, &str>("probe")))
        .retry(policy())
        .retry_any_error()
        .dependency(&dependency)
        .await;
    assert_eq!(ok.unwrap(), "probe");
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_do_not_trip_the_breaker() {
    let breaker = CircuitBreaker::builder().min_calls(2).clock(ManualClock::new()).build().unwrap();
    let dependency = Dependency::new("test").with_breaker(breaker.clone());
    for _ in 0..10 {
        let err = always_failing()
            .retry(policy())
            .when(|_: &&str| false)
            .dependency(&dependency)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), StopReason::Permanent);
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_does_not_close_the_breaker() {
    let clock = ManualClock::new();
    let breaker = CircuitBreaker::builder()
        .min_calls(2)
        .failure_ratio(0.5)
        .cool_down(Duration::from_secs(1))
        .half_open_probes(1)
        .clock(clock.clone())
        .build()
        .expect("valid settings");
    let one_attempt = policy().to_builder().max_attempts(2).build().expect("valid settings");
    let _ = always_failing()
        .retry(one_attempt)
        .retry_any_error()
        .dependency(&Dependency::new("test").with_breaker(breaker.clone()))
        .await;
    assert_eq!(breaker.state(), BreakerState::Open);
    clock.advance(Duration::from_secs(1));
    // The probe hangs and its caller gives up on it.
    let dependency = Dependency::new("test").with_breaker(breaker.clone());
    let hanging = (|| std::future::pending::<Result<(), &str>>())
        .retry(policy())
        .retry_any_error()
        .dependency(&dependency);
    assert!(tokio::time::timeout(Duration::from_millis(10), hanging).await.is_err());
    // Nothing was learned about the dependency: still not closed, and the probe
    // slot is free again for the next caller.
    assert_ne!(breaker.state(), BreakerState::Closed);
    let probe = (|| std::future::ready(Ok::<_, &str>("up")))
        .retry(policy())
        .retry_any_error()
        .dependency(&Dependency::new("test").with_breaker(breaker.clone()))
        .await;
    assert_eq!(probe.unwrap(), "up");
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn the_last_error_survives_a_breaker_that_opens_during_the_wait() {
    let breaker = CircuitBreaker::builder()
        .min_calls(1)
        .failure_ratio(0.5)
        .clock(ManualClock::new())
        .build()
        .expect("valid settings");
    let dependency = Dependency::new("test").with_breaker(breaker.clone());
    // The first failure opens the breaker; its retry is refused.
    let err = always_failing().retry(policy()).retry_any_error().dependency(&dependency).await.unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (StopReason::CircuitOpen, 1));
    assert_eq!(err.last_error(), Some(&"unavailable"));
}

#[tokio::test(start_paused = true)]
async fn database_conflicts_are_retried_but_never_open_the_breaker() {
    // Opens at half of four calls failing; 40001 and 40P01 are conflicts the
    // database resolved, not failures, so 40 of them leave it closed.
    let breaker = CircuitBreaker::builder()
        .failure_ratio(0.5)
        .min_calls(4)
        .clock(ManualClock::new())
        .build()
        .expect("valid settings");
    let dependency = Dependency::new("test").with_breaker(breaker.clone());
    for code in ["40001", "40P01"] {
        for _ in 0..10 {
            let err = (|| std::future::ready(Err::<(), _>("conflict")))
                .retry(policy())
                .classify(|_: &Result<(), &str>| Verdict::retryable(ErrorType::Kind(code)))
                .dependency(&dependency)
                .await
                .unwrap_err();
            assert_eq!((err.reason(), err.attempts()), (StopReason::AttemptsExhausted, 4));
        }
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
    // Four failures of another kind open it.
    let err = always_failing().retry(policy()).retry_any_error().dependency(&dependency).await.unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (StopReason::AttemptsExhausted, 4));
    assert_eq!(breaker.state(), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_retry_the_open_breaker_would_refuse_is_refused_before_its_wait_and_costs_no_budget() {
    use retryscope::budget::Budget;
    // Open for 5 s (its default cool-down) after the first failure, far past
    // the 10 ms backoff: waiting would only end in the same refusal.
    let breaker = CircuitBreaker::builder()
        .min_calls(1)
        .failure_ratio(0.5)
        .clock(ManualClock::new())
        .build()
        .expect("valid settings");
    let budget = RetryBudget::builder().clock(ManualClock::new()).build().expect("valid settings");
    let before = budget.available();
    let start = tokio::time::Instant::now();
    let err = always_failing()
        .retry(policy())
        .retry_any_error()
        .dependency(&Dependency::new("test").with_budget(budget.clone()).with_breaker(breaker.clone()))
        .await
        .unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (StopReason::CircuitOpen, 1));
    assert_eq!(start.elapsed(), Duration::ZERO, "waited for a refusal");
    assert!(
        budget.available() >= before,
        "a retry never sent spent the budget: {before} -> {}",
        budget.available()
    );

    // A cool-down shorter than the wait: the retry is planned, and after
    // the wait it is the half-open breaker's probe.
    let brief = CircuitBreaker::builder()
        .min_calls(1)
        .failure_ratio(0.5)
        .cool_down(Duration::from_millis(5))
        .build()
        .expect("valid settings");
    let calls = std::cell::Cell::new(0);
    let flaky = || {
        calls.set(calls.get() + 1);
        std::future::ready(if calls.get() == 1 { Err("unavailable") } else { Ok("up") })
    };
    let up = flaky
        .retry(policy())
        .retry_any_error()
        .dependency(&Dependency::new("test").with_breaker(brief.clone()))
        .await;
    assert_eq!((up, calls.get()), (Ok("up"), 2));
}
