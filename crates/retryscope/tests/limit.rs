//! The adaptive concurrency limit and priorities wired into the engine, on
//! tokio's paused clock: slots taken and given back per attempt, a bounded
//! wait for a slot, refusals that say why, sheddable calls refused first.

use retryscope::clock::ManualClock;
use retryscope::dependency::Dependency;
use retryscope::overload::{AdaptiveThrottle, Aimd, ConcurrencyLimiter, Priority};
use retryscope::{Jitter, Policy, Retryable, StopReason};
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(10))
        .jitter(Jitter::None)
        .deadline(Duration::from_secs(10))
        .build()
        .expect("valid settings")
}

fn limiter(initial: u32, max_wait: Duration) -> ConcurrencyLimiter {
    let aimd = Aimd::builder()
        .initial_limit(initial)
        .min_limit(1)
        .timeout(Duration::from_millis(500))
        .build()
        .expect("valid");
    ConcurrencyLimiter::builder(aimd).max_wait(max_wait).build().expect("valid")
}

#[tokio::test(start_paused = true)]
async fn each_attempt_holds_a_slot_and_its_end_moves_the_limit() {
    let limiter = limiter(2, Duration::ZERO);
    let dependency = Dependency::new("test").with_concurrency_limit(limiter.clone());
    let seen = Cell::new(Vec::new());
    let calls = Cell::new(0);
    let result = (|| {
        calls.set(calls.get() + 1);
        let mut v = seen.take();
        v.push(limiter.in_flight());
        seen.set(v);
        let n = calls.get();
        async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if n < 2 { Err("unavailable") } else { Ok(n) }
        }
    })
    .retry(policy())
    .retry_any_error()
    .dependency(&dependency)
    .await;
    assert_eq!(result.ok(), Some(2));
    // Each attempt held one slot; none is held after the call.
    assert_eq!((seen.take(), limiter.in_flight()), (vec![1, 1], 0));
    // The failure was a drop (2 · 0.9 → 1), the success in use (1 · 2 ≥ 1): +1.
    assert_eq!(limiter.limit(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_full_limit_holds_the_attempt_for_max_wait_then_refuses_it_unsent() {
    let limiter = Arc::new(limiter(1, Duration::from_millis(50)));
    let dependency = Dependency::new("test").with_concurrency_limit((*limiter).clone());
    let slot = limiter.try_acquire(Priority::Critical).expect("the one slot");
    let sent = Cell::new(0);
    let start = tokio::time::Instant::now();
    let error = (|| {
        sent.set(sent.get() + 1);
        async { Ok::<_, &str>(()) }
    })
    .retry(policy())
    .retry_any_error()
    .dependency(&dependency)
    .await
    .expect_err("the limit stays full");
    assert_eq!(sent.get(), 0);
    assert_eq!(error.attempts(), 0);
    assert_eq!(
        error.reason(),
        StopReason::ConcurrencyLimited { limit: 1, waited: Duration::from_millis(50) }
    );
    assert_eq!(start.elapsed(), Duration::from_millis(50));
    assert!(error.to_string().contains("concurrency limit"), "{error}");
    drop(slot);
}

#[tokio::test(start_paused = true)]
async fn a_slot_freed_during_the_wait_lets_the_attempt_go() {
    let limiter = Arc::new(limiter(1, Duration::from_secs(1)));
    let slot = limiter.try_acquire(Priority::Critical).expect("the one slot");
    let dependency = Dependency::new("test").with_concurrency_limit((*limiter).clone());
    let call = tokio::spawn(async move {
        (|| async { Ok::<_, &str>(7) }).retry(policy()).retry_any_error().dependency(&dependency).await
    });
    let start = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(100)).await;
    slot.success(Duration::from_millis(100));
    assert_eq!(call.await.expect("no panic"), Ok(7));
    // Freed at 100 ms, found within one poll of the slot (2 ms: the
    // limiter's docs' table).
    assert!(start.elapsed() <= Duration::from_millis(100) + Duration::from_millis(2));
}

#[tokio::test(start_paused = true)]
async fn the_wait_for_a_slot_never_crosses_the_deadline() {
    let limiter = limiter(1, Duration::from_secs(30));
    let dependency = Dependency::new("test").with_concurrency_limit(limiter.clone());
    let _slot = limiter.try_acquire(Priority::Critical).expect("the one slot");
    let policy = Policy::builder().deadline(Duration::from_millis(300)).build().expect("valid");
    let start = tokio::time::Instant::now();
    let error = (|| async { Ok::<_, &str>(()) })
        .retry(policy)
        .retry_any_error()
        .dependency(&dependency)
        .await
        .expect_err("full");
    assert!(matches!(error.reason(), StopReason::ConcurrencyLimited { .. }), "{:?}", error.reason());
    assert_eq!(start.elapsed(), Duration::from_millis(300));
}

#[tokio::test(start_paused = true)]
async fn sheddable_calls_are_refused_before_critical_ones() {
    // The limit: 5 slots, 4 of them open to sheddable calls.
    let limiter = limiter(5, Duration::ZERO);
    let held: Vec<_> = (0..4).map(|_| limiter.try_acquire(Priority::Critical).expect("free")).collect();
    let limited = Dependency::new("test").with_concurrency_limit(limiter.clone());
    let call = |priority| {
        (|| async { Ok::<_, &str>(()) })
            .retry(policy())
            .retry_any_error()
            .priority(priority)
            .dependency(&limited)
    };
    let shed = call(Priority::Sheddable).await.expect_err("above its share");
    assert!(matches!(shed.reason(), StopReason::ConcurrencyLimited { limit: 5, .. }));
    assert_eq!(call(Priority::Critical).await, Ok(()));
    drop(held);

    // The throttle: a dependency that accepted 4 of 10 requests (p = 2/11).
    let throttle = AdaptiveThrottle::builder().clock(ManualClock::new()).build().expect("valid");
    for n in 0..10 {
        assert!(throttle.admit(1.0));
        if n < 4 {
            throttle.accepted();
        }
    }
    let throttled_dependency = Dependency::new("test").with_guard(throttle.clone());
    let throttled = |priority, seed| {
        (|| async { Err::<(), _>("unavailable") })
            .retry(Policy::builder().max_attempts(1).build().expect("valid"))
            .retry_any_error()
            .priority(priority)
            .dependency(&throttled_dependency)
            .seed(seed)
    };
    for seed in 0..20 {
        let error = throttled(Priority::Sheddable, seed).await.expect_err("refused");
        assert_eq!(error.reason(), StopReason::RejectedLocally);
    }
    // p is now 22/31 (the refused ones counted): a critical call still goes
    // with probability 1 − p; among 20 draws (seeded, reproducible), some do.
    let mut sent = 0;
    for seed in 0..20 {
        if throttled(Priority::Critical, seed).await.expect_err("fails").reason()
            != StopReason::RejectedLocally
        {
            sent += 1;
        }
    }
    assert!(sent > 0, "no critical call was sent");
}
