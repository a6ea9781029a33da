//! Instruction counts of the happy path and of each guard, for valgrind's
//! callgrind: repeatable on a shared machine where wall time is not.
//!
//! `icount SCENARIO` runs the scenario [`ITERATIONS`] times inside the function
//! `measured`; `scripts/icount.sh` runs it under
//! `valgrind --tool=callgrind --toggle-collect='*icount*measured*'`, so only the loop
//! is counted, divides by the iterations, compares with the committed baseline
//! and fails on a regression. Without an argument it lists the scenarios and
//! checks, outside any measurement, that each one does what it claims, and
//! that budgets and breakers read the coarse clock in a build like a
//! service's (see `coarse_clock_in_production`). `icount sizes` prints each
//! contender's future size.
//!
//! Futures are polled once with a no-op waker: on the happy path every
//! contender is ready at its first poll, and no runtime is involved.

mod contenders;

use contenders::*;
use retryscope::budget::{Budget, RetryCause};
use retryscope::dependency::Dependency;
use retryscope::observe::{
    AttemptEnd, AttemptStart, Finish, Observer, OperationInfo, OperationObserver, Wait,
};
use retryscope::{CircuitBreaker, RetryBudget, TokenBucket};
use std::future::{Future, IntoFuture};
use std::hint::black_box;
use std::pin::pin;
use std::sync::LazyLock;
use std::task::{Context, Poll, Waker};
use tower::ServiceExt as _;

/// Iterations per measurement: enough that the loop's fixed cost is noise.
const ITERATIONS: u64 = 10_000;

/// Polls `future` once; the happy path must be ready at once.
fn poll_once<F: IntoFuture>(future: F) -> F::Output {
    let mut future = pin!(future.into_future());
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the happy path must complete on its first poll"),
    }
}

/// One iteration of a scenario: whether it succeeded (or was granted).
type Iteration = fn() -> bool;

/// Every scenario: its name and one iteration. The name is what the script and
/// the baseline call it; the measured function is `measured_{name}`.
const SCENARIOS: &[(&str, Iteration)] = &[
    ("happy_direct", || poll_once(Flaky::new(0).call()).is_ok()),
    ("happy_retryscope", happy_retryscope),
    ("happy_retryscope_deadline", happy_retryscope_deadline),
    ("happy_retryscope_interactive", happy_retryscope_interactive),
    ("happy_retryscope_budget", happy_retryscope_budget),
    ("happy_retryscope_booked", happy_retryscope_booked),
    // A pacer whose dependency said nothing, alone and shared with a fleet
    // (issue 38): the same one atomic load, no call into the share.
    ("happy_retryscope_pacer", || happy_paced(&PACED)),
    ("happy_retryscope_pacer_shared", || happy_paced(&SHARED_PACED)),
    ("happy_hedge_fixed", happy_hedge_fixed),
    ("happy_hedge_percentile", happy_hedge_percentile),
    ("happy_backon", || {
        let flaky = Flaky::new(0);
        poll_once(backon::Retryable::retry(|| flaky.call(), backon_builder())).is_ok()
    }),
    ("happy_tower", || {
        let flaky = Flaky::new(0);
        let service = tower::service_fn(|()| flaky.call());
        poll_once(tower::retry::Retry::new(TowerRetries(FAILURES), service).oneshot(())).is_ok()
    }),
    ("happy_tokio_retry2", || {
        let flaky = Flaky::new(0);
        poll_once(tokio_retry2_call(&flaky)).is_ok()
    }),
    ("guard_retry_budget", || with_budget(|b| b.request_started_and_retry())),
    ("guard_token_bucket", || with_bucket(|b| b.success_and_retry())),
    ("guard_circuit_breaker", || with_breaker(|b| b.try_acquire().map(|permit| permit.success()).is_ok())),
    // A slot taken and given back with a round trip: what every attempt to a
    // limited dependency pays (the limit stays put: 1 in flight of 20).
    ("guard_concurrency_limit", || {
        LIMITER
            .try_acquire(retryscope::overload::Priority::Critical)
            .map(|slot| slot.success(std::time::Duration::from_millis(1)))
            .is_some()
    }),
    ("fault_disabled", fault_disabled),
];

/// Faults built (off, as always) with a rule that would inject into every
/// call: what every call through a fault layer pays while they stay off.
static FAULTS: LazyLock<retryscope_http::fault::Faults> = LazyLock::new(|| {
    use retryscope_http::fault::{FaultKind, FaultRate, FaultRule, Faults};
    Faults::builder().rule(FaultRule::new(FaultKind::unavailable(), FaultRate::ALWAYS)).no_metrics().build()
});

/// The fault layers' decision while off (`Faults::decide`): granted when
/// nothing is injected.
fn fault_disabled() -> bool {
    let target = retryscope_http::fault::Target::new("payments.internal", "/charge");
    FAULTS.decide(black_box(&target)).is_none()
}

fn happy_retryscope() -> bool {
    let flaky = Flaky::new(0);
    let policy = *POLICY;
    poll_once(retryscope::Retryable::retry(|| flaky.call(), policy)).is_ok()
}

fn happy_retryscope_deadline() -> bool {
    let flaky = Flaky::new(0);
    let policy = *DEADLINE_POLICY;
    poll_once(retryscope::Retryable::retry(|| flaky.call(), policy)).is_ok()
}

/// The README's preset as it ships, `Policy::interactive()`: a 15 s deadline
/// and a 5 s limit per attempt, so the clock is read once per call (the timer
/// is armed only for an attempt that is not ready at once, so none here).
fn happy_retryscope_interactive() -> bool {
    let flaky = Flaky::new(0);
    let policy = *INTERACTIVE_POLICY;
    poll_once(retryscope::Retryable::retry(|| flaky.call(), policy)).is_ok()
}

fn happy_retryscope_budget() -> bool {
    let flaky = Flaky::new(0);
    let policy = *POLICY;
    poll_once(retryscope::Retryable::retry(|| flaky.call(), policy).dependency(&*BUDGETED)).is_ok()
}

/// The engine's full bookkeeping, without a guard's cost: an observer that
/// does nothing but does not say so (`SILENT` is false), as instrumentation
/// would, so the first attempt is booked like every other.
fn happy_retryscope_booked() -> bool {
    let flaky = Flaky::new(0);
    poll_once(retryscope::Retryable::retry(|| flaky.call(), *POLICY).observe(Unsaid)).is_ok()
}

/// A hedged call whose first copy answers before the hedging delay (the
/// common case by design): one copy, no timer. 2 copies, 50 ms fixed delay,
/// the default 5 s attempt timeout and 15 s deadline. The policy is passed by
/// value, a clone of the dependency's, as every caller passes it.
fn happy_hedge_fixed() -> bool {
    let flaky = Flaky::new(0);
    HEDGE_FIXED
        .with(|policy| poll_once(retryscope::Retryable::hedge(|| flaky.call(), policy.clone())).is_ok())
}

/// The same with a p95 delay: the policy's shared latency tracker counts the
/// copy's latency.
fn happy_hedge_percentile() -> bool {
    let flaky = Flaky::new(0);
    HEDGE_PERCENTILE
        .with(|policy| poll_once(retryscope::Retryable::hedge(|| flaky.call(), policy.clone())).is_ok())
}

/// An observer that ignores everything, without declaring itself silent.
struct Unsaid;

impl Observer for Unsaid {
    type Operation = Unsaid;
    const TIMED: bool = false;

    fn start(&self, _: &OperationInfo<'_>) -> Unsaid {
        Unsaid
    }
}

impl OperationObserver for Unsaid {
    type Attempt = ();

    fn attempt_started(&mut self, _: &AttemptStart) {}
    fn attempt_finished(&mut self, (): (), _: &AttemptEnd) {}
    fn waiting(&mut self, _: &Wait) {}
    fn finished(self, _: &Finish) {}
}

thread_local! {
    // One instance per process, as a service shares one per dependency; built
    // outside the measured loop.
    static BUDGET: RetryBudget = RetryBudget::builder()
        .ratio(1.0)
        .build()
        .unwrap_or_default();
    static BUCKET: TokenBucket = TokenBucket::default();
    static BREAKER: CircuitBreaker = CircuitBreaker::default();
    // A service holds one hedging policy per dependency and clones it per call.
    static HEDGE_FIXED: retryscope::hedge::HedgePolicy = retryscope::hedge::HedgePolicy::builder()
        .delay(retryscope::hedge::HedgeDelay::Fixed(std::time::Duration::from_millis(50)))
        .build()
        .expect("a valid hedging policy");
    static HEDGE_PERCENTILE: retryscope::hedge::HedgePolicy = retryscope::hedge::HedgePolicy::builder()
        .delay(retryscope::hedge::HedgeDelay::percentile(0.95))
        .build()
        .expect("a valid hedging policy");
}

// Validated once and copied per call, as a service holds its policy in its
// configuration (and as the time-based `peers` bench does).
static LIMITER: LazyLock<retryscope::overload::ConcurrencyLimiter> =
    LazyLock::new(|| retryscope::overload::ConcurrencyLimiter::new(retryscope::overload::Aimd::default()));
static POLICY: LazyLock<retryscope::Policy> = LazyLock::new(retryscope_policy);
// A dependency with one guard each, as a service builds one per dependency.
static BUDGETED: LazyLock<Dependency> = LazyLock::new(|| {
    Dependency::new("api.example:443")
        .with_budget(RetryBudget::builder().ratio(1.0).build().unwrap_or_default())
});
static PACED: LazyLock<Dependency> =
    LazyLock::new(|| Dependency::new("api.example:443").with_pacer(retryscope::Pacer::new()));
static SHARED_PACED: LazyLock<Dependency> = LazyLock::new(|| {
    let pacer = retryscope::Pacer::new();
    pacer.share_with(std::sync::Arc::new(NoFleet), "api.example:443");
    Dependency::new("api.example:443").with_pacer(pacer)
});

/// A share that must never be asked on the idle path: it panics if it is.
#[derive(Debug)]
struct NoFleet;

impl retryscope::pace::PaceShare for NoFleet {
    fn publish_gate(&self, _: &str, _: std::time::Duration, _: retryscope::pace::HoldSource) {
        unreachable!("an idle pacer published a gate")
    }
    fn replicas(&self, _: &str) -> u32 {
        unreachable!("an idle pacer asked the fleet")
    }
    fn attach(&self, _: &str, _: retryscope::pace::SharedPacer) {}
}

/// The happy call to a dependency with an idle pacer.
fn happy_paced(paced: &Dependency) -> bool {
    let flaky = Flaky::new(0);
    let policy = *POLICY;
    poll_once(retryscope::Retryable::retry(|| flaky.call(), policy).dependency(paced)).is_ok()
}
static DEADLINE_POLICY: LazyLock<retryscope::Policy> = LazyLock::new(retryscope_deadline_policy);
static INTERACTIVE_POLICY: LazyLock<retryscope::Policy> = LazyLock::new(retryscope::Policy::interactive);

fn with_budget<R>(f: impl FnOnce(&RetryBudget) -> R) -> R {
    BUDGET.with(f)
}

fn with_bucket<R>(f: impl FnOnce(&TokenBucket) -> R) -> R {
    BUCKET.with(f)
}

fn with_breaker<R>(f: impl FnOnce(&CircuitBreaker) -> R) -> R {
    BREAKER.with(f)
}

/// What a request that retries once costs a guard.
trait RetryCheck {
    fn request_started_and_retry(&self) -> bool;
    fn success_and_retry(&self) -> bool;
}

impl<T: Budget> RetryCheck for T {
    fn request_started_and_retry(&self) -> bool {
        self.request_started();
        self.try_acquire_retry(RetryCause::Transient)
    }

    fn success_and_retry(&self) -> bool {
        self.attempt_finished(true);
        self.try_acquire_retry(RetryCause::Transient)
    }
}

/// The measured loop: not inlined, so callgrind's `--toggle-collect` counts
/// exactly it (and what it calls). Each process runs one scenario. The call
/// through a function pointer adds the same few instructions to every scenario.
#[inline(never)]
fn measured(iteration: Iteration) -> u64 {
    let mut granted = 0;
    for _ in 0..ITERATIONS {
        granted += u64::from(black_box(iteration()));
    }
    granted
}

/// Budgets and breakers read `Clock::now_coarse`. Unit tests always build tokio
/// with `test-util` (then `TokioClock` must read tokio's pausable clock), so
/// they cannot see what a service gets; this bench is built as a service is,
/// without it. Checks that `TokioClock` then reads the operating system's
/// tick-granular clock: readings step once per kernel tick (1-10 ms) instead of
/// at nearly every read, never go back, and stay within a tick of `now()`.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn coarse_clock_in_production() {
    use retryscope::clock::{Clock, TokioClock};
    use std::time::{Duration, Instant};
    let spin = Duration::from_millis(50);
    let started = Instant::now();
    let (mut reads, mut steps) = (0_u64, 0_u64);
    let mut last = TokioClock.now_coarse();
    while started.elapsed() < spin {
        let now = TokioClock.now_coarse();
        assert!(now >= last, "coarse readings went back");
        steps += u64::from(now != last);
        last = now;
        reads += 1;
    }
    // At most one step per millisecond (HZ = 1000), with slack for the edges.
    assert!(
        reads > 10 * steps && steps <= 60,
        "{steps} steps in {reads} reads over {spin:?}: not a coarse clock"
    );
    let (precise, coarse) = (TokioClock.now(), TokioClock.now_coarse());
    let gap = precise.saturating_duration_since(coarse).max(coarse.saturating_duration_since(precise));
    assert!(gap <= Duration::from_millis(20), "coarse reading {gap:?} from the precise one");
    // stderr: stdout lists the scenarios for scripts/icount.sh.
    eprintln!("coarse clock: {steps} steps in {reads} reads over {spin:?}");
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn coarse_clock_in_production() {}

/// Prints the size in bytes of each contender's happy-path future: what a
/// caller builds, moves and keeps per call.
fn future_sizes() {
    let flaky = Flaky::new(0);
    let policy = retryscope_policy();
    let deadline = retryscope_deadline_policy();
    let rows = [
        ("retryscope", size_of_val(&retryscope::Retryable::retry(|| flaky.call(), policy).into_future())),
        (
            "retryscope, 15 s deadline",
            size_of_val(&retryscope::Retryable::retry(|| flaky.call(), deadline).into_future()),
        ),
        ("backon", size_of_val(&backon::Retryable::retry(|| flaky.call(), backon_builder()).into_future())),
        (
            "tower",
            size_of_val(
                &tower::retry::Retry::new(TowerRetries(FAILURES), tower::service_fn(|()| flaky.call()))
                    .oneshot(()),
            ),
        ),
        ("tokio-retry2", size_of_val(&tokio_retry2_call(&flaky))),
    ];
    for (contender, bytes) in rows {
        println!("{contender:<28} {bytes:>6} bytes");
    }
}

fn scenario(name: &str) -> Option<Iteration> {
    SCENARIOS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

fn main() {
    // `cargo bench` passes `--bench`; the script passes the scenario's name.
    let name = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    match name {
        Some(name) if name == "sizes" => future_sizes(),
        Some(name) => {
            let Some(iteration) = scenario(&name) else {
                eprintln!("unknown scenario {name:?}");
                std::process::exit(2);
            };
            // Warm the guards and the allocator up outside the measurement.
            let _ = (0..100).all(|_| iteration());
            let granted = measured(iteration);
            if granted != ITERATIONS {
                eprintln!("{name}: only {granted} of {ITERATIONS} iterations succeeded or were granted");
                std::process::exit(1);
            }
            println!("{name} {ITERATIONS}");
        }
        None => {
            coarse_clock_in_production();
            for (name, iteration) in SCENARIOS {
                assert!((0..10).all(|_| iteration()), "{name} must succeed or be granted every time");
                println!("{name}");
            }
        }
    }
}
