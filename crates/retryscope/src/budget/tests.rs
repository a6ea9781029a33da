//! The retry budget and the token bucket, specified on a manual clock.

use super::retry_budget::{DepositsSeen, SEEN_TOKEN_MASK};
use super::*;
use crate::budget::Budget;
use crate::clock::ManualClock;
use crate::setting::{SettingError, SettingValue};
use crate::sync::Ordering;
use crate::{RetryBudget, TokenBucket};
use proptest::prelude::*;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

fn budget(clock: &ManualClock) -> RetryBudget {
    RetryBudget::builder().clock(clock.clone()).build().expect("default settings are valid")
}

/// One logical request that fails every time: retries until refused or
/// three retries were made. Returns the retries granted.
fn failing_request(budget: &RetryBudget) -> u64 {
    budget.request_started();
    (0..3).take_while(|_| budget.try_acquire_retry(RetryCause::Transient)).count() as u64
}

#[test]
fn failure_storm_over_time_stays_within_the_bound() {
    let clock = ManualClock::new();
    let b = budget(&clock);
    let mut retries = 0;
    // 10,000 requests over 100 s.
    for _ in 0..10_000 {
        retries += failing_request(&b);
        clock.advance(Duration::from_millis(10));
    }
    // ratio · requests + floor · (elapsed + 1.1 · window) = 1,000 + 10 · 111.
    assert!(retries <= 2_110, "{retries} retries");
    // And the budget is not needlessly stingy: deposits plus a floor per
    // window were all spendable.
    assert!(retries >= 1_900, "{retries} retries");
}

#[test]
fn frozen_clock_grants_exactly_ratio_plus_floor() {
    let clock = ManualClock::new();
    let b = budget(&clock);
    let retries: u64 = (0..10_000).map(|_| failing_request(&b)).sum();
    assert_eq!(retries, 1_000 + 100);
    assert_eq!(b.available(), 0.0);
}

#[test]
fn deposits_expire_after_the_window() {
    let clock = ManualClock::new();
    let b = RetryBudget::builder().min_per_second(0).ratio(1.0).clock(clock.clone()).build().expect("valid");
    for _ in 0..5 {
        b.request_started();
    }
    assert_eq!(b.available(), 5.0);
    clock.advance(Duration::from_millis(9_999));
    assert_eq!(b.available(), 5.0);
    clock.advance(Duration::from_millis(1));
    assert_eq!(b.available(), 0.0);
    assert!(!b.try_acquire_retry(RetryCause::Transient));
}

#[test]
fn withdrawals_expire_too() {
    let clock = ManualClock::new();
    let b = RetryBudget::builder().min_per_second(1).clock(clock.clone()).build().expect("valid");
    let spent = (0..100).take_while(|_| b.try_acquire_retry(RetryCause::Transient)).count();
    assert_eq!(spent, 10);
    clock.advance(Duration::from_secs(10));
    assert_eq!(b.available(), 10.0);
}

#[test]
fn remembered_deposits_are_a_lower_bound_for_their_slot_only() {
    let seen = DepositsSeen::default();
    assert_eq!(seen.get(0), Some(0), "nothing summed yet: zero is a lower bound");
    seen.set(7, 12_345);
    // Rounded down to whole tokens.
    assert_eq!(seen.get(7), Some(12_000));
    assert_eq!(seen.get(6), None);
    assert_eq!(seen.get(8), None);
    assert_eq!(seen.get(7 + (1 << 36)), Some(12_000), "2^36 slots later: the documented horizon");
    // Saturates rather than wraps.
    seen.set(9, u64::MAX);
    assert_eq!(seen.get(9), Some(SEEN_TOKEN_MASK * MILLI));
}

#[test]
fn a_stale_sum_never_refuses_a_retry_the_lanes_can_pay() {
    let clock = ManualClock::new();
    let b = RetryBudget::builder().ratio(1.0).min_per_second(0).clock(clock).build().expect("valid");
    b.request_started();
    assert!(b.try_acquire_retry(RetryCause::Transient), "the first check sums the lanes");
    assert!(!b.try_acquire_retry(RetryCause::Transient));
    // Deposits after the remembered sum: the check falls back to the lanes.
    b.request_started();
    b.request_started();
    assert!(b.try_acquire_retry(RetryCause::Transient));
    assert!(b.try_acquire_retry(RetryCause::Transient));
    assert!(!b.try_acquire_retry(RetryCause::Transient));
}

#[test]
fn a_sum_from_an_earlier_slot_is_not_trusted() {
    let clock = ManualClock::new();
    let b = RetryBudget::builder().ratio(1.0).min_per_second(0).clock(clock.clone()).build().expect("valid");
    for _ in 0..3 {
        b.request_started();
    }
    // Remembers three tokens deposited in the first slot.
    assert!(b.try_acquire_retry(RetryCause::Transient));
    clock.advance(Duration::from_secs(10));
    // They expired with their slot, and so did the retry.
    assert!(!b.try_acquire_retry(RetryCause::Transient));
    assert_eq!(b.available(), 0.0);
}

#[test]
fn clones_share_state() {
    let clock = ManualClock::new();
    let b = RetryBudget::builder().min_per_second(1).clock(clock).build().expect("valid");
    let c = b.clone();
    assert!(c.try_acquire_retry(RetryCause::Transient));
    assert_eq!(b.available(), 9.0);
}

#[test]
fn threads_never_overspend_on_a_frozen_clock() {
    let clock = ManualClock::new();
    let b = budget(&clock);
    for _ in 0..1_000 {
        b.request_started();
    }
    // 100 from deposits + 100 from the floor.
    let granted = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..1_000 {
                    if b.try_acquire_retry(RetryCause::Transient) {
                        granted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(granted.load(Ordering::Relaxed), 200);
    assert_eq!(b.available(), 0.0);
}

#[test]
fn threads_mixing_requests_and_retries_stay_within_the_bound() {
    let clock = ManualClock::new();
    let b = budget(&clock);
    let granted = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..2_500 {
                    granted.fetch_add(failing_request(&b) as usize, Ordering::Relaxed);
                }
            });
        }
    });
    // Every thread leaves only when refused, so nothing is left over.
    assert_eq!(granted.load(Ordering::Relaxed), 1_100);
}

#[test]
fn builder_rejects_bad_settings() {
    let bad_ratios = [f64::NAN, -0.1, 1.5, f64::INFINITY];
    for ratio in bad_ratios {
        let err = RetryBudget::builder().ratio(ratio).build().expect_err("must reject");
        assert!(err.setting() == "ratio", "{err}");
        assert!(err.to_string().contains("ratio"), "{err}");
    }
    for window in [Duration::ZERO, Duration::from_millis(999), Duration::from_secs(3_601)] {
        let err = RetryBudget::builder().window(window).build().expect_err("must reject");
        assert_eq!(err, SettingError::budget("window", SettingValue::Duration(window)));
        assert!(err.to_string().contains("window"), "{err}");
    }
    let err = RetryBudget::builder().min_per_second(u32::MAX).build().expect_err("must reject");
    assert_eq!(err, SettingError::budget("min_per_second", SettingValue::Count(u32::MAX)));
    for ratio in [0.0, 1.0] {
        assert!(RetryBudget::builder().ratio(ratio).build().is_ok());
    }
}

#[test]
fn zero_ratio_leaves_only_the_floor() {
    let clock = ManualClock::new();
    let b = RetryBudget::builder()
        .ratio(0.0)
        .min_per_second(2)
        .window(Duration::from_secs(5))
        .clock(clock)
        .build()
        .expect("valid");
    let retries: u64 = (0..1_000).map(|_| failing_request(&b)).sum();
    assert_eq!(retries, 10);
}

proptest! {
    /// Any interleaving of requests, retries and clock steps keeps the
    /// documented long-run bound.
    #[test]
    fn long_run_bound_holds(steps in prop::collection::vec((0_u8..3, 0_u64..3_000), 1..400)) {
        let clock = ManualClock::new();
        let b = RetryBudget::builder()
            .ratio(0.25)
            .min_per_second(1)
            .window(Duration::from_secs(4))
            .clock(clock.clone())
            .build()
            .expect("valid");
        let (mut requests, mut retries) = (0_u64, 0_u64);
        for (op, millis) in steps {
            match op {
                0 => { b.request_started(); requests += 1; }
                1 => retries += u64::from(b.try_acquire_retry(RetryCause::Transient)),
                _ => clock.advance(Duration::from_millis(millis)),
            }
        }
        // ratio · requests + min_per_second · (T + 1.1 · window).
        let elapsed_secs = clock.elapsed().as_secs_f64();
        let bound = 0.25 * requests as f64 + (elapsed_secs + 4.4);
        prop_assert!(retries as f64 <= bound, "{} > {}", retries, bound);
    }
}

#[test]
fn token_bucket_starts_full() {
    let b = TokenBucket::builder().max_tokens(10).build().expect("valid");
    assert!(b.try_acquire_retry(RetryCause::Transient));
    assert_eq!(b.available(), 5.0);
}

#[test]
fn token_bucket_stops_retries_at_half() {
    let b = TokenBucket::builder().max_tokens(10).token_ratio(0.1).build().expect("valid");
    for _ in 0..4 {
        b.attempt_finished(false);
    }
    // 6 tokens > 5: still allowed, and allowing costs nothing.
    assert!(b.try_acquire_retry(RetryCause::Transient));
    assert!(b.try_acquire_retry(RetryCause::Transient));
    assert_eq!(b.available(), 1.0);
    // The 5th failure leaves 5, which is not more than 10 / 2.
    b.attempt_finished(false);
    assert!(!b.try_acquire_retry(RetryCause::Transient));
    assert_eq!(b.available(), 0.0);
    // Recovery: one success at 0.1 makes 5.1 > 5.
    b.attempt_finished(true);
    assert!(b.try_acquire_retry(RetryCause::Transient));
    assert!((b.available() - 0.1).abs() < 1e-9);
}

#[test]
fn token_bucket_stays_within_zero_and_max() {
    let b = TokenBucket::builder().max_tokens(3).token_ratio(1.0).build().expect("valid");
    for _ in 0..10 {
        b.attempt_finished(false);
    }
    assert_eq!(b.tokens(), 0);
    // From empty, 2 successes reach 2 > 1.5.
    b.attempt_finished(true);
    assert!(!b.try_acquire_retry(RetryCause::Transient));
    b.attempt_finished(true);
    assert!(b.try_acquire_retry(RetryCause::Transient));
    for _ in 0..10 {
        b.attempt_finished(true);
    }
    assert_eq!(b.tokens(), 3 * MILLI);
}

#[test]
fn token_bucket_rejects_bad_settings() {
    for max in [0, 1_001] {
        let err = TokenBucket::builder().max_tokens(max).build().expect_err("must reject");
        assert_eq!(err, SettingError::budget("max_tokens", SettingValue::Count(max)));
        assert!(err.to_string().contains("max_tokens"), "{err}");
    }
    for ratio in [0.0, 0.0004, 0.0009, -1.0, f64::NAN, f64::INFINITY] {
        let err = TokenBucket::builder().token_ratio(ratio).build().expect_err("must reject");
        assert!(err.setting() == "token_ratio", "{err}");
        assert!(err.to_string().contains("token_ratio"), "{err}");
    }
    assert!(TokenBucket::builder().max_tokens(1_000).token_ratio(0.001).build().is_ok());
}

/// gRPC accepts a ratio above 1 (A6 only asks for one above 0): a success then
/// refills more than a failure drains, never beyond the bucket's size.
#[test]
fn token_bucket_ratio_above_one_refills_more_than_a_failure_drains() {
    let b = TokenBucket::builder().max_tokens(10).token_ratio(2.5).build().expect("valid");
    for _ in 0..6 {
        b.attempt_finished(false);
    }
    assert_eq!(b.tokens(), 4 * MILLI);
    b.attempt_finished(true);
    assert_eq!(b.tokens(), 6_500);
    let huge = TokenBucket::builder().max_tokens(10).token_ratio(1e12).build().expect("valid");
    huge.attempt_finished(false);
    huge.attempt_finished(true);
    assert_eq!(huge.tokens(), 10 * MILLI);
}

/// A6: "Decimal places beyond 3 are ignored. (eg. 0.5466 is treated as 0.546.)"
#[test]
fn token_bucket_ratio_is_truncated_to_three_decimals() {
    let b = TokenBucket::builder().max_tokens(10).token_ratio(0.5466).build().expect("valid");
    b.attempt_finished(false);
    b.attempt_finished(true);
    assert_eq!(b.tokens(), 9_546);
}

/// A fleet in memory: every budget attached keeps `1/replicas` of its floor,
/// or all of it while the fleet "cannot tell" (`replicas` 0), as a store
/// would push it from the background.
#[derive(Debug, Default)]
struct Fleet {
    budgets: std::sync::Mutex<Vec<SharedBudget>>,
    replicas: std::sync::atomic::AtomicU32,
}

impl Fleet {
    fn set(&self, replicas: u32) {
        self.replicas.store(replicas, std::sync::atomic::Ordering::Relaxed);
        for budget in self.budgets.lock().expect("not poisoned").iter() {
            self.tell(budget);
        }
    }

    fn tell(&self, budget: &SharedBudget) -> bool {
        match self.replicas.load(std::sync::atomic::Ordering::Relaxed) {
            0 => budget.keep_whole_floor(),
            n => budget.divide_floor(n),
        }
    }
}

impl BudgetShare for Fleet {
    fn attach_budget(&self, _dependency: &str, budget: SharedBudget) {
        self.tell(&budget);
        self.budgets.lock().expect("not poisoned").push(budget);
    }
}

/// Four replicas' budgets (ratio 0.1, 6 retries a second over 2 s) calling a
/// dependency that never succeeds, on a frozen clock: alone, each spends its
/// whole floor (4 × 12 retries on top of the deposits); shared, the fleet
/// spends the floor once.
#[test]
fn a_shared_floor_is_spent_once_by_the_fleet() {
    let run = |fleet: Option<Arc<Fleet>>| {
        let clock = ManualClock::new();
        let replicas: Vec<RetryBudget> = (0..4)
            .map(|_| {
                let budget = RetryBudget::builder()
                    .ratio(0.1)
                    .min_per_second(6)
                    .window(Duration::from_secs(2))
                    .clock(clock.clone())
                    .build()
                    .expect("valid");
                if let Some(fleet) = &fleet {
                    assert!(budget.share_with(fleet.clone(), "api"));
                }
                budget
            })
            .collect();
        // 100 requests each, every one failing and asking for up to 3 retries.
        (0..100).map(|_| replicas.iter().map(failing_request).sum::<u64>()).sum::<u64>()
    };
    let fleet = Arc::new(Fleet::default());
    fleet.set(4);
    // ratio · 400 requests + 6/s · 2 s, once or four times.
    assert_eq!(run(Some(fleet)), 40 + 12);
    assert_eq!(run(None), 40 + 4 * 12);
}

#[test]
fn the_share_sets_the_floor_and_a_fallback_restores_it() {
    let clock = ManualClock::new();
    let b = RetryBudget::builder().ratio(0.0).min_per_second(10).clock(clock.clone()).build().expect("valid");
    assert!(!b.is_shared());
    assert_eq!(b.floor_replicas(), None);
    let fleet = Arc::new(Fleet::default());
    // Attached while the fleet cannot tell: the whole floor.
    assert!(b.share_with(fleet.clone(), "api"));
    assert!(b.is_shared());
    assert!(!b.share_with(fleet.clone(), "api"), "shared once");
    assert_eq!((b.available(), b.floor_replicas()), (100.0, None));
    fleet.set(3);
    // 100 / 3, rounded down to a thousandth: 33.333 retries, 33 whole.
    assert_eq!((b.available(), b.floor_replicas()), (33.0, Some(3)));
    (0..33).for_each(|_| assert!(b.try_acquire_retry(RetryCause::Transient)));
    assert!(!b.try_acquire_retry(RetryCause::Transient));
    // Redis gone: the whole floor again, less what was spent.
    fleet.set(0);
    assert_eq!((b.available(), b.floor_replicas()), (67.0, None));
    // Back, with more replicas than the floor pays for now: nothing until
    // the retries leave the window, and no retry taken back.
    fleet.set(10);
    assert_eq!(b.available(), 0.0);
    assert!(!b.try_acquire_retry(RetryCause::Transient));
    clock.advance(Duration::from_secs(10));
    assert_eq!(b.available(), 10.0);
    // A share never keeps a budget alive.
    let held = fleet.budgets.lock().expect("not poisoned")[0].clone();
    drop(b);
    assert!(!held.is_alive());
    assert!(!held.divide_floor(2) && !held.keep_whole_floor());
}

#[test]
fn a_throttle_without_a_floor_is_not_shared() {
    let fleet: Arc<dyn BudgetShare> = Arc::new(Fleet::default());
    assert!(!TokenBucket::default().share_floor(fleet.clone(), "api"));
    assert!(!RetryQuota::aws_2026().share_floor(fleet.clone(), "api"));
    assert!(RetryBudget::default().share_floor(fleet, "api"));
}
