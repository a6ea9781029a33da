//! Hedged calls, specified with tokio's paused clock where the claim is about
//! arithmetic (delays, limits, counts), and the wall clock where it is about
//! real time (the last test).

mod common;

use common::{Event, Recorder, ms};
use retryscope::Pacer;
use retryscope::dependency::Dependency;
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope::observe::{AttemptEnd, AttemptStart, HedgeOutcome};
use retryscope::pace::{PaceSignal, Quota};
use retryscope::{
    CircuitBreaker, ErrorType, Hint, Outcome, RetryBudget, Retryable, SettingValue, StopReason, Verdict,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// `copies` copies at most, a fixed `delay`, no deadline, no attempt timeout.
fn fixed(copies: u32, delay: Duration) -> HedgePolicy {
    HedgePolicy::builder()
        .max_copies(copies)
        .delay(HedgeDelay::Fixed(delay))
        .no_deadline()
        .no_attempt_timeout()
        .build()
        .expect("valid policy")
}

/// What the copies of one scripted operation did: how many were sent, and
/// how many were dropped before they answered.
#[derive(Clone, Default)]
struct Copies {
    sent: Arc<AtomicU32>,
    dropped: Arc<AtomicU32>,
}

/// Counts its copy as dropped unless it answered.
struct DropGuard(Arc<AtomicU32>, bool);

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

type Answer = Pin<Box<dyn Future<Output = Result<u32, &'static str>> + Send>>;

impl Copies {
    fn sent(&self) -> u32 {
        self.sent.load(Ordering::SeqCst)
    }

    fn dropped(&self) -> u32 {
        self.dropped.load(Ordering::SeqCst)
    }

    /// An operation whose copy `n` (from 1) answers `answer(n)` after `took(n)`.
    fn op(
        &self,
        took: impl Fn(u32) -> Duration,
        answer: impl Fn(u32) -> Result<u32, &'static str>,
    ) -> impl FnMut() -> Answer {
        let copies = self.clone();
        move || {
            let n = copies.sent.fetch_add(1, Ordering::SeqCst) + 1;
            let (took, answer) = (took(n), answer(n));
            let guard = DropGuard(copies.dropped.clone(), false);
            Box::pin(async move {
                // The whole guard lives in the future, not just its field.
                let mut guard = guard;
                sleep(took).await;
                guard.1 = true;
                answer
            })
        }
    }
}

/// A copy that never answers.
const FOREVER: Duration = Duration::from_secs(3_600);

fn ends(rec: &Recorder) -> Vec<AttemptEnd> {
    rec.attempts()
}

#[tokio::test(start_paused = true)]
async fn a_stalled_first_copy_loses_to_the_second_after_the_delay_and_is_dropped() {
    let copies = Copies::default();
    let rec = Recorder::default();
    let started = Instant::now();
    let answer = copies
        .op(|n| if n == 1 { FOREVER } else { ms(10) }, Ok)
        .hedge(fixed(3, ms(50)))
        .when(|_: &&str| true)
        .observe(rec.clone())
        .dependency("inventory")
        .await;
    assert_eq!(answer, Ok(2));
    // The second copy went at 50 ms and answered 10 ms later.
    assert_eq!(started.elapsed(), ms(60));
    assert_eq!((copies.sent(), copies.dropped()), (2, 1), "the first copy was dropped");
    let events = rec.events();
    assert_eq!(
        events[1],
        Event::AttemptStarted(AttemptStart { number: 1, retry_of: None, hedge: true, limit: None })
    );
    assert_eq!(
        events[2],
        Event::AttemptStarted(AttemptStart { number: 2, retry_of: None, hedge: true, limit: None })
    );
    assert_eq!(
        ends(&rec),
        [
            AttemptEnd { number: 2, duration: ms(10), error: None, hedge: Some(HedgeOutcome::Won) },
            AttemptEnd { number: 1, duration: ms(60), error: None, hedge: Some(HedgeOutcome::Cancelled) },
        ]
    );
    let finish = rec.finish();
    assert_eq!((finish.outcome, finish.reason, finish.attempts), (Outcome::Success, None, 2));
}

#[tokio::test(start_paused = true)]
async fn a_first_copy_that_answers_before_the_delay_is_the_only_one_sent() {
    let copies = Copies::default();
    let started = Instant::now();
    let answer = copies.op(|_| ms(20), Ok).hedge(fixed(3, ms(50))).when(|_: &&str| true).await;
    assert_eq!(answer, Ok(1));
    assert_eq!(started.elapsed(), ms(20));
    assert_eq!((copies.sent(), copies.dropped()), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_non_fatal_failure_sends_the_next_copy_at_once() {
    let copies = Copies::default();
    let rec = Recorder::default();
    let started = Instant::now();
    let answer = copies
        .op(|n| if n == 1 { ms(5) } else { ms(10) }, |n| if n == 1 { Err("unavailable") } else { Ok(n) })
        .hedge(fixed(3, ms(50)))
        .when(|e: &&str| *e == "unavailable")
        .observe(rec.clone())
        .await;
    assert_eq!(answer, Ok(2));
    // Not 50 ms: the failure at 5 ms let the second copy go at once.
    assert_eq!(started.elapsed(), ms(15));
    assert_eq!(copies.sent(), 2);
    assert!(rec.events().contains(&Event::AttemptStarted(AttemptStart {
        number: 2,
        retry_of: Some(ErrorType::OTHER),
        hedge: true,
        limit: None
    })));
    assert_eq!(ends(&rec)[0].hedge, Some(HedgeOutcome::Failed));
}

#[tokio::test(start_paused = true)]
async fn a_fatal_failure_ends_the_call_and_drops_the_other_copies() {
    let copies = Copies::default();
    let rec = Recorder::default();
    let started = Instant::now();
    let error = copies
        .op(|n| if n == 2 { ms(10) } else { FOREVER }, |n| if n == 2 { Err("denied") } else { Ok(n) })
        .hedge(fixed(3, ms(50)))
        .when(|e: &&str| *e == "unavailable")
        .observe(rec.clone())
        .await
        .expect_err("a fatal failure ends the call");
    assert_eq!(
        (error.reason(), error.attempts(), error.last_error()),
        (StopReason::Permanent, 2, Some(&"denied"))
    );
    assert_eq!(started.elapsed(), ms(60));
    assert_eq!((copies.sent(), copies.dropped()), (2, 1), "no third copy; the first was dropped");
    let outcomes: Vec<_> = ends(&rec).iter().map(|e| (e.number, e.hedge)).collect();
    assert_eq!(outcomes, [(2, Some(HedgeOutcome::Failed)), (1, Some(HedgeOutcome::Cancelled))]);
    assert_eq!(rec.finish().outcome, Outcome::Failure);
}

#[tokio::test(start_paused = true)]
async fn no_more_than_max_copies_are_sent_and_each_is_cut_at_its_attempt_timeout() {
    let copies = Copies::default();
    let policy = HedgePolicy::builder()
        .max_copies(3)
        .delay(HedgeDelay::Fixed(ms(10)))
        .attempt_timeout(ms(100))
        .no_deadline()
        .build()
        .expect("valid policy");
    let started = Instant::now();
    let error = copies
        .op(|_| FOREVER, Ok)
        .hedge(policy.clone())
        .when(|_: &&str| true)
        .await
        .expect_err("every copy timed out");
    assert_eq!((error.reason(), error.attempts()), (StopReason::AttemptsExhausted, 3));
    assert_eq!(error.error_type(), Some(ErrorType::TIMEOUT));
    // Copies at 0, 10 and 20 ms; the last is cut at 120 ms.
    assert_eq!(started.elapsed(), ms(120));
    assert_eq!((copies.sent(), copies.dropped()), (3, 3));
}

#[tokio::test(start_paused = true)]
async fn the_deadline_ends_the_call_with_every_copy_dropped() {
    let copies = Copies::default();
    let policy = HedgePolicy::builder()
        .max_copies(2)
        .delay(HedgeDelay::Fixed(ms(50)))
        .attempt_timeout(Duration::from_secs(5))
        .deadline(ms(300))
        .build()
        .expect("valid policy");
    let rec = Recorder::default();
    let started = Instant::now();
    let error = copies
        .op(|_| FOREVER, Ok)
        .hedge(policy.clone())
        .when(|_: &&str| true)
        .observe(rec.clone())
        .await
        .expect_err("nothing answered");
    assert_eq!((error.reason(), error.attempts()), (StopReason::DeadlineExceeded, 2));
    assert_eq!(started.elapsed(), ms(300));
    assert_eq!(copies.dropped(), 2);
    assert!(ends(&rec).iter().all(|e| e.hedge == Some(HedgeOutcome::Cancelled) && e.error.is_none()));
    assert_eq!(rec.finish().outcome, Outcome::Exhausted);
}

#[tokio::test(start_paused = true)]
async fn a_server_hint_delays_the_next_copy_and_a_stop_sends_no_more() {
    // A pushback of 30 ms: the second copy goes at 5 + 30 ms, not at once.
    let copies = Copies::default();
    let started = Instant::now();
    let answer = copies
        .op(|n| if n == 1 { ms(5) } else { ms(10) }, |n| if n == 1 { Err("pushback") } else { Ok(n) })
        .hedge(fixed(3, ms(100)))
        .classify(|r: &Result<u32, &str>| match r {
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::Retryable {
                error: ErrorType::Kind("UNAVAILABLE"),
                hint: Some(Hint::grpc_pushback(ms(30))),
            },
        })
        .await;
    assert_eq!((answer, started.elapsed()), (Ok(2), ms(45)));

    // A "stop" (unrepeatable): no further copy, but the one in flight may win.
    let copies = Copies::default();
    let started = Instant::now();
    let answer = copies
        .op(|n| if n == 1 { ms(200) } else { ms(5) }, |n| if n == 2 { Err("stop") } else { Ok(n) })
        .hedge(fixed(3, ms(50)))
        .classify(|r: &Result<u32, &str>| match r {
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::unrepeatable(ErrorType::Kind("UNAVAILABLE")),
        })
        .await;
    assert_eq!((answer, started.elapsed(), copies.sent()), (Ok(1), ms(200), 2));
}

#[tokio::test(start_paused = true)]
async fn a_server_hint_past_the_policys_limit_sends_no_further_copy_and_the_call_ends_at_once() {
    // A pushback of 20 minutes, past the 60 s a hedging policy may wait on a
    // server: it means "not any time soon", as it does for a retry. The call
    // ends when the failed copy does, and says why.
    let copies = Copies::default();
    let rec = Recorder::default();
    let started = Instant::now();
    let answer = copies
        .op(|_| ms(5), |_| Err("pushback"))
        .hedge(fixed(3, ms(100)))
        .observe(rec.clone())
        .classify(|r: &Result<u32, &str>| match r {
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::Retryable {
                error: ErrorType::Kind("UNAVAILABLE"),
                hint: Some(Hint::grpc_pushback(Duration::from_secs(1_200))),
            },
        })
        .await;
    let error = answer.expect_err("the only copy failed");
    assert_eq!((error.last_error(), started.elapsed(), copies.sent()), (Some(&"pushback"), ms(5), 1));
    assert!(matches!(error.reason(), StopReason::HintTooLong { .. }), "{error}");
    let finish = rec.finish();
    assert_eq!(finish.outcome, Outcome::Exhausted);
    assert!(
        matches!(finish.reason, Some(StopReason::HintTooLong { limit, .. }) if limit == Duration::from_secs(60)),
        "{:?}",
        finish.reason
    );
}

#[tokio::test(start_paused = true)]
async fn under_a_dead_dependency_the_budget_holds_hedges_to_its_share() {
    // 10 % of requests, no per-second allowance: 200 calls may hedge about 20 times.
    let budget = RetryBudget::builder().ratio(0.1).min_per_second(0).build().expect("valid budget");
    let dependency = Dependency::new("test").with_budget(budget.clone());
    let policy = HedgePolicy::builder()
        .max_copies(3)
        .delay(HedgeDelay::Fixed(ms(20)))
        .attempt_timeout(ms(100))
        .deadline(ms(150))
        .build()
        .expect("valid policy");
    let copies = Copies::default();
    let calls: Vec<_> = (0..200)
        .map(|_| {
            let (policy, dependency, copies) = (policy.clone(), &dependency, copies.clone());
            async move {
                copies
                    .op(|_| FOREVER, Ok)
                    .hedge(policy.clone())
                    .dependency(dependency)
                    .when(|_: &&str| true)
                    .await
            }
        })
        .collect();
    let results = futures_join_all(calls).await;
    let refused = results
        .iter()
        .filter(|r| r.as_ref().is_err_and(|e| e.reason() == StopReason::BudgetExhausted))
        .count();
    let hedges = copies.sent() - 200;
    // Without the budget: 400 hedges (two per call).
    assert!(hedges <= 21, "{hedges} hedges for 200 calls");
    assert!(hedges >= 1, "the budget allowed some");
    assert!(refused > 150, "{refused} calls were refused their hedges");
}

/// Polls every future on this task until all are done.
async fn futures_join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).map(Some).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if let Some(fut) = slot {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => {
                        *output = Some(value);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("every future finished")).collect()
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_sends_nothing() {
    let breaker = CircuitBreaker::builder().min_calls(1).failure_ratio(0.5).build().expect("valid breaker");
    let dependency = Dependency::new("test").with_breaker(breaker.clone());
    breaker.try_acquire().expect("closed").failure();
    let copies = Copies::default();
    let error = copies
        .op(|_| ms(1), Ok)
        .hedge(fixed(3, ms(10)))
        .dependency(&dependency)
        .when(|_: &&str| true)
        .await
        .expect_err("the breaker is open");
    assert_eq!((error.reason(), error.attempts(), copies.sent()), (StopReason::CircuitOpen, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_call_cancels_every_copy_and_reports_it() {
    let copies = Copies::default();
    let rec = Recorder::default();
    let call = copies.op(|_| FOREVER, Ok).hedge(fixed(2, ms(10))).when(|_: &&str| true).observe(rec.clone());
    assert!(tokio::time::timeout(ms(50), call).await.is_err());
    assert_eq!((copies.sent(), copies.dropped()), (2, 2));
    assert_eq!(ends(&rec).len(), 2);
    assert!(ends(&rec).iter().all(|e| e.hedge == Some(HedgeOutcome::Cancelled)));
    assert_eq!(rec.finish().outcome, Outcome::Cancelled);
}

#[tokio::test(start_paused = true)]
async fn a_percentile_delay_follows_a_latency_shift() {
    let policy = HedgePolicy::builder()
        .max_copies(2)
        .delay(HedgeDelay::percentile(0.9).window(Duration::from_secs(1)).min_samples(10).fallback(ms(77)))
        .build()
        .expect("valid policy");
    let now = || Instant::now().into_std();
    assert_eq!(policy.percentile_delay(now()), Some(ms(77)), "the fallback before any window ends");
    // Calls answering in 10 ms for two windows: p90 ≈ 10 ms (bucket bound, ≤ 12.5 % above).
    let copies = Copies::default();
    let run = |latency: Duration, copies: &Copies| {
        let (policy, copies) = (policy.clone(), copies.clone());
        async move {
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(2) {
                let answer =
                    copies.op(move |_| latency, Ok).hedge(policy.clone()).when(|_: &&str| true).await;
                assert!(answer.is_ok());
            }
        }
    };
    run(ms(10), &copies).await;
    let delay = policy.percentile_delay(now()).expect("a percentile delay");
    assert!(delay >= ms(10) && delay <= ms(12), "{delay:?}");
    // The dependency slows to 40 ms: the delay follows within two windows.
    run(ms(40), &copies).await;
    let delay = policy.percentile_delay(now()).expect("a percentile delay");
    assert!(delay >= ms(40) && delay <= ms(46), "{delay:?}");
    // A quiet window (fewer than 10 samples): the fallback again.
    sleep(Duration::from_secs(1)).await;
    let _ = policy.percentile_delay(now());
    sleep(Duration::from_secs(1)).await;
    assert_eq!(policy.percentile_delay(now()), Some(ms(77)));
}

#[tokio::test(start_paused = true)]
async fn a_percentile_delay_is_clamped() {
    let policy = HedgePolicy::builder()
        .delay(HedgeDelay::percentile(0.5).window(ms(100)).min_samples(1).clamp(ms(5), ms(20)))
        .build()
        .expect("valid policy");
    let copies = Copies::default();
    for _ in 0..3 {
        copies.op(|_| ms(1), Ok).hedge(policy.clone()).when(|_: &&str| true).await.expect("answers");
    }
    sleep(ms(100)).await;
    assert_eq!(policy.percentile_delay(Instant::now().into_std()), Some(ms(5)), "raised to the minimum");
}

#[test]
fn settings_out_of_range_are_refused() {
    // One above gRFC A6's cap of 5 (`HedgePolicy`'s limits).
    let copies = HedgePolicy::builder().max_copies(5 + 1).build().expect_err("6 copies");
    // The setting and value, and the range (1..=5) in the message.
    assert_eq!((copies.setting(), copies.value()), ("max_copies", SettingValue::Count(6)));
    assert_eq!(copies.to_string(), "max_copies must be at least 1 and at most 5, got 6");
    assert!(HedgePolicy::builder().max_copies(0).build().is_err());
    let quantile = HedgePolicy::builder().delay(HedgeDelay::percentile(1.0)).build().expect_err("p100");
    assert_eq!(quantile.to_string(), "quantile must be above 0 and below 1, got 1");
    assert!(HedgePolicy::builder().delay(HedgeDelay::percentile(f64::NAN)).build().is_err());
    let clamp = HedgePolicy::builder().delay(HedgeDelay::percentile(0.9).clamp(ms(20), ms(10))).build();
    assert!(clamp.is_err(), "min above max");
    assert!(HedgePolicy::builder().deadline(Duration::ZERO).build().is_err());
    assert!(HedgePolicy::builder().delay(HedgeDelay::Fixed(Duration::ZERO)).build().is_ok(), "all at once");
}

#[tokio::test(start_paused = true)]
async fn a_zero_delay_sends_every_copy_at_once() {
    let copies = Copies::default();
    let answer = copies
        .op(|n| ms(u64::from(40 - 10 * n)), Ok)
        .hedge(fixed(3, Duration::ZERO))
        .when(|_: &&str| true)
        .await;
    assert_eq!((answer, copies.sent(), copies.dropped()), (Ok(3), 3, 2));
}

/// Real time: on the wall clock, a stalled copy costs the caller the hedging
/// delay, not the stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_wall_clock_a_stalled_copy_costs_the_delay_not_the_stall() {
    let copies = Copies::default();
    let started = std::time::Instant::now();
    let answer = copies
        .op(|n| if n == 1 { Duration::from_secs(30) } else { ms(5) }, Ok)
        .hedge(fixed(2, ms(50)))
        .when(|_: &&str| true)
        .await;
    let took = started.elapsed();
    assert_eq!(answer, Ok(2));
    assert!(took >= ms(55) && took < Duration::from_secs(5), "{took:?}");
    assert_eq!(copies.dropped(), 1);
}

/// Many callers on a multi-threaded runtime share one policy (and its
/// latency tracker) and one budget, through `Arc`s: the hedged calls are
/// `'static` and `Send`, so they can be spawned (what a tower service needs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_spawned_callers_share_one_percentile_policy_and_budget() {
    use std::future::IntoFuture;
    let policy = HedgePolicy::builder()
        .delay(HedgeDelay::percentile(0.5).window(ms(100)).min_samples(5))
        .build()
        .expect("valid policy");
    let inventory = Arc::new(Dependency::new("inventory").with_budget(RetryBudget::default()));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (policy, inventory) = (policy.clone(), Arc::clone(&inventory));
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let mut answered = 0;
                while started.elapsed() < ms(300) {
                    let call = (|| async {
                        sleep(ms(1)).await;
                        Ok::<_, std::io::Error>(())
                    })
                    .hedge(policy.clone())
                    .dependency(&inventory)
                    .into_future();
                    call.await.expect("answers");
                    answered += 1;
                }
                answered
            })
        })
        .collect();
    let mut answered = 0;
    for task in tasks {
        answered += task.await.expect("the task ran");
    }
    assert!(answered > 50, "{answered} calls");
    // The copies' latencies (about 1 ms each, more on a busy machine) set the
    // delay; generous bounds, since this is the wall clock.
    let delay = policy.percentile_delay(Instant::now().into_std()).expect("a percentile delay");
    assert!(delay >= ms(1) && delay <= ms(100), "{delay:?}");
}

/// A pacer that has spent its quota on one send: the next slot is 10 s away.
fn pacer_with_one_slot_per_10s() -> Pacer {
    let pacer = Pacer::new();
    pacer.learn(&PaceSignal {
        quota: Some(Quota { remaining: 1, reset: Duration::from_secs(10), policy: None }),
        ..PaceSignal::none()
    });
    pacer
}

#[tokio::test(start_paused = true)]
async fn a_dependency_the_pacer_holds_gets_no_hedge_copy() {
    // Without a pacer the stalled first copy is hedged at 50 ms.
    let copies = Copies::default();
    let answer = copies
        .op(|n| if n == 1 { ms(200) } else { ms(10) }, Ok)
        .hedge(fixed(2, ms(50)))
        .when(|_: &&str| true)
        .await;
    assert_eq!((answer, copies.sent()), (Ok(2), 2));

    // The first copy takes the quota's slot; the hedge's would be 10 s away,
    // so none is sent before the first copy answers.
    let pacer = pacer_with_one_slot_per_10s();
    let dependency = Dependency::new("test").with_pacer(pacer.clone());
    let copies = Copies::default();
    let started = Instant::now();
    let answer = copies
        .op(|n| if n == 1 { ms(200) } else { ms(10) }, Ok)
        .hedge(fixed(2, ms(50)))
        .dependency(&dependency)
        .when(|_: &&str| true)
        .await;
    assert_eq!((answer, copies.sent(), started.elapsed()), (Ok(1), 1, ms(200)));
}

#[tokio::test(start_paused = true)]
async fn a_copy_the_pacer_would_hold_past_the_deadline_is_not_sent() {
    let policy = HedgePolicy::builder()
        .max_copies(3)
        .delay(HedgeDelay::Fixed(ms(50)))
        .no_attempt_timeout()
        .deadline(Duration::from_secs(2))
        .build()
        .expect("valid policy");
    let pacer = pacer_with_one_slot_per_10s();
    let dependency = Dependency::new("test").with_pacer(pacer.clone());
    let copies = Copies::default();
    let error = copies
        .op(|_| ms(200), |_| Err("unavailable"))
        .hedge(policy)
        .dependency(&dependency)
        .when(|_: &&str| true)
        .await
        .expect_err("the only copy failed");
    // No copy after the refused one, not even after the first copy failed.
    assert!(matches!(error.reason(), StopReason::RateLimited { .. }), "{:?}", error.reason());
    assert_eq!((error.attempts(), copies.sent()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_budget_sends_no_hedge_copy() {
    // No request counted yet and no per-second allowance: no token for a hedge.
    let budget = RetryBudget::builder().ratio(0.1).min_per_second(0).build().expect("valid budget");
    let dependency = Dependency::new("test").with_budget(budget.clone());
    let copies = Copies::default();
    let answer = copies
        .op(|n| if n == 1 { ms(200) } else { ms(10) }, Ok)
        .hedge(fixed(3, ms(50)))
        .dependency(&dependency)
        .when(|_: &&str| true)
        .await;
    assert_eq!((answer, copies.sent()), (Ok(1), 1));

    // A failed first copy cannot be replaced either: the call stops and says why.
    let copies = Copies::default();
    let error = copies
        .op(|_| ms(5), |_| Err("unavailable"))
        .hedge(fixed(3, ms(50)))
        .dependency(&dependency)
        .when(|_: &&str| true)
        .await
        .expect_err("no copy answered");
    assert_eq!((error.reason(), error.attempts(), copies.sent()), (StopReason::BudgetExhausted, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_breaker_opened_by_one_copy_refuses_the_next() {
    let breaker = CircuitBreaker::builder().min_calls(1).failure_ratio(0.5).build().expect("valid breaker");
    let dependency = Dependency::new("test").with_breaker(breaker.clone());
    let copies = Copies::default();
    let error = copies
        .op(|_| ms(5), |_| Err("unavailable"))
        .hedge(fixed(3, ms(50)))
        .dependency(&dependency)
        .when(|_: &&str| true)
        .await
        .expect_err("the breaker opened");
    assert_eq!((error.reason(), error.attempts(), copies.sent()), (StopReason::CircuitOpen, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_slow_copy_cancelled_by_a_later_winner_counts_its_time_in_flight() {
    let policy = HedgePolicy::builder()
        .max_copies(2)
        .delay(HedgeDelay::percentile(0.9).window(ms(100)).min_samples(1).fallback(ms(10)))
        .build()
        .expect("valid policy");
    // The first copy stalls; the hedge, sent at 10 ms, answers in 5 ms.
    let copies = Copies::default();
    let answer = copies
        .op(|n| if n == 1 { FOREVER } else { ms(5) }, Ok)
        .hedge(policy.clone())
        .when(|_: &&str| true)
        .await;
    assert_eq!((answer, copies.dropped()), (Ok(2), 1));
    sleep(ms(100)).await;
    // Counted: the winner's 5 ms and the stalled copy's 15 ms in flight. The
    // winners alone would make the p90 5 ms, too short for this dependency.
    let delay = policy.percentile_delay(Instant::now().into_std()).expect("a percentile delay");
    assert!(delay >= ms(15) && delay <= ms(17), "{delay:?}");
}
