//! retryscope's async retry loop against its peers: backon, tower's retry
//! middleware and tokio-retry2, on the same operation and the same harness.
//!
//! Every contender is awaited on one tokio current-thread runtime (timer enabled)
//! through criterion's `to_async`, which runs all of a sample's iterations inside
//! a single `block_on`. Each iteration builds a fresh operation and a fresh retry
//! wrapper (that is how each crate is used per call) and awaits it.
//!
//! - `happy/*`: the operation succeeds on its first poll. `happy/direct` awaits it
//!   with no retry wrapper at all: the floor every wrapper adds its overhead to.
//! - `failure/*`: the operation fails three times, then succeeds; every contender
//!   allows exactly three retries, with the shortest delay its API accepts (see
//!   each function). `failure/hand_loop` is a bare `loop` that retries at once:
//!   the floor.
//!
//! Rows marked *extra* in `scripts/bench.sh` are not contenders for "best peer"
//! (they show what a setting costs): `happy/retryscope_deadline` (the engine with
//! a total deadline, which arms a per-attempt time limit) and
//! `failure/tower_sleep0` (tower with a real zero-length tokio sleep between
//! attempts, the way backon, tokio-retry2 and retryscope wait).
//!
//! `scripts/bench.sh` runs this and prints the ratio table.

use backon::ConstantBuilder;
use criterion::{Criterion, criterion_group, criterion_main};
use retryscope::{Jitter, Policy};
use std::cell::Cell;
use std::future::{Ready, ready};
use std::hint::black_box;
use std::time::Duration;
use tokio::runtime::Runtime;
use tower::ServiceExt as _;

/// How often the failure-path operation fails before it succeeds.
const FAILURES: u32 = 3;

/// The error every contender retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Busy;

/// An async operation that fails `failures` times, then succeeds. Its future is
/// ready on the first poll, so what is measured is the retry machinery.
struct Flaky {
    failures: u32,
    calls: Cell<u32>,
}

impl Flaky {
    fn new(failures: u32) -> Self {
        // `black_box` keeps the compiler from deciding the outcome at build time.
        Self { failures: black_box(failures), calls: Cell::new(0) }
    }

    fn call(&self) -> Ready<Result<u64, Busy>> {
        let n = self.calls.get();
        self.calls.set(n + 1);
        ready(if n < self.failures { Err(Busy) } else { Ok(black_box(42)) })
    }
}

/// retryscope: 4 attempts (3 retries), 1 ns base delay capped at 1 ns (the
/// smallest the policy accepts: base and cap must be > 0, the multiplier > 1),
/// no jitter, no deadline (so no per-attempt time limit is armed), default
/// classifier (every `Err` is retryable), no observer. Each wait is a
/// `tokio::time::sleep(1 ns)`.
fn retryscope_policy() -> Policy {
    Policy::builder()
        .max_attempts(FAILURES + 1)
        .base_delay(Duration::from_nanos(1))
        .max_delay(Duration::from_nanos(1))
        .multiplier(2.0)
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("a valid policy")
}

/// retryscope with the engine's default 15 s deadline (the `interactive`
/// preset's), everything else as [`retryscope_policy`]: each attempt then runs
/// under a time limit, a `tokio::time::Sleep` created per attempt.
fn retryscope_deadline_policy() -> Policy {
    retryscope_policy().to_builder().deadline(Duration::from_secs(15)).build().expect("a valid policy")
}

/// backon: a constant backoff of `Duration::ZERO` (allowed), 3 retries, no
/// jitter (the default), default sleeper (`tokio::time::sleep`), every `Err`
/// retryable (the default).
fn backon_builder() -> ConstantBuilder {
    ConstantBuilder::new().with_delay(Duration::ZERO).with_max_times(FAILURES as usize)
}

/// tower: a [`tower::retry::Policy`] allowing 3 retries whose "backoff" future
/// is `std::future::Ready<()>`: tower leaves waiting to the policy, so zero
/// delay means no timer at all.
#[derive(Debug, Clone, Copy)]
struct TowerRetries(u32);

impl tower::retry::Policy<(), u64, Busy> for TowerRetries {
    type Future = Ready<()>;

    fn retry(&mut self, _: &mut (), result: &mut Result<u64, Busy>) -> Option<Self::Future> {
        match result {
            Err(_) if self.0 > 0 => {
                self.0 -= 1;
                Some(ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, _: &()) -> Option<()> {
        Some(())
    }
}

/// tower as [`TowerRetries`], but waiting `tokio::time::sleep(Duration::ZERO)`
/// between attempts, as the timer-based contenders do (an *extra* row).
#[derive(Debug, Clone, Copy)]
struct TowerRetriesSleep0(u32);

impl tower::retry::Policy<(), u64, Busy> for TowerRetriesSleep0 {
    type Future = tokio::time::Sleep;

    fn retry(&mut self, _: &mut (), result: &mut Result<u64, Busy>) -> Option<Self::Future> {
        match result {
            Err(_) if self.0 > 0 => {
                self.0 -= 1;
                Some(tokio::time::sleep(Duration::ZERO))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, _: &()) -> Option<()> {
        Some(())
    }
}

/// tokio-retry2: `FixedInterval(Duration::ZERO)` taken 3 times; the operation's
/// error is mapped to `RetryError::Transient` (the crate's API requires the
/// action to say so). Each wait is a `tokio::time::sleep_until(now)`.
fn tokio_retry2_strategy() -> std::iter::Take<tokio_retry2::strategy::FixedInterval> {
    tokio_retry2::strategy::FixedInterval::new(Duration::ZERO).take(FAILURES as usize)
}

async fn tokio_retry2_call(flaky: &Flaky) -> Result<u64, Busy> {
    tokio_retry2::Retry::spawn(tokio_retry2_strategy(), || async {
        flaky.call().await.map_err(tokio_retry2::RetryError::transient)
    })
    .await
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a tokio runtime")
}

/// Registers every contender on an operation that fails `failures` times.
fn contenders(c: &mut Criterion, group: &str, failures: u32) {
    let rt = runtime();
    let policy = retryscope_policy();
    let mut g = c.benchmark_group(group);

    if failures == 0 {
        g.bench_function("direct", |b| {
            b.to_async(&rt).iter(|| async {
                let flaky = Flaky::new(failures);
                flaky.call().await
            })
        });
    } else {
        g.bench_function("hand_loop", |b| {
            b.to_async(&rt).iter(|| async {
                let flaky = Flaky::new(failures);
                let mut retries = 0;
                loop {
                    match flaky.call().await {
                        Err(e) if retries < FAILURES => {
                            black_box(e);
                            retries += 1;
                        }
                        result => break result,
                    }
                }
            })
        });
    }
    g.bench_function("retryscope", |b| {
        b.to_async(&rt).iter(|| async {
            let flaky = Flaky::new(failures);
            retryscope::Retryable::retry(|| flaky.call(), policy).await
        })
    });
    if failures == 0 {
        let with_deadline = retryscope_deadline_policy();
        g.bench_function("retryscope_deadline", |b| {
            b.to_async(&rt).iter(|| async {
                let flaky = Flaky::new(failures);
                retryscope::Retryable::retry(|| flaky.call(), with_deadline).await
            })
        });
    }
    g.bench_function("backon", |b| {
        b.to_async(&rt).iter(|| async {
            let flaky = Flaky::new(failures);
            backon::Retryable::retry(|| flaky.call(), backon_builder()).await
        })
    });
    g.bench_function("tower", |b| {
        b.to_async(&rt).iter(|| async {
            let flaky = Flaky::new(failures);
            let service = tower::service_fn(|()| flaky.call());
            tower::retry::Retry::new(TowerRetries(FAILURES), service).oneshot(()).await
        })
    });
    if failures > 0 {
        g.bench_function("tower_sleep0", |b| {
            b.to_async(&rt).iter(|| async {
                let flaky = Flaky::new(failures);
                let service = tower::service_fn(|()| flaky.call());
                tower::retry::Retry::new(TowerRetriesSleep0(FAILURES), service).oneshot(()).await
            })
        });
    }
    g.bench_function("tokio_retry2", |b| {
        b.to_async(&rt).iter(|| async {
            let flaky = Flaky::new(failures);
            tokio_retry2_call(&flaky).await
        })
    });
    g.finish();
}

fn happy(c: &mut Criterion) {
    contenders(c, "happy", 0);
}

fn failure(c: &mut Criterion) {
    contenders(c, "failure", FAILURES);
}

/// Checks, outside any measurement, that every contender really retries three
/// times and then returns the success: a bench of a misconfigured contender
/// would measure nothing useful.
fn sanity() {
    let rt = runtime();
    rt.block_on(async {
        let check = |flaky: &Flaky, result: Result<u64, Busy>, name: &str| {
            assert_eq!(result, Ok(42), "{name}");
            assert_eq!(flaky.calls.get(), FAILURES + 1, "{name}");
        };
        let flaky = Flaky::new(FAILURES);
        let r = retryscope::Retryable::retry(|| flaky.call(), retryscope_policy()).await;
        check(&flaky, r.map_err(|_| Busy), "retryscope");
        let flaky = Flaky::new(FAILURES);
        let r = backon::Retryable::retry(|| flaky.call(), backon_builder()).await;
        check(&flaky, r, "backon");
        let flaky = Flaky::new(FAILURES);
        let r = tower::retry::Retry::new(TowerRetries(FAILURES), tower::service_fn(|()| flaky.call()))
            .oneshot(())
            .await;
        check(&flaky, r, "tower");
        let flaky = Flaky::new(FAILURES);
        let r = tokio_retry2_call(&flaky).await;
        check(&flaky, r, "tokio_retry2");
    });
}

fn benches(c: &mut Criterion) {
    sanity();
    happy(c);
    failure(c);
}

criterion_group!(peers, benches);
criterion_main!(peers);
