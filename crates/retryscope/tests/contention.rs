//! The guards under real contention: four OS threads hammering one shared
//! instance on a frozen clock, where the documented bounds are exact.
//!
//! The loom models (`tests/loom.rs`) prove the invariants for every
//! interleaving of two or three threads and a few operations; these tests run
//! the same invariants at full speed with more threads and many operations, on
//! the real atomics and the real per-thread lanes.

use retryscope::CircuitBreaker;
use retryscope::RetryBudget;
use retryscope::breaker::BreakerState;
use retryscope::budget::{Budget, RetryCause};
use retryscope::clock::ManualClock;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const THREADS: u64 = 4;

/// Runs `work` on [`THREADS`] threads released together, and returns the sum
/// of what they return.
fn on_threads(work: impl Fn() -> u64 + Sync) -> u64 {
    let barrier = Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    work()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a worker panicked")).sum()
    })
}

fn frozen_budget(ratio: f64, min_per_second: u32) -> RetryBudget {
    RetryBudget::builder()
        .ratio(ratio)
        .min_per_second(min_per_second)
        .window(Duration::from_secs(10))
        .clock(ManualClock::new())
        .build()
        .expect("valid settings")
}

/// The stress test: four threads each start requests and retry as
/// often as the budget lets them, all at once, on a frozen clock. However the
/// deposits (in the threads' own lanes) and the withdrawals (one shared
/// window) interleave, the budget grants exactly `ratio · requests + floor`:
/// never one more, and — since each thread asks again after every request
/// until refused at the end — not one fewer.
#[test]
fn four_threads_on_a_frozen_clock_get_exactly_ratio_plus_floor() {
    const REQUESTS_PER_THREAD: u64 = 25_000;
    for round in 0..5 {
        // ratio 0.1 and a floor of 2/s × 10 s: 10,000 + 20 retries.
        let budget = frozen_budget(0.1, 2);
        let granted = on_threads(|| {
            let mut granted = 0;
            for _ in 0..REQUESTS_PER_THREAD {
                budget.request_started();
                // Up to three retries per request, as an engine would ask.
                granted +=
                    (0..3).take_while(|_| budget.try_acquire_retry(RetryCause::Transient)).count() as u64;
            }
            // Drain: whatever is left now belongs to whoever asks first.
            while budget.try_acquire_retry(RetryCause::Transient) {
                granted += 1;
            }
            granted
        });
        let bound = THREADS * REQUESTS_PER_THREAD / 10 + 20;
        assert_eq!(granted, bound, "round {round}");
        assert_eq!(budget.available(), 0.0, "round {round}");
    }
}

/// Only retries race for a fixed pot: four threads asking far more often than
/// there are tokens get exactly the tokens.
#[test]
fn four_threads_racing_for_a_fixed_pot_never_overdraw_it() {
    for round in 0..20 {
        let budget = frozen_budget(0.5, 0);
        for _ in 0..2_000 {
            budget.request_started();
        }
        // 2,000 requests at 0.5: 1,000 tokens for 4 × 5,000 asks.
        let granted = on_threads(|| {
            (0..5_000).filter(|_| budget.try_acquire_retry(RetryCause::Transient)).count() as u64
        });
        assert_eq!(granted, 1_000, "round {round}");
    }
}

/// Closed-state outcomes go to the reporting thread's lane; the breaker judges
/// the sum. Four threads each report failures below `min_calls` on their own,
/// and the breaker opens as soon as their sum reaches it.
#[test]
fn failures_from_every_thread_count_towards_opening() {
    let breaker = CircuitBreaker::builder()
        .min_calls(40)
        .failure_ratio(1.0)
        .clock(ManualClock::new())
        .build()
        .expect("valid settings");
    let admitted = AtomicU64::new(0);
    on_threads(|| {
        // 9 each: 36 in all, below min_calls.
        for _ in 0..9 {
            let permit = breaker.try_acquire().expect("closed");
            admitted.fetch_add(1, Ordering::Relaxed);
            permit.failure();
        }
        0
    });
    assert_eq!(breaker.state(), BreakerState::Closed);
    // Four more, from whichever thread: the 40th failure opens it.
    for _ in 0..3 {
        breaker.try_acquire().expect("closed").failure();
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
    breaker.try_acquire().expect("closed").failure();
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(admitted.load(Ordering::Relaxed), 36);
}

/// Successes from other threads' lanes keep the failure ratio down: a
/// thread's own failures do not open the breaker while the others' successes
/// outnumber them.
#[test]
fn successes_from_other_threads_hold_the_breaker_closed() {
    let breaker = CircuitBreaker::builder()
        .min_calls(10)
        .failure_ratio(0.5)
        .clock(ManualClock::new())
        .build()
        .expect("valid settings");
    on_threads(|| {
        for _ in 0..1_000 {
            breaker.try_acquire().expect("closed").success();
        }
        0
    });
    // 4,000 successes in the window: 3,999 failures keep the ratio below 0.5.
    for _ in 0..3_999 {
        breaker.try_acquire().expect("closed").failure();
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
    breaker.try_acquire().expect("closed").failure();
    assert_eq!(breaker.state(), BreakerState::Open);
}
