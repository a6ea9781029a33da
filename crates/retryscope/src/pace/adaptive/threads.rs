//! Adaptive mode under real contention: four OS threads sending through one
//! shared limiter, in lockstep with a hand-driven clock, so that what the
//! bucket allowed over any window is known exactly and every send is counted
//! against it.
//!
//! Each step the driver moves the clock on, then the four threads send at
//! once, each as long as the limiter says `Send` (each send answered at once),
//! until told to wait; then the driver reads the allowed rate, which stands
//! until the next step. Over steps `a+1..=b` the bucket can have handed out at
//! most what it held after step `a` (not more than its capacity, the rate
//! itself or one token) plus what it filled at the rates in force since:
//! `max(1, rate_a) + Σ_{k=a}^{b-1} rate_k · step`.

use super::{AdaptiveRate, Admission, Answer};
use crate::clock::{Clock, ManualClock};
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const THREADS: usize = 4;
/// The slowest allowed rate, in sends per second (`AdaptiveRate`'s limits).
const MIN_FILL_RATE: f64 = 0.5;

/// What one step saw: sends admitted, and the allowed rate after them.
struct Step {
    sends: u64,
    rate: f64,
}

/// Runs `steps` steps of `step` each on a limiter throttled once at the start
/// (so it is in force from the first send), answering the n-th send with
/// `answer(n)`. The first entry is the state before step 1.
fn run(steps: usize, step: Duration, answer: impl Fn(u64) -> Answer + Sync) -> Vec<Step> {
    let clock = ManualClock::new();
    let limiter = AdaptiveRate::new(clock.now());
    limiter.record(clock.now(), Answer::Throttled);
    let start = Barrier::new(THREADS + 1);
    let end = Barrier::new(THREADS + 1);
    let sent = AtomicU64::new(0);
    let answered = AtomicU64::new(0);
    let mut seen = vec![Step { sends: 0, rate: limiter.allowed_rate().expect("in force") }];
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..steps {
                    start.wait();
                    loop {
                        match limiter.acquire(clock.now()) {
                            Admission::Send => {
                                sent.fetch_add(1, Ordering::Relaxed);
                                let n = answered.fetch_add(1, Ordering::Relaxed);
                                limiter.record(clock.now(), answer(n));
                            }
                            Admission::Wait(wait) => {
                                // Never zero (no spinning), never beyond one
                                // token at the slowest rate.
                                let longest = Duration::from_secs_f64(1.0 / MIN_FILL_RATE);
                                assert!(!wait.is_zero() && wait <= longest, "{wait:?}");
                                break;
                            }
                        }
                    }
                    end.wait();
                }
            });
        }
        for _ in 0..steps {
            clock.advance(step);
            start.wait();
            end.wait();
            let rate = limiter.allowed_rate().expect("stays in force");
            assert!(rate.is_finite() && rate >= MIN_FILL_RATE, "{rate}");
            seen.push(Step { sends: sent.swap(0, Ordering::Relaxed), rate });
        }
    });
    seen
}

/// Checks every window of each length against what the bucket could have
/// handed out in it, and returns the total sent.
fn assert_within_the_bucket(seen: &[Step], step: Duration, lengths: &[usize]) -> u64 {
    let step = step.as_secs_f64();
    let mut sends = vec![0_u64];
    let mut filled = vec![0.0_f64];
    for (k, entry) in seen.iter().enumerate() {
        if k > 0 {
            sends.push(sends[k - 1] + entry.sends);
            filled.push(filled[k - 1] + seen[k - 1].rate * step);
        }
    }
    for &length in lengths {
        for a in 0..seen.len().saturating_sub(length) {
            let b = a + length;
            let sent = sends[b] - sends[a];
            // A shortfall under a microsecond's filling is granted as float
            // rounding: allow that per send on top.
            let allowed = seen[a].rate.max(1.0) + (filled[b] - filled[a]) + 1e-6 * sent as f64;
            assert!(sent as f64 <= allowed, "steps {a}..{b}: {sent} sends, the bucket allowed {allowed}");
        }
    }
    sends[seen.len() - 1]
}

#[test]
fn a_client_throttled_on_every_answer_sends_one_call_every_two_seconds_however_many_threads_try() {
    let step = Duration::from_millis(10);
    let seen = run(6_000, step, |_| Answer::Throttled);
    assert!(seen.iter().all(|entry| entry.rate == MIN_FILL_RATE));
    let total = assert_within_the_bucket(&seen, step, &[1, 10, 100, 200, 1_000, 3_000]);
    // 60 s at half a call a second, from an empty bucket: exactly 30.
    assert_eq!(total, 30);
}

#[test]
fn four_threads_climbing_and_being_throttled_never_outrun_the_bucket() {
    let step = Duration::from_millis(5);
    // One answer in 25 throttled: the rate climbs, is cut, climbs again.
    let seen = run(4_000, step, |n| if n % 25 == 24 { Answer::Throttled } else { Answer::Other });
    let total = assert_within_the_bucket(&seen, step, &[1, 2, 10, 100, 400, 1_000, 4_000]);
    let peak = seen.iter().map(|entry| entry.rate).fold(0.0, f64::max);
    // It did climb well above the floor, and sent accordingly (20 s).
    assert!(peak > 10.0, "the allowed rate peaked at {peak}");
    assert!(total > 150, "{total} sends in 20 s");
}
