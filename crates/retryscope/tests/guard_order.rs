//! The guards' order at its edges, as docs/guide/dependencies.md states it
//! ("What follows from the order, exactly"): each test sets up the one moment
//! where asking in another order would give another answer.

use retryscope::breaker::BreakerState;
use retryscope::budget::InFlightBudget;
use retryscope::dependency::Dependency;
use retryscope::guard::{Admission, Attempt, End, Guard};
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope::observe::{
    AttemptEnd, AttemptStart, Finish, Held, Observer, OperationInfo, OperationObserver, Wait,
};
use retryscope::pace::{PaceSignal, Quota};
use retryscope::{CircuitBreaker, Jitter, Pacer, Policy, RetryBudget, Retryable, StopReason};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Two attempts 100 ms apart, no jitter, no limit per attempt.
fn two_attempts() -> retryscope::PolicyBuilder {
    Policy::builder()
        .max_attempts(2)
        .base_delay(ms(100))
        .max_delay(ms(100))
        .jitter(Jitter::None)
        .no_attempt_timeout()
}

/// A call whose every attempt fails at once, under `policy`, to
/// `dependency`: how it stopped, after how many attempts, and when.
async fn always_failing(policy: Policy, dependency: &Dependency) -> (StopReason, u32, Duration) {
    let started = Instant::now();
    let error = (|| async { Err::<(), _>("503") })
        .retry(policy)
        .when(|_: &&str| true)
        .dependency(dependency)
        .await
        .expect_err("every attempt fails");
    (error.reason(), error.attempts(), started.elapsed())
}

/// Two calls to a dependency whose in-flight budget lets one retry out at a
/// time, both failing at once: the first call's retry is admitted, the
/// second's refused. Returns each call's stop reason, attempts and duration.
async fn two_calls_one_retry_slot(policy: Policy) -> [(StopReason, u32, Duration); 2] {
    let in_flight = InFlightBudget::new(0.001, 1).expect("valid budget");
    let dependency = Dependency::new("test").with_guard(in_flight);
    // `join!` polls the first call first: its retry takes the one slot.
    let (first, second) =
        tokio::join!(always_failing(policy, &dependency), always_failing(policy, &dependency));
    [first, second]
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_policy_that_waits_out_refusal_waits_out_the_in_flight_budgets_too() {
    let policy = two_attempts().no_deadline().build().expect("valid policy");
    let [first, second] = two_calls_one_retry_slot(policy).await;
    assert_eq!(first, (StopReason::AttemptsExhausted, 2, ms(100)));
    // Refused at its plan: stops at once, its one attempt sent.
    assert_eq!(second, (StopReason::BudgetExhausted, 1, ms(0)));

    let waits = two_attempts().no_deadline().wait_out_refusal(true).build().expect("valid policy");
    let [first, second] = two_calls_one_retry_slot(waits).await;
    assert_eq!(first, (StopReason::AttemptsExhausted, 2, ms(100)));
    // The same refusal, waited out: the backoff's 100 ms, and still nothing sent.
    assert_eq!(second, (StopReason::BudgetExhausted, 1, ms(100)));
}

/// A further guard that holds every retry's send once, for `hold`: not cut
/// to the deadline (nothing cuts a further guard's hold).
struct HoldsRetriesOnce {
    hold: Duration,
    held: AtomicU32,
}

impl Guard for HoldsRetriesOnce {
    type Permit = ();
    fn admit(&self, _: Attempt) -> Admission<()> {
        Admission::Go(())
    }
    fn send(&self, attempt: Attempt, (): &mut ()) -> Admission {
        if attempt.is_retry() && self.held.fetch_add(1, Ordering::SeqCst) == 0 {
            Admission::Hold { wait: self.hold, source: None, permit: () }
        } else {
            Admission::Go(())
        }
    }
    fn settle(&self, _: Attempt, (): (), _: End) {}
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_send_held_past_the_deadline_releases_the_breakers_permit_unused() {
    // Opens on two failures out of two calls: one more failure than the
    // call's first attempt gives it.
    let breaker = CircuitBreaker::builder()
        .failure_ratio(0.5)
        .min_calls(2)
        .cool_down(ms(5_000))
        .build()
        .expect("valid breaker");
    let guard = Arc::new(HoldsRetriesOnce { hold: ms(100), held: AtomicU32::new(0) });
    let dependency = Dependency::new("test").with_breaker(breaker.clone()).with_guard(Arc::clone(&guard));
    let policy = two_attempts().deadline(ms(150)).build().expect("valid policy");
    let stopped = always_failing(policy, &dependency).await;
    // The retry's send at 100 ms: the breaker gave its permit, the guard held
    // it to 200 ms, past the 150 ms deadline. Asked again, every guard lets
    // it go; the deadline stops it, and the breaker's permit goes back unused.
    assert_eq!(guard.held.load(Ordering::SeqCst), 2, "asked at the send and again after the hold");
    assert_eq!(stopped, (StopReason::DeadlineExceeded, 1, ms(200)));
    // Settled as a failure, the permit would have opened the breaker.
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert!(breaker.try_acquire().is_ok());
}

/// Counts the holds an operation hears of.
#[derive(Clone, Default)]
struct Holds(Arc<Mutex<Vec<Held>>>);

impl Observer for Holds {
    type Operation = Holds;
    fn start(&self, _: &OperationInfo<'_>) -> Holds {
        self.clone()
    }
}

impl OperationObserver for Holds {
    type Attempt = ();
    fn attempt_started(&mut self, _: &AttemptStart) {}
    fn attempt_finished(&mut self, (): (), _: &AttemptEnd) {}
    fn waiting(&mut self, _: &Wait) {}
    fn finished(self, _: &Finish) {}
    fn held(&mut self, held: &Held) {
        self.0.lock().expect("not poisoned").push(*held);
    }
}

/// A hedged call whose first copy answers after 200 ms, to a dependency
/// whose pacer has spent its quota (the next slot 10 s away): the holds it
/// heard, and the copies it sent.
async fn hedged_through_a_spent_pacer(budget: Option<RetryBudget>) -> (Vec<Held>, u32) {
    let pacer = Pacer::new();
    pacer.learn(&PaceSignal {
        quota: Some(Quota { remaining: 1, reset: Duration::from_secs(10), policy: None }),
        ..PaceSignal::none()
    });
    let mut dependency = Dependency::new("test").with_pacer(pacer);
    if let Some(budget) = budget {
        dependency = dependency.with_budget(budget);
    }
    let policy = HedgePolicy::builder()
        .max_copies(2)
        .delay(HedgeDelay::Fixed(ms(50)))
        .no_deadline()
        .no_attempt_timeout()
        .build()
        .expect("valid policy");
    let sent = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&sent);
    let holds = Holds::default();
    let answer = (move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async {
            tokio::time::sleep(ms(200)).await;
            Ok::<(), &'static str>(())
        }
    })
    .hedge(policy)
    .when(|_: &&str| true)
    .dependency(&dependency)
    .observe(holds.clone())
    .await;
    assert_eq!(answer, Ok(()));
    let heard = holds.0.lock().expect("not poisoned").clone();
    (heard, sent.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hedge_copy_the_budget_refuses_is_never_held_by_the_pacer_first() {
    // The pacer alone holds the copy due at 50 ms (and it is never sent: the
    // first copy answers before the slot).
    let (heard, sent) = hedged_through_a_spent_pacer(None).await;
    assert_eq!(sent, 1);
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!(heard[0].attempt, 2);

    // With a budget that has no token for it, the copy is refused when it is
    // due, before the pacer is asked: no hold is heard of.
    let empty = RetryBudget::builder().ratio(0.1).min_per_second(0).build().expect("valid budget");
    let (heard, sent) = hedged_through_a_spent_pacer(Some(empty)).await;
    assert_eq!(sent, 1);
    assert!(heard.is_empty(), "{heard:?}");
}
