//! A guard on a call, through the engine: the in-flight retry budget under
//! concurrency, and every admission settled whatever ends the call (a
//! refusal, a deadline, the future dropped mid-wait, a hedge's lost copy).

use retryscope::budget::InFlightBudget;
use retryscope::dependency::Dependency;
use retryscope::guard::{Admission, Attempt, End, Guard};
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope::{CircuitBreaker, Jitter, Policy, Retryable, StopReason};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Five attempts 100 ms apart (no jitter), no deadline.
fn policy() -> Policy {
    Policy::builder()
        .max_attempts(5)
        .base_delay(ms(100))
        .max_delay(ms(100))
        .jitter(Jitter::None)
        .no_deadline()
        .no_attempt_timeout()
        .build()
        .expect("valid policy")
}

/// An in-flight budget that also remembers the most retries it let out at
/// once, and what it settled.
#[derive(Clone)]
struct Watched {
    budget: InFlightBudget,
    peak: Arc<AtomicU32>,
    settled: Arc<Mutex<Vec<End>>>,
}

impl Watched {
    fn new(budget: InFlightBudget) -> Self {
        Self { budget, peak: Arc::default(), settled: Arc::default() }
    }
}

impl Guard for Watched {
    type Permit = ();
    fn call_started(&self) {
        self.budget.call_started();
    }
    fn admit(&self, attempt: Attempt) -> Admission<()> {
        let admitted = self.budget.admit(attempt);
        self.peak.fetch_max(self.budget.in_flight(), Ordering::SeqCst);
        admitted
    }
    fn settle(&self, attempt: Attempt, (): (), end: End) {
        if !attempt.is_first() {
            self.settled.lock().expect("not poisoned").push(end);
        }
        self.budget.settle(attempt, (), end);
    }
    fn call_finished(&self) {
        self.budget.call_finished();
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn fifty_failing_calls_keep_at_most_a_fifth_of_them_retrying_at_once() {
    let guard = Watched::new(InFlightBudget::envoy());
    let sent = Arc::new(AtomicU32::new(0));
    let calls = (0..50).map(|_| {
        let (guard, sent) = (guard.clone(), Arc::clone(&sent));
        tokio::spawn(async move {
            (|| {
                sent.fetch_add(1, Ordering::SeqCst);
                async {
                    tokio::time::sleep(ms(10)).await;
                    Err::<(), _>("503")
                }
            })
            .retry(policy())
            .when(|_: &&str| true)
            .dependency(&Dependency::new("test").with_guard(guard))
            .await
        })
    });
    let results = futures_join(calls).await;
    let refused = results
        .iter()
        .filter(|r| r.as_ref().is_err_and(|e| e.reason() == StopReason::BudgetExhausted))
        .count();
    // Fifty calls in progress allow ten retries out; as calls give up the
    // share shrinks, down to the floor of three.
    assert_eq!(guard.peak.load(Ordering::SeqCst), 10);
    assert!(refused >= 40, "{refused} calls refused a retry");
    // Every admission was settled and every call finished.
    assert_eq!((guard.budget.in_flight(), guard.budget.calls()), (0, 0));
    let settled = guard.settled.lock().expect("not poisoned");
    assert!(settled.iter().all(|end| *end == End::Failed), "{settled:?}");
    // Without the guard all fifty would have sent five attempts each.
    assert!(sent.load(Ordering::SeqCst) < 100, "{} attempts sent", sent.load(Ordering::SeqCst));
}

async fn futures_join<T>(tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for task in tasks.collect::<Vec<_>>() {
        out.push(task.await.expect("the call does not panic"));
    }
    out
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_call_dropped_while_its_retry_waits_settles_the_retry_as_not_sent() {
    let guard = Watched::new(InFlightBudget::envoy());
    let dependency = Dependency::new("test").with_guard(guard.clone());
    let call =
        (|| async { Err::<(), _>("503") }).retry(policy()).when(|_: &&str| true).dependency(&dependency);
    // The first attempt fails at once; the retry is planned, then waits 100 ms.
    let timed_out = tokio::time::timeout(ms(50), call).await;
    assert!(timed_out.is_err(), "the call was still waiting");
    assert_eq!(*guard.settled.lock().expect("not poisoned"), [End::NotSent]);
    assert_eq!((guard.budget.in_flight(), guard.budget.calls()), (0, 0));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_retry_the_deadline_cuts_off_is_settled_and_the_call_finished() {
    let guard = Watched::new(InFlightBudget::envoy());
    let dependency = Dependency::new("test").with_guard(guard.clone());
    let policy = Policy::builder()
        .max_attempts(5)
        .base_delay(ms(100))
        .max_delay(ms(100))
        .jitter(Jitter::None)
        .deadline(ms(250))
        .build()
        .expect("valid policy");
    let answer = (|| async {
        tokio::time::sleep(ms(40)).await;
        Err::<(), _>("503")
    })
    .retry(policy)
    .when(|_: &&str| true)
    .dependency(&dependency)
    .await;
    assert!(answer.is_err());
    // Attempts at 0, 140 ms; the third would start at 280 ms, past the deadline.
    assert_eq!((guard.budget.in_flight(), guard.budget.calls()), (0, 0));
    let settled = guard.settled.lock().expect("not poisoned");
    assert_eq!(
        settled.iter().filter(|e| **e == End::Failed).count()
            + settled.iter().filter(|e| **e == End::NotSent).count(),
        settled.len()
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_breaker_open_past_the_wait_refuses_the_retry_before_the_guard_counts_it() {
    let guard = Watched::new(InFlightBudget::envoy());
    // Opens at the first failure and stays open past the 100 ms wait: the
    // retry is refused at its plan, before the guard is asked.
    let breaker = CircuitBreaker::builder()
        .failure_ratio(0.01)
        .min_calls(1)
        .cool_down(ms(5_000))
        .build()
        .expect("valid breaker");
    let dependency = Dependency::new("test").with_breaker(breaker.clone()).with_guard(guard.clone());
    let answer = (|| async { Err::<(), _>("503") })
        .retry(policy())
        .when(|_: &&str| true)
        .dependency(&dependency)
        .await;
    assert_eq!(answer.expect_err("the breaker stops it").reason(), StopReason::CircuitOpen);
    assert!(guard.settled.lock().expect("not poisoned").is_empty());
    assert_eq!((guard.budget.in_flight(), guard.budget.calls()), (0, 0));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hedges_further_copies_are_counted_until_they_end_or_are_cancelled() {
    let guard = Watched::new(InFlightBudget::new(0.001, 1).expect("valid budget"));
    let dependency = Dependency::new("test").with_guard(guard.clone());
    let hedge = HedgePolicy::builder()
        .max_copies(3)
        .delay(HedgeDelay::Fixed(ms(10)))
        .no_deadline()
        .no_attempt_timeout()
        .build()
        .expect("valid policy");
    let copies = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&copies);
    let answer = (move || {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        async move {
            // The first copy answers after 100 ms; later ones never would.
            tokio::time::sleep(if n == 0 { ms(100) } else { ms(10_000) }).await;
            Ok::<u32, &'static str>(n)
        }
    })
    .hedge(hedge)
    .when(|_: &&str| true)
    .dependency(&dependency)
    .await;
    assert_eq!(answer.expect("the first copy answers"), 0);
    // The floor of one let a second copy out; the third was refused.
    assert_eq!(copies.load(Ordering::SeqCst), 2);
    assert_eq!(*guard.settled.lock().expect("not poisoned"), [End::Cancelled]);
    assert_eq!((guard.budget.in_flight(), guard.budget.calls()), (0, 0));
}
