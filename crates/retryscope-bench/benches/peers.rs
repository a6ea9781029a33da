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
//! a total deadline, which arms a per-attempt time limit if the attempt is not
//! ready at once), `happy/retryscope_budget` (the engine counting each request
//! in one shared `RetryBudget`) and
//! `failure/tower_sleep0` (tower with a real zero-length tokio sleep between
//! attempts, the way backon, tokio-retry2 and retryscope wait).
//!
//! `scripts/bench.sh` runs this and prints the ratio table.

mod contenders;

use contenders::*;
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use tokio::runtime::Runtime;
use tower::ServiceExt as _;

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
        // One budget shared by every call, as a service keeps one per dependency.
        let budgeted =
            retryscope::dependency::Dependency::new("bench").with_budget(retryscope::RetryBudget::default());
        g.bench_function("retryscope_budget", |b| {
            b.to_async(&rt).iter(|| async {
                let flaky = Flaky::new(failures);
                retryscope::Retryable::retry(|| flaky.call(), policy).dependency(&budgeted).await
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
