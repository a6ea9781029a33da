//! Model checks of the lock-free guards with loom: every interleaving of two or
//! three threads (up to a preemption bound) keeps the documented invariants.
//!
//! Run with
//!
//! ```text
//! RUSTFLAGS="--cfg retryscope_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test -p retryscope --test loom --release
//! ```
//!
//! `LOOM_MAX_PREEMPTIONS` overrides the preemption bound each model sets.
//!
//! The guards spread their hot counters over per-thread *lanes*. Under loom
//! there are two, handed out round-robin in the order threads first touch a
//! lane (a budget's `request_started`, a breaker's `try_acquire`), so the
//! models below exercise both threads sharing a lane and threads writing
//! different lanes; the comments say which a model relies on.
//! Time comes from a [`ModelClock`] whose counter is itself a loom atomic, so
//! that a clock step racing with the guards' own atomics (a slot boundary, the
//! end of a probe timeout) is explored like any other interleaving.
#![cfg(retryscope_loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use retryscope::CircuitBreaker;
use retryscope::breaker::{BreakerPermit, BreakerState};
use retryscope::budget::{Budget, RetryCause};
use retryscope::budget::{BudgetShare, SharedBudget};
use retryscope::clock::Clock;
use retryscope::{RetryBudget, TokenBucket};
use std::time::{Duration, Instant};

const COOL_DOWN: Duration = Duration::from_secs(5);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Explores `f` under every interleaving with at most `preemptions` forced
/// thread switches (unless `LOOM_MAX_PREEMPTIONS` says otherwise).
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(preemptions);
    }
    builder.check(f);
}

/// A clock whose time is a loom atomic, so that loom sees every read and every
/// step of it and explores the orders in which threads observe a step.
#[derive(Clone)]
struct ModelClock {
    origin: Instant,
    nanos: Arc<AtomicU64>,
}

impl ModelClock {
    fn new() -> Self {
        Self { origin: Instant::now(), nanos: Arc::new(AtomicU64::new(0)) }
    }

    fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::SeqCst);
    }
}

impl Clock for ModelClock {
    fn now(&self) -> Instant {
        self.origin + Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> thread::JoinHandle<T> {
    thread::spawn(f)
}

fn join<T>(handle: thread::JoinHandle<T>) -> T {
    match handle.join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

// ---------------------------------------------------------------------------
// RetryBudget and its sliding window
// ---------------------------------------------------------------------------

/// A budget with no floor, so every token comes from a deposit: 0.5 per request.
fn budget(clock: &ModelClock) -> RetryBudget {
    match RetryBudget::builder()
        .ratio(0.5)
        .min_per_second(0)
        .window(Duration::from_secs(10))
        .clock(clock.clone())
        .build()
    {
        Ok(budget) => budget,
        Err(e) => panic!("valid settings: {e}"),
    }
}

fn retries(budget: &RetryBudget, tries: usize) -> usize {
    (0..tries).filter(|_| budget.try_acquire_retry(RetryCause::Transient)).count()
}

/// Invariant: on a frozen clock the budget grants exactly `ratio · requests`
/// retries however the withdrawals interleave: two threads never both take
/// the last token, and none is refused while a token is left.
#[test]
fn budget_grants_exactly_the_deposits_to_racing_retries() {
    model(3, || {
        let clock = ModelClock::new();
        let budget = budget(&clock);
        for _ in 0..4 {
            budget.request_started();
        }
        // Two whole tokens, three threads asking for two each.
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let budget = budget.clone();
                spawn(move || retries(&budget, 2))
            })
            .collect();
        let granted: usize = handles.into_iter().map(join).sum();
        assert_eq!(granted, 2);
        assert_eq!(budget.available(), 0.0);
    });
}

/// Invariant: with deposits racing withdrawals, a retry is never granted
/// without a whole token deposited before it, and the total never exceeds
/// `ratio · requests`.
#[test]
fn budget_never_grants_ahead_of_racing_deposits() {
    model(3, || {
        let clock = ModelClock::new();
        let budget = budget(&clock);
        let depositor = {
            let budget = budget.clone();
            spawn(move || {
                for _ in 0..2 {
                    budget.request_started();
                }
            })
        };
        let spenders: Vec<_> = (0..2)
            .map(|_| {
                let budget = budget.clone();
                spawn(move || retries(&budget, 1))
            })
            .collect();
        join(depositor);
        let granted: usize = spenders.into_iter().map(join).sum();
        // Two requests at 0.5 pay for one retry.
        assert!(granted <= 1, "{granted} retries granted for one token");
        assert_eq!(budget.available(), (1 - granted) as f64);
    });
}

/// Invariant: deposits made in different lanes all count, and a withdrawal
/// racing them never spends a token that is not complete yet. The two
/// depositors are the first threads to touch a lane, so they write different
/// lanes; the spender sums both.
#[test]
fn budget_sums_deposits_from_racing_lanes() {
    model(3, || {
        let clock = ModelClock::new();
        let budget = budget(&clock);
        let depositors: Vec<_> = (0..2)
            .map(|_| {
                let budget = budget.clone();
                spawn(move || budget.request_started())
            })
            .collect();
        let spender = {
            let budget = budget.clone();
            spawn(move || retries(&budget, 1))
        };
        depositors.into_iter().for_each(join);
        let granted = join(spender);
        // Two requests at 0.5 make one token, complete only with both lanes.
        assert!(granted <= 1, "{granted} retries granted for one token");
        assert_eq!(budget.available(), (1 - granted) as f64);
    });
}

/// Invariant: the window slides without over-granting. Threads on either side
/// of a slot boundary see different slots; the one that moves the ledger's
/// head into the new slot retires the old slot's count while the other may be
/// reserving in it, and the total must still stay within the deposits
/// (nothing has expired: the step is one slot of ten).
#[test]
fn budget_never_over_grants_across_a_slot_boundary() {
    model(3, || {
        let clock = ModelClock::new();
        let budget = budget(&clock);
        for _ in 0..2 {
            budget.request_started();
        }
        let early = {
            let budget = budget.clone();
            spawn(move || retries(&budget, 1))
        };
        // The clock crosses into the next slot while `early` may or may not
        // have read it.
        clock.advance(Duration::from_secs(1));
        let late = {
            let budget = budget.clone();
            spawn(move || retries(&budget, 1))
        };
        let granted = join(early) + join(late);
        assert!(granted <= 1, "{granted} retries granted for one token");
    });
}

/// Invariant: across a slot boundary the budget is exact, not only safe:
/// withdrawals in the old slot and the new one are ordered by the same head
/// word, so none is refused while a token is left and none is granted
/// without one, whichever thread retires the old slot and whenever the clock
/// moves.
#[test]
fn budget_grants_exactly_across_a_slot_boundary() {
    model(3, || {
        let clock = ModelClock::new();
        let budget = budget(&clock);
        for _ in 0..4 {
            budget.request_started();
        }
        // Two tokens; each thread asks for two, the clock moves meanwhile.
        let spenders: Vec<_> = (0..2)
            .map(|_| {
                let budget = budget.clone();
                spawn(move || retries(&budget, 2))
            })
            .collect();
        clock.advance(Duration::from_secs(1));
        let granted: usize = spenders.into_iter().map(join).sum();
        assert_eq!(granted, 2);
        assert_eq!(budget.available(), 0.0);
    });
}

/// Invariant: a withdrawal made in a slot that another thread recycles at the
/// same moment is neither lost nor counted twice: after a whole window, the
/// budget is back to its deposits and holds no phantom withdrawal.
#[test]
fn budget_recycles_a_slot_under_a_racing_writer() {
    model(3, || {
        let clock = ModelClock::new();
        let budget = budget(&clock);
        for _ in 0..4 {
            budget.request_started();
        }
        let spender = {
            let budget = budget.clone();
            spawn(move || retries(&budget, 1))
        };
        // A full turn of the ring: the spender's slot is recycled by the
        // depositor, whichever of them writes it first.
        clock.advance(Duration::from_secs(10));
        let depositor = {
            let budget = budget.clone();
            spawn(move || {
                for _ in 0..2 {
                    budget.request_started();
                }
            })
        };
        let granted = join(spender);
        join(depositor);
        assert!(granted <= 1);
        // The old deposits have expired; the two new ones make one token, less
        // the retry if it was granted in the new slot.
        let available = budget.available();
        assert!(available == 1.0 || (granted == 1 && available == 0.0), "{available} left after {granted}");
    });
}

/// A fleet's share that only keeps the budget it is given, for a thread of
/// the model to divide its floor.
#[derive(Debug, Default)]
struct HeldShare(std::sync::Mutex<Option<SharedBudget>>);

impl BudgetShare for HeldShare {
    fn attach_budget(&self, _dependency: &str, budget: SharedBudget) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(budget);
    }
}

/// Invariant: a share dividing the floor while retries race never lets the
/// budget grant more than the larger floor, nor less than the smaller one,
/// and leaves no retry paid twice: a floor of 2 retries halved to 1 by the
/// share (a heartbeat) while a thread asks for 3.
#[test]
fn budget_floor_divided_under_racing_retries() {
    model(3, || {
        let clock = ModelClock::new();
        let budget = match RetryBudget::builder()
            .ratio(0.0)
            .min_per_second(2)
            .window(Duration::from_secs(1))
            .clock(clock.clone())
            .build()
        {
            Ok(budget) => budget,
            Err(e) => panic!("valid settings: {e}"),
        };
        let share = std::sync::Arc::new(HeldShare::default());
        assert!(budget.share_with(share.clone(), "api"));
        let held = share.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let Some(held) = held else { panic!("the share holds the budget") };
        let retrying = {
            let budget = budget.clone();
            spawn(move || retries(&budget, 3))
        };
        let dividing = spawn(move || held.divide_floor(2));
        assert!(join(dividing), "the budget is alive");
        let granted = join(retrying);
        assert!((1..=2).contains(&granted), "{granted} granted");
        assert_eq!(budget.floor_replicas(), Some(2));
        // One retry's floor left, spent (or overspent by a grant made before
        // the division): nothing available either way.
        assert_eq!(budget.available(), 0.0);
    });
}

/// Invariant: the token bucket stays within `0..=max_tokens` and a failure is
/// never lost to a racing success.
#[test]
fn token_bucket_loses_no_update() {
    model(3, || {
        let bucket = match TokenBucket::builder().max_tokens(4).token_ratio(1.0).build() {
            Ok(bucket) => bucket,
            Err(e) => panic!("valid settings: {e}"),
        };
        let handles: Vec<_> = [false, false, true]
            .into_iter()
            .map(|success| {
                let bucket = bucket.clone();
                spawn(move || bucket.attempt_finished(success))
            })
            .collect();
        handles.into_iter().for_each(join);
        // 4 − 1 − 1, and the success is capped at 4 only if it came first:
        // 4 → 4 (capped) → 3 → 2, or 4 → 3 → 4 → 3, or 4 → 3 → 2 → 3.
        let left = bucket.available();
        assert!(left == 0.0 || left == 1.0, "{left} tokens above half");
    });
}

// ---------------------------------------------------------------------------
// CircuitBreaker
// ---------------------------------------------------------------------------

fn breaker(clock: &ModelClock, min_calls: u32, probes: u32) -> CircuitBreaker {
    match CircuitBreaker::builder()
        .min_calls(min_calls)
        .failure_ratio(0.5)
        .cool_down(COOL_DOWN)
        .half_open_probes(probes)
        .probe_timeout(PROBE_TIMEOUT)
        .clock(clock.clone())
        .build()
    {
        Ok(breaker) => breaker,
        Err(e) => panic!("valid settings: {e}"),
    }
}

/// A breaker opened by one failure, its cool-down over.
fn ready_to_probe(clock: &ModelClock, probes: u32) -> CircuitBreaker {
    let b = breaker(clock, 1, probes);
    match b.try_acquire() {
        Ok(permit) => permit.failure(),
        Err(e) => panic!("a closed breaker admits: {e}"),
    }
    assert_eq!(b.state(), BreakerState::Open);
    clock.advance(COOL_DOWN);
    b
}

fn probe(b: &CircuitBreaker) -> BreakerPermit {
    match b.try_acquire() {
        Ok(permit) => permit,
        Err(e) => panic!("a probe slot should be free: {e}"),
    }
}

/// Invariant: failures racing in the closed state are all recorded, so the
/// breaker opens once the window holds `min_calls` of them: the transition to
/// open is never lost. The two threads are the first to touch a lane, so
/// their failures land in different lanes' windows.
#[test]
fn breaker_opens_on_racing_failures() {
    model(3, || {
        let clock = ModelClock::new();
        let b = breaker(&clock, 2, 1);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                spawn(move || {
                    if let Ok(permit) = b.try_acquire() {
                        permit.failure();
                    }
                })
            })
            .collect();
        handles.into_iter().for_each(join);
        assert_eq!(b.state(), BreakerState::Open);
    });
}

/// Invariant: failures on either side of a slot boundary land in different
/// counter words; the breaker still opens once both are in the window.
#[test]
fn breaker_opens_on_failures_across_a_slot_boundary() {
    model(3, || {
        let clock = ModelClock::new();
        let b = breaker(&clock, 2, 1);
        let fail = |b: &CircuitBreaker| {
            let b = b.clone();
            spawn(move || {
                if let Ok(permit) = b.try_acquire() {
                    permit.failure();
                }
            })
        };
        let early = fail(&b);
        clock.advance(Duration::from_secs(1));
        let late = fail(&b);
        join(early);
        join(late);
        assert_eq!(b.state(), BreakerState::Open);
    });
}

/// Invariant: when the cool-down is over, racing callers get exactly
/// `half_open_probes` permits, and the breaker is half-open.
#[test]
fn breaker_admits_exactly_the_probe_count() {
    model(3, || {
        let clock = ModelClock::new();
        let b = ready_to_probe(&clock, 2);
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let b = b.clone();
                spawn(move || b.try_acquire().ok())
            })
            .collect();
        let permits: Vec<BreakerPermit> = handles.into_iter().filter_map(join).collect();
        assert_eq!(permits.len(), 2);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        // And the permits are real probes: their successes close the breaker.
        permits.into_iter().for_each(BreakerPermit::success);
        assert_eq!(b.state(), BreakerState::Closed);
    });
}

/// Invariant: probe outcomes racing each other lose no transition: two
/// successes close the breaker; a success and a failure always leave it open
/// (the failure reopens it, and a success after that is stale).
#[test]
fn breaker_settles_racing_probes() {
    for outcomes in [[true, true], [true, false]] {
        model(3, move || {
            let clock = ModelClock::new();
            let b = ready_to_probe(&clock, 2);
            let permits = [probe(&b), probe(&b)];
            let handles: Vec<_> = permits
                .into_iter()
                .zip(outcomes)
                .map(|(permit, success)| {
                    spawn(move || if success { permit.success() } else { permit.failure() })
                })
                .collect();
            handles.into_iter().for_each(join);
            let expected = if outcomes == [true, true] { BreakerState::Closed } else { BreakerState::Open };
            assert_eq!(b.state(), expected);
        });
    }
}

/// Invariant: a cancelled probe frees exactly its own slot: with one slot
/// held and one freed while a third caller asks, the caller gets a slot at
/// most once, and the breaker never admits more probes than slots.
#[test]
fn breaker_frees_the_slot_of_a_cancelled_probe() {
    model(3, || {
        let clock = ModelClock::new();
        let b = ready_to_probe(&clock, 2);
        let kept = probe(&b);
        let cancelled = probe(&b);
        let dropper = spawn(move || drop(cancelled));
        let asker = {
            let b = b.clone();
            spawn(move || b.try_acquire().ok())
        };
        join(dropper);
        let extra = join(asker);
        // Whether or not the asker got the freed slot, the slots are now full
        // only if it did.
        assert_eq!(b.try_acquire().is_ok(), extra.is_none());
        drop((kept, extra));
        assert_eq!(b.state(), BreakerState::HalfOpen);
    });
}

/// Invariant: when the only probe is lost (never reports back), racing callers
/// after the probe timeout get exactly one replacement, and the lost probe's
/// late outcome, racing with them, changes nothing.
#[test]
fn breaker_replaces_a_lost_probe_exactly_once() {
    model(3, || {
        let clock = ModelClock::new();
        let b = ready_to_probe(&clock, 1);
        let lost = probe(&b);
        let late = spawn(move || lost.failure());
        clock.advance(PROBE_TIMEOUT);
        let askers: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                spawn(move || b.try_acquire().ok())
            })
            .collect();
        join(late);
        let replacements: Vec<BreakerPermit> = askers.into_iter().filter_map(join).collect();
        // The late failure may land before the replacement (reopening the
        // breaker for a fresh cool-down, so nobody is admitted) or after it
        // (stale, ignored): never both a reopening and a replacement.
        match b.state() {
            BreakerState::Open => assert!(replacements.is_empty()),
            BreakerState::HalfOpen => {
                assert_eq!(replacements.len(), 1);
                replacements.into_iter().for_each(BreakerPermit::success);
                assert_eq!(b.state(), BreakerState::Closed);
            }
            BreakerState::Closed => panic!("a failure cannot close the breaker"),
        }
    });
}
