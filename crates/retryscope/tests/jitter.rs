//! Delay formulas: each jitter's range and mean, the cap, decorrelation.

use proptest::prelude::*;
use retryscope::{Jitter, JitterRng, Policy};
use std::time::Duration;

const SAMPLES: u32 = 20_000;

fn policy(jitter: Jitter) -> Policy {
    Policy::builder()
        .base_delay(Duration::from_millis(100))
        .max_delay(Duration::from_secs(10))
        .max_attempts(20)
        .jitter(jitter)
        .build()
        .expect("valid policy")
}

/// Samples the delay of retry `retry` many times; returns (min, max, mean) in ms.
fn sample(jitter: Jitter, retry: u32) -> (f64, f64, f64) {
    let policy = policy(jitter);
    let mut rng = JitterRng::seeded(42);
    let ms: Vec<f64> = (0..SAMPLES)
        .map(|_| policy.delay(retry, policy.base_delay(), &mut rng).as_secs_f64() * 1e3)
        .collect();
    let min = ms.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ms.iter().copied().fold(0.0, f64::max);
    (min, max, ms.iter().sum::<f64>() / f64::from(SAMPLES))
}

#[test]
fn no_jitter_is_the_capped_exponential() {
    let policy = policy(Jitter::None);
    let mut rng = JitterRng::seeded(1);
    let delays: Vec<u128> = (0..10).map(|n| policy.delay(n, Duration::ZERO, &mut rng).as_millis()).collect();
    assert_eq!(delays, [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]);
}

#[test]
fn full_jitter_is_uniform_between_zero_and_the_exponential() {
    // retry 3: d = 800 ms → U(0, 800), mean 400.
    let (min, max, mean) = sample(Jitter::Full, 3);
    assert!((0.0..5.0).contains(&min), "min {min}");
    assert!(max <= 800.0 && max > 795.0, "max {max}");
    assert!((mean - 400.0).abs() < 8.0, "mean {mean}");
}

#[test]
fn equal_jitter_keeps_half_the_exponential() {
    // d = 800 ms → 400 + U(0, 400), mean 600.
    let (min, max, mean) = sample(Jitter::Equal, 3);
    assert!((400.0..405.0).contains(&min), "min {min}");
    assert!(max <= 800.0 && max > 795.0, "max {max}");
    assert!((mean - 600.0).abs() < 5.0, "mean {mean}");
}

#[test]
fn proportional_jitter_adds_up_to_a_fraction() {
    // d = 800 ms, f = 0.5 → 800 + U(0, 400), mean 1000.
    let (min, max, mean) = sample(Jitter::Proportional(0.5), 3);
    assert!((800.0..805.0).contains(&min), "min {min}");
    assert!(max <= 1200.0 && max > 1195.0, "max {max}");
    assert!((mean - 1000.0).abs() < 5.0, "mean {mean}");
}

#[test]
fn proportional_jitter_keeps_its_spread_below_the_cap() {
    // retry 7: d = 10 s (capped), f = 0.5 → the 5 s window slides below the cap: U(5 s, 10 s).
    let (min, max, mean) = sample(Jitter::Proportional(0.5), 7);
    assert!((5_000.0..5_010.0).contains(&min), "min {min}");
    assert!(max <= 10_000.0 && max > 9_990.0, "max {max}");
    assert!((mean - 7_500.0).abs() < 40.0, "mean {mean}");
}

#[test]
fn clients_at_the_cap_do_not_all_wait_the_cap() {
    // The report: Proportional(0.3) with a 60 s cap gave 1,000 seeds one delay, exactly 60 s.
    let policy = Policy::builder()
        .base_delay(Duration::from_secs(1))
        .max_delay(Duration::from_secs(60))
        .max_attempts(20)
        .jitter(Jitter::Proportional(0.3))
        .build()
        .expect("valid policy");
    let delays: std::collections::BTreeSet<Duration> =
        (0..1_000).map(|seed| policy.delay(12, policy.base_delay(), &mut JitterRng::seeded(seed))).collect();
    assert!(delays.len() > 990, "{} distinct delays of 1,000", delays.len());
    let (first, last) = (delays.first().copied(), delays.last().copied());
    assert!(first.is_some_and(|d| d >= Duration::from_secs(42)), "shortest {first:?}");
    assert!(last.is_some_and(|d| d <= Duration::from_secs(60)), "longest {last:?}");
}

#[test]
fn decorrelated_jitter_depends_on_the_previous_delay() {
    let policy = policy(Jitter::Decorrelated);
    let mut rng = JitterRng::seeded(7);
    let mut mean_after = |previous: Duration| {
        let total: Duration = (0..SAMPLES).map(|_| policy.delay(0, previous, &mut rng)).sum();
        (total / SAMPLES).as_secs_f64() * 1e3
    };
    // U(base, 3·prev): prev = 100 ms → mean 200; prev = 1 s → mean 1550.
    let short = mean_after(Duration::from_millis(100));
    let long = mean_after(Duration::from_secs(1));
    assert!((short - 200.0).abs() < 3.0, "mean after 100 ms: {short}");
    assert!((long - 1550.0).abs() < 20.0, "mean after 1 s: {long}");
}

#[test]
fn decorrelated_jitter_stays_between_base_and_cap() {
    let policy = policy(Jitter::Decorrelated);
    let mut backoff = policy.backoff();
    let mut rng = JitterRng::seeded(3);
    for _ in 0..1_000 {
        let d = backoff.next_delay(&mut rng);
        assert!(d >= policy.base_delay() && d <= policy.max_delay(), "{d:?}");
    }
}

#[test]
fn same_seed_same_delays() {
    let policy = policy(Jitter::Full);
    let run = |seed| {
        let mut rng = JitterRng::seeded(seed);
        let mut backoff = policy.backoff();
        (0..10).map(|_| backoff.next_delay(&mut rng)).collect::<Vec<_>>()
    };
    assert_eq!(run(9), run(9));
    assert_ne!(run(9), run(10));
}

fn any_jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![
        Just(Jitter::None),
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated),
        (0.0f64..100.0).prop_map(Jitter::Proportional),
    ]
}

proptest! {
    /// Whatever valid settings, no delay exceeds the cap, and only decorrelated
    /// jitter (whose floor is the base) or none/equal/proportional ever return
    /// more than zero at minimum.
    #[test]
    fn delays_never_exceed_the_cap(
        base_ms in 1u64..10_000,
        cap_factor in 1u64..1_000,
        multiplier in 1.01f64..10.0,
        jitter in any_jitter(),
        seed in any::<u64>(),
        retries in 1usize..64,
    ) {
        let base = Duration::from_millis(base_ms);
        let cap = (base * u32::try_from(cap_factor).unwrap_or(1)).min(retryscope::MAX_DURATION);
        let policy = Policy::builder()
            .base_delay(base).max_delay(cap).multiplier(multiplier).jitter(jitter)
            .build().expect("valid settings");
        let mut backoff = policy.backoff();
        let mut rng = JitterRng::seeded(seed);
        for n in 0..retries {
            let d = backoff.next_delay(&mut rng);
            prop_assert!(d <= cap, "retry {n}: {d:?} > cap {cap:?}");
            let exp = policy.exponential_delay(u32::try_from(n).unwrap_or(u32::MAX));
            match jitter {
                Jitter::None => prop_assert_eq!(d, exp),
                Jitter::Full => prop_assert!(d <= exp),
                Jitter::Equal => prop_assert!(d >= exp / 2 && d <= exp),
                Jitter::Decorrelated => prop_assert!(d >= base),
                // Below the cap `d ≥ exp`; at the cap the window `f · exp` wide ends at the cap.
                Jitter::Proportional(f) => {
                    let spread = Duration::try_from_secs_f64(exp.as_secs_f64() * f).unwrap_or(cap);
                    let floor = exp.saturating_add(spread).min(cap).saturating_sub(spread);
                    prop_assert!(d + Duration::from_micros(1) >= floor, "{d:?} below {floor:?}");
                }
                // `Jitter` may grow: a new variant needs its own bound here.
                other => prop_assert!(false, "no bound checked for {:?}", other),
            }
        }
    }
}

/// gRFC A6 (since grpc/proposal#452): retry `n` waits
/// `min(initialBackoff · multiplier^(n-1), maxBackoff) · random(0.8, 1.2)`. Over
/// many seeds the ratio to the capped exponential stays within [0.8, 1.2] and
/// reaches both ends, at every step, the capped ones included.
#[test]
fn grpc_jitter_is_a_fifth_either_side_of_the_capped_exponential() {
    let policy = Policy::builder()
        .base_delay(Duration::from_millis(100))
        .max_delay(Duration::from_secs(1))
        .multiplier(2.0)
        .jitter(Jitter::Grpc)
        .build()
        .expect("valid policy");
    for retry in 0..8 {
        let exp = policy.exponential_delay(retry);
        let (mut low, mut high) = (f64::INFINITY, 0.0f64);
        for seed in 0..5_000 {
            let mut rng = JitterRng::seeded(seed);
            let ratio = policy.delay(retry, policy.base_delay(), &mut rng).as_secs_f64() / exp.as_secs_f64();
            (low, high) = (low.min(ratio), high.max(ratio));
        }
        assert!((0.8..0.801).contains(&low), "retry {retry}: lowest ratio {low}");
        assert!(high > 1.199 && high <= 1.2 + 1e-9, "retry {retry}: highest ratio {high}");
    }
    // At the cap the wait goes past maxBackoff, as A6 notes it may.
    let mut rng = JitterRng::seeded(3);
    let above = (0..100).map(|_| policy.delay(7, policy.base_delay(), &mut rng)).max();
    assert!(above > Some(Duration::from_millis(1_150)), "{above:?}");
}

/// A6 lets `backoffMultiplier` be anything above 0: below 1 each retry waits
/// less than the one before.
#[test]
fn a_multiplier_below_one_shrinks_the_delay() {
    let policy = Policy::builder()
        .base_delay(Duration::from_millis(800))
        .max_delay(Duration::from_secs(1))
        .multiplier(0.5)
        .jitter(Jitter::None)
        .build()
        .expect("valid policy");
    let mut rng = JitterRng::seeded(1);
    let delays: Vec<u128> = (0..4).map(|n| policy.delay(n, Duration::ZERO, &mut rng).as_millis()).collect();
    assert_eq!(delays, [800, 400, 200, 100]);
}
