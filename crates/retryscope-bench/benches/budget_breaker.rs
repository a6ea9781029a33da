//! The per-call cost of retryscope's fleet-level guards, on one thread and on two
//! threads sharing one instance.
//!
//! - `budget/retry_budget/N`: `RetryBudget::request_started` + `try_acquire_retry`
//!   (what a call that retries once pays). Ratio 1.0, a 1 s window and the
//!   highest floor the builder accepts, so every retry is granted for the whole
//!   run: the granted path (a CAS) is measured, not the cheaper refusal.
//! - `budget/retry_budget_request/N`: `RetryBudget::request_started` alone, what
//!   every request pays when nothing fails: a write to the thread's own lane.
//! - `budget/tower_tps_budget/N`: the peer for `retry_budget`, tower's
//!   `TpsBudget::deposit` + `withdraw`, set up alike: 1 s window, 100 % of
//!   deposits, a floor of a million per second, the largest the budget
//!   accepts (every withdrawal granted).
//! - `budget/token_bucket/N`: `TokenBucket::attempt_finished(true)` +
//!   `try_acquire_retry`, default bucket (stays full, every retry granted).
//! - `budget/circuit_breaker/N`: `CircuitBreaker::try_acquire` + `permit.success()`,
//!   default breaker (stays closed).
//! - `budget/control_clock_read/N`: one `Instant::now()`, which shares nothing
//!   between threads: the control. Its 2-thread / 1-thread ratio is what the
//!   machine gives two threads that do not contend at all (about 1.0 when two
//!   cores are really free; more when other work shares them).
//! - `clock/*`: one read of the clocks the engine, the budget and the breaker use,
//!   to explain the numbers above and in `peers`.
//!
//! `N` is the number of threads. Each thread does every iteration on the shared
//! instance, timing its own loop after a barrier releases all of them (thread
//! start-up is not measured); a sample's time is the slowest thread's. So the
//! reported time per iteration is the time of one operation *per thread*: equal
//! for 1 and 2 threads means the threads did not slow each other down at all,
//! twice means they were fully serialised. All instances use the default clock
//! (tokio's): built without tokio's `test-util`, as here and in production, the
//! budget and the breaker read its coarse reading, the OS's
//! `CLOCK_MONOTONIC_COARSE` (see `retryscope::clock::Clock::now_coarse`).
//!
//! `scripts/bench.sh` runs this and prints the 2-thread / 1-thread table.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use retryscope::budget::{Budget, RetryCause};
use retryscope::clock::{Clock as _, SystemClock};
use retryscope::{CircuitBreaker, RetryBudget, TokenBucket};
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};
use tower::retry::budget::{Budget as _, TpsBudget};

/// Runs `op` `iters` times on each of `threads` threads, all started together;
/// returns the slowest thread's time. `op` returns whether it was granted; more
/// than a rare refusal would mean the bench measured a path it did not mean to,
/// so it fails the run. (retryscope's guards never refuse here: the budget's
/// floor covers every retry of the run, and its withdrawals are exact across
/// slot boundaries. The tolerance is for the peer's.)
fn contend(threads: usize, iters: u64, op: &(impl Fn() -> bool + Sync)) -> Duration {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let start = Instant::now();
                    let mut refused = 0_u64;
                    for _ in 0..iters {
                        refused += u64::from(!black_box(op()));
                    }
                    let elapsed = start.elapsed();
                    assert!(
                        refused * 10_000 <= iters.max(10_000),
                        "a guard refused {refused} of {iters} calls"
                    );
                    elapsed
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a benchmark thread panicked")).max().unwrap_or_default()
    })
}

/// The largest `min_per_second` a `RetryBudget` accepts (its docs' table).
const MAX_MIN_PER_SECOND: u32 = 1_000_000;

fn guards(c: &mut Criterion) {
    let budget = RetryBudget::builder()
        .ratio(1.0)
        .min_per_second(MAX_MIN_PER_SECOND)
        .window(Duration::from_secs(1))
        .build()
        .expect("a valid budget");
    let tps_budget = TpsBudget::new(Duration::from_secs(1), MAX_MIN_PER_SECOND, 1.0);
    let bucket = TokenBucket::default();
    let breaker = CircuitBreaker::default();

    let retry_budget = || {
        budget.request_started();
        budget.try_acquire_retry(RetryCause::Transient)
    };
    let retry_budget_request = || {
        budget.request_started();
        true
    };
    let tower_tps_budget = || {
        tps_budget.deposit();
        tps_budget.withdraw()
    };
    let token_bucket = || {
        bucket.attempt_finished(true);
        bucket.try_acquire_retry(RetryCause::Transient)
    };
    let circuit_breaker = || match breaker.try_acquire() {
        Ok(permit) => {
            permit.success();
            true
        }
        Err(_) => false,
    };

    let origin = Instant::now();
    let control = || black_box(Instant::now()) >= origin;

    let mut g = c.benchmark_group("budget");
    for threads in [1, 2] {
        g.bench_with_input(BenchmarkId::new("control_clock_read", threads), &threads, |b, &n| {
            b.iter_custom(|iters| contend(n, iters, &control))
        });
        g.bench_with_input(BenchmarkId::new("retry_budget", threads), &threads, |b, &n| {
            b.iter_custom(|iters| contend(n, iters, &retry_budget))
        });
        g.bench_with_input(BenchmarkId::new("retry_budget_request", threads), &threads, |b, &n| {
            b.iter_custom(|iters| contend(n, iters, &retry_budget_request))
        });
        g.bench_with_input(BenchmarkId::new("tower_tps_budget", threads), &threads, |b, &n| {
            b.iter_custom(|iters| contend(n, iters, &tower_tps_budget))
        });
        g.bench_with_input(BenchmarkId::new("token_bucket", threads), &threads, |b, &n| {
            b.iter_custom(|iters| contend(n, iters, &token_bucket))
        });
        g.bench_with_input(BenchmarkId::new("circuit_breaker", threads), &threads, |b, &n| {
            b.iter_custom(|iters| contend(n, iters, &circuit_breaker))
        });
    }
    g.finish();
}

/// One clock read: the engine reads tokio's clock (`TokioClock`) at each attempt's
/// start and end; the budget and the breaker read its coarse reading
/// (`system_clock_now_coarse` is the same reading, placed as an `Instant`).
fn clocks(c: &mut Criterion) {
    let mut g = c.benchmark_group("clock");
    g.bench_function("std_instant_now", |b| b.iter(Instant::now));
    g.bench_function("tokio_instant_now", |b| b.iter(tokio::time::Instant::now));
    g.bench_function("system_clock_now_coarse", |b| b.iter(|| SystemClock.now_coarse()));
    g.finish();
}

criterion_group!(budget_breaker, guards, clocks);
criterion_main!(budget_breaker);
