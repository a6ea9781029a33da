//! The circuit breaker, specified on a manual clock.

use super::word::GENERATION_MASK;
use super::*;
use crate::clock::ManualClock;
use std::sync::Barrier;
use std::sync::atomic::AtomicUsize;

const COOL_DOWN: Duration = Duration::from_secs(5);

fn breaker(clock: &ManualClock) -> CircuitBreaker {
    CircuitBreaker::builder().clock(clock.clone()).build().expect("defaults are valid")
}

fn call(b: &CircuitBreaker, success: bool) {
    let permit = b.try_acquire().expect("breaker should admit the call");
    if success { permit.success() } else { permit.failure() }
}

fn calls(b: &CircuitBreaker, n: usize, success: bool) {
    (0..n).for_each(|_| call(b, success));
}

/// A default breaker driven open by 20 failures.
fn opened(clock: &ManualClock) -> CircuitBreaker {
    let b = breaker(clock);
    calls(&b, 20, false);
    assert_eq!(b.state(), BreakerState::Open);
    b
}

/// A default breaker that is half-open, holding its first probe.
fn half_open(clock: &ManualClock) -> (CircuitBreaker, BreakerPermit) {
    let b = opened(clock);
    clock.advance(COOL_DOWN);
    let probe = b.try_acquire().expect("cool-down elapsed");
    assert_eq!(b.state(), BreakerState::HalfOpen);
    (b, probe)
}

#[test]
fn stays_closed_below_min_calls_even_at_full_failure() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    calls(&b, 19, false);
    assert_eq!(b.state(), BreakerState::Closed);
    call(&b, false);
    assert_eq!(b.state(), BreakerState::Open);
}

#[test]
fn opens_exactly_at_the_ratio() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    calls(&b, 11, true);
    calls(&b, 9, false);
    // 9 / 20 and then 10 / 21 are below 0.5.
    assert_eq!(b.state(), BreakerState::Closed);
    call(&b, false);
    assert_eq!(b.state(), BreakerState::Closed);
    // 11 / 22 reaches it.
    call(&b, false);
    assert_eq!(b.state(), BreakerState::Open);
}

#[test]
fn rejects_while_open_with_the_time_left() {
    let clock = ManualClock::new();
    let b = opened(&clock);
    assert_eq!(b.try_acquire().expect_err("open").retry_in, COOL_DOWN);
    clock.advance(Duration::from_millis(2_250));
    let refused = b.try_acquire().expect_err("open");
    assert_eq!(refused.retry_in, Duration::from_millis(2_750));
    assert!(refused.to_string().contains("open"), "{refused}");
    clock.advance(Duration::from_millis(2_749));
    assert_eq!(b.try_acquire().expect_err("open").retry_in, Duration::from_millis(1));
    // Still reported open until someone asks after the cool-down.
    clock.advance(Duration::from_millis(1));
    assert_eq!(b.state(), BreakerState::Open);
    let _probe = b.try_acquire().expect("cool-down elapsed");
    assert_eq!(b.state(), BreakerState::HalfOpen);
}

#[test]
fn half_open_admits_exactly_the_probe_count() {
    let clock = ManualClock::new();
    let (b, first) = half_open(&clock);
    let second = b.try_acquire().expect("probe 2");
    let third = b.try_acquire().expect("probe 3");
    let refused = b.try_acquire().expect_err("probe slots full");
    assert_eq!(refused.retry_in, DEFAULT_PROBE_TIMEOUT);
    assert!(refused.to_string().contains("half-open"), "{refused}");
    drop((first, second, third));
}

#[test]
fn successful_probes_close_with_a_fresh_window() {
    let clock = ManualClock::new();
    let (b, first) = half_open(&clock);
    first.success();
    call(&b, true);
    assert_eq!(b.state(), BreakerState::HalfOpen);
    call(&b, true);
    assert_eq!(b.state(), BreakerState::Closed);
    // The 20 failures that opened it are gone: 19 more do not reopen it.
    calls(&b, 19, false);
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn a_failed_probe_reopens_with_a_fresh_cool_down() {
    let clock = ManualClock::new();
    let (b, first) = half_open(&clock);
    let second = b.try_acquire().expect("probe 2");
    clock.advance(Duration::from_secs(1));
    first.success();
    second.failure();
    assert_eq!(b.state(), BreakerState::Open);
    assert_eq!(b.try_acquire().expect_err("open").retry_in, COOL_DOWN);
}

#[test]
fn a_dropped_probe_frees_its_slot_and_records_nothing() {
    let clock = ManualClock::new();
    let (b, first) = half_open(&clock);
    let second = b.try_acquire().expect("probe 2");
    let third = b.try_acquire().expect("probe 3");
    drop(second);
    let fourth = b.try_acquire().expect("the dropped probe's slot");
    assert!(b.try_acquire().is_err());
    // Three successes are still needed: the dropped one did not count.
    first.success();
    third.success();
    assert_eq!(b.state(), BreakerState::HalfOpen);
    fourth.success();
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn lost_probes_are_replaced_after_the_probe_timeout() {
    let clock = ManualClock::new();
    let (b, first) = half_open(&clock);
    clock.advance(Duration::from_secs(10));
    let second = b.try_acquire().expect("probe 2");
    let third = b.try_acquire().expect("probe 3");
    // Every slot is held by a call that never reports back. Until the
    // youngest of them is probe_timeout old, callers are turned away.
    clock.advance(Duration::from_secs(12));
    let refused = b.try_acquire().expect_err("slots full");
    assert_eq!(refused.retry_in, DEFAULT_PROBE_TIMEOUT - Duration::from_secs(12));
    clock.advance(DEFAULT_PROBE_TIMEOUT - Duration::from_secs(12) - Duration::from_millis(1));
    assert_eq!(b.try_acquire().expect_err("slots full").retry_in, Duration::from_millis(1));
    clock.advance(Duration::from_millis(1));
    let fresh = b.try_acquire().expect("the lost probes are replaced");
    assert_eq!(b.state(), BreakerState::HalfOpen);
    // One slot of a fresh period: two more probes, then full again.
    let fresh_2 = b.try_acquire().expect("fresh probe 2");
    let fresh_3 = b.try_acquire().expect("fresh probe 3");
    assert!(b.try_acquire().is_err());
    // The lost probes finally answer: their period is over, so neither a
    // failure nor successes change anything.
    first.failure();
    second.success();
    third.success();
    assert_eq!(b.state(), BreakerState::HalfOpen);
    assert!(b.try_acquire().is_err(), "stale outcomes freed no slot");
    [fresh, fresh_2, fresh_3].into_iter().for_each(BreakerPermit::success);
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn a_failed_replacement_probe_reopens() {
    let clock = ManualClock::new();
    let b = CircuitBreaker::builder()
        .min_calls(1)
        .half_open_probes(1)
        .probe_timeout(Duration::from_secs(2))
        .clock(clock.clone())
        .build()
        .expect("valid");
    call(&b, false);
    clock.advance(COOL_DOWN);
    let _hung = b.try_acquire().expect("probe");
    clock.advance(Duration::from_millis(1_999));
    assert!(b.try_acquire().is_err());
    clock.advance(Duration::from_millis(1));
    b.try_acquire().expect("replacement probe").failure();
    assert_eq!(b.state(), BreakerState::Open);
    assert_eq!(b.try_acquire().expect_err("open").retry_in, COOL_DOWN);
}

#[test]
fn a_straggling_note_never_hides_a_newer_period() {
    let clock = ManualClock::new();
    let b = CircuitBreaker::builder().clock(clock.clone()).build().expect("valid");
    let inner = &b.inner;
    inner.probe_granted(7, Duration::from_secs(3));
    // An older generation, or the same one at an earlier time, is ignored.
    inner.probe_granted(6, Duration::from_secs(9));
    inner.probe_granted(7, Duration::from_secs(2));
    assert_eq!(
        LastProbe::unpack(inner.last_probe.load(Ordering::SeqCst)),
        LastProbe { generation: 7, at_ms: 3_000 }
    );
    let timeout = DEFAULT_PROBE_TIMEOUT;
    assert_eq!(inner.until_probes_lost(6, Duration::from_secs(100)), timeout, "another period's note");
    assert_eq!(inner.until_probes_lost(7, Duration::from_secs(32)), Duration::from_secs(1));
    assert_eq!(inner.until_probes_lost(7, Duration::from_secs(33)), Duration::ZERO);
    assert_eq!(inner.until_probes_lost(7, Duration::from_secs(2)), timeout, "an older reading of the clock");
    // Generations wrap: 0 comes after the last one.
    let last = LastProbe { generation: GENERATION_MASK as u32, at_ms: 50_000 };
    let wrapped = LastProbe { generation: 0, at_ms: 1_000 };
    assert!(wrapped.is_after(last) && !last.is_after(wrapped));
}

#[test]
fn outcomes_from_an_earlier_phase_are_ignored() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let straggler = b.try_acquire().expect("closed");
    calls(&b, 20, false);
    // Finishes while open: not recorded, no state change.
    straggler.success();
    assert_eq!(b.state(), BreakerState::Open);
    clock.advance(COOL_DOWN);
    let old_probe = b.try_acquire().expect("probe");
    call(&b, false);
    clock.advance(COOL_DOWN);
    let _probe = b.try_acquire().expect("probe of the next half-open period");
    // A probe from the previous half-open period neither counts as a
    // success nor frees a slot of this one.
    old_probe.success();
    let _second = b.try_acquire().expect("probe 2");
    let _third = b.try_acquire().expect("probe 3");
    assert!(b.try_acquire().is_err());
    assert_eq!(b.state(), BreakerState::HalfOpen);
}

#[test]
fn failures_older_than_the_window_do_not_count() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    calls(&b, 19, false);
    clock.advance(Duration::from_secs(10));
    calls(&b, 19, false);
    assert_eq!(b.state(), BreakerState::Closed);
    // Half a window later the 19 recent ones still count.
    clock.advance(Duration::from_secs(5));
    call(&b, false);
    assert_eq!(b.state(), BreakerState::Open);
}

#[test]
fn exactly_one_thread_opens_half_open_and_probes_are_capped() {
    let clock = ManualClock::new();
    let b = opened(&clock);
    clock.advance(COOL_DOWN);
    let barrier = Barrier::new(8);
    let permits: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    b.try_acquire().ok()
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().expect("no panic")).collect()
    });
    assert_eq!(permits.len(), 3);
    assert_eq!(b.state(), BreakerState::HalfOpen);
    permits.into_iter().for_each(BreakerPermit::success);
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn hammering_a_healthy_breaker_keeps_it_closed() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let admitted = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for i in 0..10_000 {
                    if let Ok(permit) = b.try_acquire() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                        // 10 % failures, below the 50 % threshold.
                        if i % 10 == 0 { permit.failure() } else { permit.success() }
                    }
                }
            });
        }
    });
    assert_eq!(admitted.load(Ordering::Relaxed), 40_000);
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn hammering_a_failing_breaker_opens_it_once() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let admitted = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..10_000 {
                    if let Ok(permit) = b.try_acquire() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                        permit.failure();
                    }
                }
            });
        }
    });
    let admitted = admitted.load(Ordering::Relaxed);
    // min_calls went through, plus at most one record and one permit in
    // flight per thread racing the opening; with time frozen, every later
    // call was refused.
    assert!((20..=28).contains(&admitted), "{admitted}");
    assert_eq!(b.state(), BreakerState::Open);
    assert_eq!(Word::unpack(b.inner.state.load(Ordering::SeqCst)).generation, 1);
}

#[test]
fn builder_rejects_bad_settings() {
    let b = CircuitBreaker::builder;
    let cases = [
        (b().failure_ratio(f64::NAN).build().err(), "failure_ratio"),
        (b().failure_ratio(0.0).build().err(), "failure_ratio"),
        (b().failure_ratio(1.5).build().err(), "failure_ratio"),
        (b().min_calls(0).build().err(), "min_calls"),
        (b().window(Duration::ZERO).build().err(), "window"),
        (b().window(Duration::from_secs(7_200)).build().err(), "window"),
        (b().cool_down(Duration::ZERO).build().err(), "cool_down"),
        (b().cool_down(Duration::from_secs(86_401)).build().err(), "cool_down"),
        (b().half_open_probes(0).build().err(), "half_open_probes"),
        (b().half_open_probes(65_536).build().err(), "half_open_probes"),
        (b().probe_timeout(Duration::ZERO).build().err(), "probe_timeout"),
        (b().probe_timeout(Duration::from_secs(86_401)).build().err(), "probe_timeout"),
    ];
    for (err, name) in cases {
        let err = err.unwrap_or_else(|| panic!("{name} must be rejected"));
        assert!(err.to_string().contains(name), "{err}");
    }
    assert!(b().failure_ratio(1.0).min_calls(1).half_open_probes(65_535).build().is_ok());
}

#[test]
fn state_names_and_gauge_values() {
    let all = [BreakerState::Closed, BreakerState::HalfOpen, BreakerState::Open];
    assert_eq!(all.map(BreakerState::as_gauge), [0, 1, 2]);
    assert_eq!(all.map(BreakerState::as_str), ["closed", "half-open", "open"]);
    assert_eq!(BreakerState::HalfOpen.to_string(), "half-open");
}

#[test]
fn state_word_round_trips() {
    let words = [
        Word { generation: 0, phase: Phase::Closed },
        Word { generation: (1 << 22) - 1, phase: Phase::HalfOpen { in_flight: 65_535, successes: 7 } },
        Word { generation: 5, phase: Phase::Open { until_ms: PAYLOAD_MASK } },
    ];
    for w in words {
        assert_eq!(Word::unpack(w.pack()), w);
    }
    let last = Word { generation: (1 << 22) - 1, phase: Phase::Closed };
    assert_eq!(last.advance(Phase::Closed).generation, 0);
}
