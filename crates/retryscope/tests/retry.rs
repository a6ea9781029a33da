//! The async engine, specified with tokio's paused clock: no test sleeps for real.

mod common;

use common::{Event, Recorder, ms, plain};
use retryscope::dependency::Dependency;
use retryscope::observe::{AttemptEnd, AttemptStart, Wait};
use retryscope::{DelaySource, ErrorType, Hint, Jitter, Outcome, Policy, Retryable, StopReason, Verdict};
use std::cell::Cell;
use std::time::Duration;
use tokio::time::Instant;

/// An operation that fails `failures` times with `"busy"`, then returns its call count.
fn flaky(
    failures: u32,
    calls: &Cell<u32>,
) -> impl FnMut() -> std::future::Ready<Result<u32, &'static str>> + '_ {
    move || {
        calls.set(calls.get() + 1);
        std::future::ready(if calls.get() <= failures { Err("busy") } else { Ok(calls.get()) })
    }
}

#[tokio::test(start_paused = true)]
async fn success_at_once_runs_one_attempt_and_never_waits() {
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let started = Instant::now();
    let result =
        flaky(0, &calls).retry(plain()).retry_any_error().observe(rec.clone()).dependency("db").await;
    assert_eq!(result.unwrap(), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
    let events = rec.events();
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(events[0], Event::Start { dependency: "db".into(), operation: None, max_attempts: 5 });
    assert_eq!(
        events[1],
        Event::AttemptStarted(AttemptStart {
            number: 1,
            retry_of: None,
            hedge: false,
            limit: Some(Duration::from_secs(5))
        })
    );
    assert_eq!(
        events[2],
        Event::AttemptFinished(AttemptEnd { number: 1, duration: Duration::ZERO, error: None, hedge: None })
    );
    let finish = rec.finish();
    assert_eq!((finish.outcome, finish.reason, finish.attempts), (Outcome::Success, None, 1));
}

/// What an integration derives its own limits from (a connect's, say): each
/// attempt's time limit, its attempt timeout cut to what is left of the deadline.
#[tokio::test(start_paused = true)]
async fn each_attempt_hears_its_limit_the_attempt_timeout_cut_to_the_deadline() {
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let policy = Policy::builder()
        .max_attempts(3)
        .base_delay(ms(1_000))
        .multiplier(1.0)
        .jitter(Jitter::None)
        .attempt_timeout(ms(1_500))
        .deadline(ms(3_000))
        .build()
        .unwrap();
    let result = flaky(2, &calls).retry(policy).retry_any_error().observe(rec.clone()).await;
    assert_eq!(result.unwrap(), 3);
    let limits: Vec<_> = rec
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::AttemptStarted(start) => Some(start.limit),
            _ => None,
        })
        .collect();
    // At 0 s the whole 1.5 s; at 1 s too (2 s left); at 2 s, the 1 s left.
    assert_eq!(limits, [Some(ms(1_500)), Some(ms(1_500)), Some(ms(1_000))]);
}

#[tokio::test(start_paused = true)]
async fn success_on_the_third_attempt_waits_the_exponential_delays() {
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let started = Instant::now();
    let result = flaky(2, &calls).retry(plain()).retry_any_error().observe(rec.clone()).await;
    assert_eq!(result.unwrap(), 3);
    // 100 ms + 200 ms of backoff, attempts take no time.
    assert_eq!(started.elapsed(), ms(300));
    let waits = rec.waits();
    let expected = |next, delay| Wait {
        next_attempt: next,
        delay,
        source: DelaySource::Policy,
        error: ErrorType::OTHER,
    };
    assert_eq!(waits, [expected(2, ms(100)), expected(3, ms(200))]);
    let finish = rec.finish();
    assert_eq!((finish.outcome, finish.attempts, finish.duration), (Outcome::Success, 3, ms(300)));
    // Retries carry the failure that caused them.
    assert!(rec.events().contains(&Event::AttemptStarted(AttemptStart {
        number: 3,
        retry_of: Some(ErrorType::OTHER),
        hedge: false,
        limit: Some(Duration::from_secs(5))
    })));
}

#[tokio::test(start_paused = true)]
async fn attempts_are_exact_when_every_attempt_fails() {
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let err =
        flaky(u32::MAX, &calls).retry(plain()).retry_any_error().observe(rec.clone()).await.unwrap_err();
    assert_eq!(calls.get(), 5);
    assert_eq!(err.attempts(), 5);
    assert_eq!(err.reason(), StopReason::AttemptsExhausted);
    assert_eq!(err.last_error(), Some(&"busy"));
    // What happened, not the last error: that is the source (tests/error_chain.rs).
    assert_eq!(err.to_string(), "gave up after 5 attempt(s): all attempts failed; last failure: _OTHER");
    assert_eq!(rec.finish().outcome, Outcome::Exhausted);
    assert_eq!(rec.waits().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_returns_after_exactly_one_attempt() {
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let err = flaky(u32::MAX, &calls)
        .retry(plain())
        .when(|e: &&str| *e != "busy")
        .observe(rec.clone())
        .await
        .unwrap_err();
    assert_eq!((calls.get(), err.attempts(), err.reason()), (1, 1, StopReason::Permanent));
    assert_eq!(rec.finish().outcome, Outcome::Failure);
}

#[tokio::test(start_paused = true)]
async fn notify_hears_each_error_and_delay() {
    let calls = Cell::new(0);
    let mut heard: Vec<(&str, Duration)> = Vec::new();
    let result = flaky(2, &calls)
        .retry(plain())
        .retry_any_error()
        .notify(|e: &&'static str, d| heard.push((*e, d)))
        .await;
    assert!(result.is_ok());
    assert_eq!(heard, [("busy", ms(100)), ("busy", ms(200))]);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_is_never_crossed_even_by_a_slow_attempt() {
    let policy = plain().to_builder().deadline(ms(1_000)).build().unwrap();
    let rec = Recorder::default();
    let started = Instant::now();
    // Every attempt hangs for 10 s; the deadline cuts the first one at 1 s.
    let err = (|| async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok::<(), &str>(())
    })
    .retry(policy)
    .retry_any_error()
    .observe(rec.clone())
    .await
    .unwrap_err();
    assert_eq!(started.elapsed(), ms(1_000));
    assert_eq!(err.reason(), StopReason::DeadlineExceeded);
    assert_eq!(err.attempts(), 1);
    assert!(err.last_error().is_none());
    assert_eq!(err.error_type(), Some(ErrorType::TIMEOUT));
    assert_eq!(
        err.to_string(),
        "gave up after 1 attempt(s): the deadline was reached; last failure: timeout"
    );
    assert_eq!(rec.attempts()[0].error, Some(ErrorType::TIMEOUT));
}

#[tokio::test(start_paused = true)]
async fn the_engine_gives_up_early_when_the_next_wait_cannot_fit() {
    // Attempts take 300 ms; after the second (t = 700 ms) the 200 ms wait would
    // end at the 900 ms deadline, leaving no time for an attempt.
    let policy = plain().to_builder().deadline(ms(900)).build().unwrap();
    let calls = Cell::new(0);
    let started = Instant::now();
    let err = (|| {
        calls.set(calls.get() + 1);
        async {
            tokio::time::sleep(ms(300)).await;
            Err::<(), _>("busy")
        }
    })
    .retry(policy)
    .retry_any_error()
    .await
    .unwrap_err();
    assert_eq!(err.reason(), StopReason::DeadlineExceeded);
    assert_eq!(calls.get(), 2);
    assert_eq!(started.elapsed(), ms(700));
}

#[tokio::test(start_paused = true)]
async fn the_per_attempt_timeout_fires_then_the_engine_retries() {
    let policy = plain().to_builder().attempt_timeout(ms(50)).build().unwrap();
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let started = Instant::now();
    let result = (|| {
        calls.set(calls.get() + 1);
        let stall = calls.get() == 1;
        async move {
            if stall {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Ok::<_, &str>("done")
        }
    })
    .retry(policy)
    .retry_any_error()
    .observe(rec.clone())
    .await;
    assert_eq!(result.unwrap(), "done");
    assert_eq!(calls.get(), 2);
    assert_eq!(started.elapsed(), ms(150)); // 50 ms timeout + 100 ms backoff
    assert_eq!(
        rec.attempts()[0],
        AttemptEnd { number: 1, duration: ms(50), error: Some(ErrorType::TIMEOUT), hedge: None }
    );
}

#[tokio::test(start_paused = true)]
async fn the_attempt_timeout_is_clipped_to_the_deadline() {
    let policy = plain().to_builder().attempt_timeout(ms(800)).deadline(ms(1_000)).build().unwrap();
    let started = Instant::now();
    let err = (|| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<(), &str>(())
    })
    .retry(policy)
    .retry_any_error()
    .await
    .unwrap_err();
    // 800 ms timeout, 100 ms wait, then only 100 ms remain for attempt 2.
    assert_eq!(started.elapsed(), ms(1_000));
    assert_eq!((err.attempts(), err.reason()), (2, StopReason::DeadlineExceeded));
}

fn hinted(hint: Hint) -> impl FnMut(&Result<(), &str>) -> Verdict {
    move |r| match r {
        Ok(()) => Verdict::Success,
        Err(_) => Verdict::Retryable { error: ErrorType::Status(429), hint: Some(hint) },
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_a_floor_with_a_spread_on_top() {
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let started = Instant::now();
    let op = || {
        calls.set(calls.get() + 1);
        std::future::ready(if calls.get() == 1 { Err("slow down") } else { Ok(()) })
    };
    let result = op.retry(plain()).classify(hinted(Hint::retry_after(ms(1_500)))).observe(rec.clone()).await;
    assert!(result.is_ok());
    // Above the 1 s cap: never earlier than the server asked, at most a fifth later.
    let waited = started.elapsed();
    assert!((ms(1_500)..=ms(1_800)).contains(&waited), "{waited:?}");
    assert_eq!(rec.waits()[0].source, DelaySource::RetryAfter);
}

/// The first wait of `policy` after a failure that carried `hint`, for `seed`.
async fn first_wait(policy: Policy, hint: Hint, seed: u64) -> (Duration, DelaySource) {
    let rec = Recorder::default();
    let calls = Cell::new(0);
    let op = || {
        calls.set(calls.get() + 1);
        std::future::ready(if calls.get() == 1 { Err("told") } else { Ok(()) })
    };
    let result = op.retry(policy).classify(hinted(hint)).observe(rec.clone()).seed(seed).await;
    assert!(result.is_ok());
    let wait = rec.waits()[0];
    (wait.delay, wait.source)
}

#[tokio::test(start_paused = true)]
async fn clients_told_the_same_retry_after_come_back_spread() {
    let mut waits = Vec::new();
    for seed in 0..20 {
        waits.push(first_wait(Policy::interactive(), Hint::retry_after(ms(1_000)), seed).await);
    }
    assert!(
        waits
            .iter()
            .all(|&(d, source)| d >= ms(1_000) && d <= ms(1_200) && source == DelaySource::RetryAfter)
    );
    let (first, last) = (waits.iter().map(|w| w.0).min(), waits.iter().map(|w| w.0).max());
    let spread = last.zip(first).map(|(l, f)| l - f);
    assert!(spread.is_some_and(|s| s >= ms(100)), "20 clients within {spread:?}");
}

#[tokio::test(start_paused = true)]
async fn retry_after_zero_keeps_the_computed_backoff() {
    // Equal jitter: the computed wait is never below half the exponential delay.
    let policy = plain().to_builder().jitter(Jitter::Equal).build().unwrap();
    for seed in 0..20 {
        let (delay, source) = first_wait(policy, Hint::retry_after(Duration::ZERO), seed).await;
        assert_eq!(source, DelaySource::Policy);
        assert!((ms(50)..=ms(100)).contains(&delay), "{delay:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_spread_never_passes_the_deadline_or_the_longest_server_delay() {
    let policy = plain().to_builder().deadline(ms(2_000)).max_server_delay(ms(1_050)).build().unwrap();
    for seed in 0..50 {
        let (delay, _) = first_wait(policy, Hint::retry_after(ms(1_000)), seed).await;
        assert!((ms(1_000)..=ms(1_050)).contains(&delay), "{delay:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn grpc_pushback_is_applied_exactly_as_grfc_a6_says() {
    for seed in 0..5 {
        // Shorter than the computed backoff too: A6's pushback replaces it.
        let policy = plain().to_builder().jitter(Jitter::None).build().unwrap();
        assert_eq!(
            first_wait(policy, Hint::grpc_pushback(ms(30)), seed).await,
            (ms(30), DelaySource::GrpcPushback)
        );
        assert_eq!(
            first_wait(policy, Hint::grpc_pushback(ms(700)), seed).await,
            (ms(700), DelaySource::GrpcPushback)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_hint_only_ever_slows_the_client() {
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let op = || {
        calls.set(calls.get() + 1);
        std::future::ready(if calls.get() <= 2 { Err("limited") } else { Ok(()) })
    };
    // 150 ms: longer than the first computed delay (100), shorter than the second (200).
    let result = op.retry(plain()).classify(hinted(Hint::rate_limit(ms(150)))).observe(rec.clone()).await;
    assert!(result.is_ok());
    let waits = rec.waits();
    assert_eq!((waits[0].source, waits[1].source), (DelaySource::RateLimit, DelaySource::Policy));
    // The hint decided the first wait (plus up to 30 ms of spread), the backoff the second.
    assert!((ms(150)..=ms(180)).contains(&waits[0].delay), "{:?}", waits[0].delay);
    assert_eq!(waits[1].delay, ms(200));
}

#[tokio::test(start_paused = true)]
async fn a_hint_longer_than_the_maximum_stops_at_once() {
    let calls = Cell::new(0);
    let started = Instant::now();
    let op = || {
        calls.set(calls.get() + 1);
        std::future::ready(Err::<(), _>("go away"))
    };
    let err = op
        .retry(plain())
        .classify(hinted(Hint::retry_after(Duration::from_secs(100_000))))
        .await
        .unwrap_err();
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(calls.get(), 1);
    let StopReason::HintTooLong { hint, limit } = err.reason() else { panic!("{:?}", err.reason()) };
    assert_eq!((hint.delay, limit), (Duration::from_secs(100_000), Duration::from_secs(60)));
    assert!(err.to_string().contains("the server asked to wait 100000s (retry_after)"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_hint_longer_than_the_remaining_deadline_stops_at_once() {
    let policy = plain().to_builder().deadline(Duration::from_secs(10)).build().unwrap();
    let err = (|| std::future::ready(Err::<(), _>("later")))
        .retry(policy)
        .classify(hinted(Hint::retry_after(Duration::from_secs(30))))
        .await
        .unwrap_err();
    assert!(
        matches!(err.reason(), StopReason::HintTooLong { limit, .. } if limit == Duration::from_secs(10))
    );
}

#[tokio::test(start_paused = true)]
async fn a_retryable_ok_value_is_handed_back_when_attempts_run_out() {
    // HTTP clients return a 503 as Ok(response): when retries are exhausted the
    // caller gets the last response, as it would without retries.
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let result = (|| {
        calls.set(calls.get() + 1);
        std::future::ready(Ok::<u16, ()>(503))
    })
    .retry(plain())
    .classify(|r: &Result<u16, ()>| match r {
        Ok(503) => Verdict::retryable(ErrorType::Status(503)),
        _ => Verdict::Success,
    })
    .observe(rec.clone())
    .await;
    assert_eq!(result.unwrap(), 503);
    assert_eq!(calls.get(), 5);
    assert_eq!(rec.finish().outcome, Outcome::Exhausted);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_while_it_waits_cancels_cleanly() {
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let retry = flaky(u32::MAX, &calls).retry(plain()).retry_any_error().observe(rec.clone());
    // Attempt 1 fails at t = 0, the engine waits 100 ms; time out at 50 ms.
    let outcome = tokio::time::timeout(ms(50), retry).await;
    assert!(outcome.is_err());
    assert_eq!(calls.get(), 1);
    let finish = rec.finish();
    assert_eq!((finish.outcome, finish.attempts, finish.duration), (Outcome::Cancelled, 1, ms(50)));
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_mid_attempt_reports_the_attempt() {
    let rec = Recorder::default();
    let retry = (|| async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok::<(), ()>(())
    })
    .retry(plain())
    .retry_any_error()
    .observe(rec.clone());
    assert!(tokio::time::timeout(ms(20), retry).await.is_err());
    assert_eq!(
        rec.attempts(),
        [AttemptEnd { number: 1, duration: ms(20), error: Some(ErrorType::Kind("cancelled")), hedge: None }]
    );
    assert_eq!(rec.finish().outcome, Outcome::Cancelled);
}

#[tokio::test(start_paused = true)]
async fn labels_reach_the_observer() {
    let rec = Recorder::default();
    let _ = (|| std::future::ready(Ok::<(), ()>(())))
        .retry(Policy::interactive())
        .retry_any_error()
        .dependency("payments")
        .operation("create_invoice")
        .observe(rec.clone())
        .await;
    assert_eq!(
        rec.events()[0],
        Event::Start {
            dependency: "payments".into(),
            operation: Some("create_invoice".into()),
            max_attempts: 4
        }
    );
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_gives_the_same_waits() {
    let run = |seed| async move {
        let rec = Recorder::default();
        let calls = Cell::new(0);
        let policy = plain().to_builder().jitter(Jitter::Full).build().unwrap();
        let _ = flaky(u32::MAX, &calls).retry(policy).retry_any_error().seed(seed).observe(rec.clone()).await;
        rec.waits().into_iter().map(|w| w.delay).collect::<Vec<_>>()
    };
    assert_eq!(run(5).await, run(5).await);
    assert_ne!(run(5).await, run(6).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_future_is_send_and_runs_on_a_multi_thread_runtime() {
    let handle =
        tokio::spawn(async { (|| async { Ok::<_, std::io::Error>(7) }).retry(Policy::interactive()).await });
    assert_eq!(handle.await.unwrap().unwrap(), 7);
}

#[tokio::test(start_paused = true)]
async fn an_error_judged_a_success_is_reported_as_a_failure() {
    let rec = Recorder::default();
    let err = (|| std::future::ready(Err::<(), _>("odd")))
        .retry(plain())
        .classify(|_: &Result<(), &str>| Verdict::Success)
        .observe(rec.clone())
        .await
        .unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (StopReason::Permanent, 1));
    // The telemetry tells the same story as the caller's result.
    assert_eq!(rec.finish().outcome, Outcome::Failure);
    assert_eq!(rec.attempts()[0].error, Some(ErrorType::OTHER));
}

#[tokio::test(start_paused = true)]
async fn an_unrepeatable_failure_stops_at_once() {
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let err = flaky(u32::MAX, &calls)
        .retry(plain())
        .classify(|r: &Result<u32, &str>| match r {
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::unrepeatable(ErrorType::Status(503)),
        })
        .observe(rec.clone())
        .await
        .unwrap_err();
    assert_eq!((calls.get(), err.reason()), (1, StopReason::Unrepeatable));
    assert_eq!(err.error_type(), Some(ErrorType::Status(503)));
    assert_eq!(rec.finish().outcome, Outcome::Failure);
}

/// A reply holding a resource (think: a pooled connection) in its body.
#[derive(Debug)]
struct Reply {
    status: u16,
    body: Option<&'static str>,
}

/// Retries 503s and lets each kept reply's body go before the wait.
struct ReleasingBodies<'a> {
    released: &'a Cell<u32>,
}

impl retryscope::classify::Classify<Reply, &'static str> for ReleasingBodies<'_> {
    fn classify(&mut self, result: &Result<Reply, &'static str>) -> Verdict {
        match result {
            Ok(reply) if reply.status == 503 => Verdict::retryable(ErrorType::Status(503)),
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::permanent(ErrorType::OTHER),
        }
    }

    fn before_wait(&mut self, kept: Result<Reply, &'static str>) -> Result<Reply, &'static str> {
        self.released.set(self.released.get() + 1);
        kept.map(|reply| Reply { body: None, ..reply })
    }
}

#[tokio::test(start_paused = true)]
async fn the_result_kept_through_a_wait_is_released_first() {
    // The first 503 opens the breaker, for less than the 100 ms wait: the
    // retry is planned. The breaker's clock stands still, so after the wait
    // it is still open and the next attempt is refused: the caller gets the
    // reply kept through the wait. (A breaker open past the wait refuses the
    // retry at once, before any wait: nothing is kept then.)
    let breaker = retryscope::CircuitBreaker::builder()
        .min_calls(1)
        .cool_down(ms(50))
        .clock(retryscope::clock::ManualClock::new())
        .build()
        .expect("valid breaker");
    let dependency = Dependency::new("test").with_breaker(breaker.clone());
    let released = Cell::new(0);
    let calls = Cell::new(0);
    let reply = (|| {
        calls.set(calls.get() + 1);
        std::future::ready(Ok::<_, &'static str>(Reply { status: 503, body: Some("Service Unavailable") }))
    })
    .retry(plain())
    .with_classifier(ReleasingBodies { released: &released })
    .dependency(&dependency)
    .await
    .expect("a refused retry hands back the last reply");
    assert_eq!((reply.status, reply.body), (503, None));
    assert_eq!((calls.get(), released.get()), (1, 1));

    // Without a wait (retries exhausted at once), nothing is released: the
    // caller gets the reply as it came.
    let released = Cell::new(0);
    let once = Policy::builder().max_attempts(1).build().expect("valid policy");
    let reply = (|| std::future::ready(Ok::<_, &'static str>(Reply { status: 503, body: Some("busy") })))
        .retry(once)
        .with_classifier(ReleasingBodies { released: &released })
        .await
        .expect("the last reply");
    assert_eq!((reply.body, released.get()), (Some("busy"), 0));
}

/// An owned setup (shared budget, breaker and names) makes a `'static`, `Send`
/// retry that can be spawned, and it shares the guards with the caller.
#[tokio::test(start_paused = true)]
async fn an_owned_setup_is_static_and_shares_its_guards() {
    use retryscope::budget::Budget;
    use retryscope::{CircuitBreaker, TokenBucket};
    use std::sync::Arc;

    let bucket = TokenBucket::builder().max_tokens(10).build().expect("valid");
    let inventory = Arc::new(
        Dependency::new("inventory").with_budget(bucket.clone()).with_breaker(CircuitBreaker::default()),
    );
    let mut calls = 0;
    let op = move || {
        calls += 1;
        let result = if calls < 3 { Err("busy") } else { Ok(calls) };
        async move { result }
    };
    // The task owns the dependency; the retry borrows it.
    let retry = async move {
        op.retry(Policy::interactive())
            .retry_any_error()
            .dependency(&inventory)
            .operation(String::from("reserve"))
            .await
    };
    let answer = tokio::spawn(retry).await.expect("the task ran");
    assert_eq!(answer, Ok(3));
    // Two failures took two tokens, the success gave 0.1 back: the caller's
    // handle sees what the spawned retry did.
    assert!((bucket.available() - (8.1 - 5.0)).abs() < 1e-9, "{}", bucket.available());
}

/// Without an observer, a budget, a breaker or a deadline the first attempt runs
/// outside the engine's bookkeeping; when it fails the engine takes over. Each
/// result is still judged exactly once, an attempt that is not ready at once
/// is awaited, and the waits are the policy's.
#[tokio::test(start_paused = true)]
async fn a_quiet_first_attempt_that_fails_is_retried_like_any_other() {
    let calls = Cell::new(0);
    let judged = Cell::new(0);
    let started = Instant::now();
    let result = (|| {
        calls.set(calls.get() + 1);
        let n = calls.get();
        async move {
            // Not ready at its first poll: the first attempt must be awaited.
            tokio::time::sleep(ms(10)).await;
            if n < 3 { Err("busy") } else { Ok(n) }
        }
    })
    .retry(plain())
    .classify(|r: &Result<u32, &str>| {
        judged.set(judged.get() + 1);
        match r {
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::retryable(ErrorType::OTHER),
        }
    })
    .await;
    assert_eq!(result, Ok(3));
    assert_eq!(calls.get(), 3);
    assert_eq!(judged.get(), 3, "each result is classified once");
    // Three 10 ms attempts, waits of 100 and 200 ms.
    assert_eq!(started.elapsed(), ms(330));
}

/// gRFC A6: after a pushback, "for subsequent retries, the delay period will be
/// reset to the `initialBackoff` setting and scale according to the Exponential
/// Backoff section", until the next pushback.
#[tokio::test(start_paused = true)]
async fn the_backoff_restarts_at_the_base_after_a_grpc_pushback() {
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let policy = plain().to_builder().max_attempts(7).build().unwrap();
    let op = || {
        calls.set(calls.get() + 1);
        std::future::ready(if calls.get() <= 6 { Err(calls.get()) } else { Ok(()) })
    };
    // Failures 1 and 2 back off, 3 pushes back 50 ms, 4 and 5 back off again, 6 pushes back.
    let classify = |r: &Result<(), u32>| match r {
        Ok(()) => Verdict::Success,
        Err(3 | 6) => Verdict::Retryable { error: ErrorType::OTHER, hint: Some(Hint::grpc_pushback(ms(50))) },
        Err(_) => Verdict::retryable(ErrorType::OTHER),
    };
    let started = Instant::now();
    assert!(op.retry(policy).classify(classify).observe(rec.clone()).await.is_ok());
    let waits: Vec<_> = rec.waits().iter().map(|w| (w.delay, w.source)).collect();
    let (backoff, pushback) = (DelaySource::Policy, DelaySource::GrpcPushback);
    assert_eq!(
        waits,
        [
            (ms(100), backoff),
            (ms(200), backoff),
            (ms(50), pushback),
            (ms(100), backoff),
            (ms(200), backoff),
            (ms(50), pushback)
        ]
    );
    assert_eq!(started.elapsed(), ms(700));
}

/// A `Retry-After` hint is not a pushback: the curve goes on from where it was.
#[tokio::test(start_paused = true)]
async fn the_backoff_goes_on_after_a_retry_after_hint() {
    let calls = Cell::new(0);
    let rec = Recorder::default();
    let op = || {
        calls.set(calls.get() + 1);
        std::future::ready(if calls.get() <= 3 { Err(calls.get()) } else { Ok(()) })
    };
    let classify = |r: &Result<(), u32>| match r {
        Ok(()) => Verdict::Success,
        Err(1) => Verdict::Retryable { error: ErrorType::Status(503), hint: Some(Hint::retry_after(ms(10))) },
        Err(_) => Verdict::retryable(ErrorType::Status(503)),
    };
    assert!(op.retry(plain()).classify(classify).observe(rec.clone()).await.is_ok());
    let delays: Vec<_> = rec.waits().iter().map(|w| w.delay).collect();
    assert_eq!(delays, [ms(100), ms(200), ms(400)]);
}

/// What a throttle heard, in order.
#[derive(Default)]
struct HeardThrottle(std::sync::Mutex<Vec<&'static str>>);

impl HeardThrottle {
    fn heard(&self) -> Vec<&'static str> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn hear(&self, what: &'static str) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(what);
    }
}

impl retryscope::budget::Budget for HeardThrottle {
    fn request_started(&self) {
        self.hear("request");
    }

    fn attempt_finished(&self, success: bool) {
        self.hear(if success { "success" } else { "failure" });
    }

    fn try_acquire_retry(&self, _cause: retryscope::budget::RetryCause) -> bool {
        self.hear("retry?");
        true
    }

    fn available(&self) -> f64 {
        1.0
    }
}

/// The fast path (no observer, no breaker, no pacer) runs the first attempt
/// without the engine's driver; a budget must still hear exactly what it
/// hears on the full path: one request, then each attempt's end and each
/// retry asked for — whether the first attempt succeeds at once, fails at
/// once, or is not ready at once.
#[tokio::test(start_paused = true)]
async fn a_budget_hears_the_same_from_a_quiet_first_attempt() {
    // The first attempts' results, whether each attempt is slow, what the
    // budget must hear.
    type Case = (&'static [Result<(), &'static str>], bool, &'static [&'static str]);
    let cases: [Case; 4] = [
        (&[Ok(())], false, &["request", "success"]),
        (&[Ok(())], true, &["request", "success"]),
        (&[Err("busy"), Ok(())], false, &["request", "failure", "retry?", "success"]),
        (&[Err("busy"), Ok(())], true, &["request", "failure", "retry?", "success"]),
    ];
    for (results, slow, expected) in cases {
        let throttle = std::sync::Arc::new(HeardThrottle::default());
        let calls = Cell::new(0);
        let answer = (|| {
            let result = results[calls.get()];
            calls.set(calls.get() + 1);
            async move {
                if slow {
                    tokio::time::sleep(ms(10)).await;
                }
                result
            }
        })
        .retry(plain())
        .retry_any_error()
        .dependency(&Dependency::new("test").with_budget(std::sync::Arc::clone(&throttle)))
        .await;
        assert_eq!(answer, Ok(()), "{results:?}, slow: {slow}");
        assert_eq!(throttle.heard(), expected, "{results:?}, slow: {slow}");
    }
}

/// A first attempt cut by its time limit on the fast path counts the limit
/// from when it started, and a budget hears its failure.
#[tokio::test(start_paused = true)]
async fn a_quiet_first_attempt_that_hangs_is_cut_at_its_time_limit() {
    let policy = plain().to_builder().attempt_timeout(ms(50)).build().unwrap();
    let throttle = std::sync::Arc::new(HeardThrottle::default());
    let calls = Cell::new(0);
    let started = Instant::now();
    let answer = (|| {
        calls.set(calls.get() + 1);
        let n = calls.get();
        async move {
            if n == 1 {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Ok::<_, &str>(n)
        }
    })
    .retry(policy)
    .retry_any_error()
    .dependency(&Dependency::new("test").with_budget(std::sync::Arc::clone(&throttle)))
    .await;
    assert_eq!(answer, Ok(2));
    // 50 ms limit, 100 ms backoff, then the second attempt at once.
    assert_eq!(started.elapsed(), ms(150));
    assert_eq!(throttle.heard(), ["request", "failure", "retry?", "success"]);
}

thread_local! {
    /// Whether the code running now is inside an attempt's scope.
    static IN_SCOPE: Cell<bool> = const { Cell::new(false) };
}

/// A scope that marks its code as inside it; `polls_only` says whether it
/// covers only the polls of the attempt's future, not the call that builds it.
struct MarkingScope {
    polls_only: bool,
}

impl retryscope::observe::AttemptScope for MarkingScope {
    fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        let outer = IN_SCOPE.with(|s| s.replace(true));
        let result = f();
        IN_SCOPE.with(|s| s.set(outer));
        result
    }

    fn in_build_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        if self.polls_only { f() } else { self.in_scope(f) }
    }
}

struct Marking {
    polls_only: bool,
}

impl retryscope::observe::Observer for Marking {
    type Operation = Marking;

    fn start(&self, _: &retryscope::observe::OperationInfo<'_>) -> Marking {
        Marking { polls_only: self.polls_only }
    }
}

impl retryscope::observe::OperationObserver for Marking {
    type Attempt = MarkingScope;

    fn attempt_started(&mut self, _: &AttemptStart) -> MarkingScope {
        MarkingScope { polls_only: self.polls_only }
    }

    fn attempt_finished(&mut self, _: MarkingScope, _: &AttemptEnd) {}

    fn waiting(&mut self, _: &Wait) {}

    fn finished(self, _: &retryscope::observe::Finish) {}
}

/// Every poll of an attempt's future runs in its scope; the call that builds
/// the future does too, unless the scope says its contract covers only the
/// polls (`AttemptScope::in_build_scope`), for every attempt.
#[tokio::test(start_paused = true)]
async fn the_attempt_future_is_built_in_its_scope_unless_the_scope_opts_out() {
    for polls_only in [false, true] {
        let seen = std::cell::RefCell::new(Vec::new());
        let calls = Cell::new(0);
        let answer = (|| {
            seen.borrow_mut().push(("build", IN_SCOPE.with(Cell::get)));
            calls.set(calls.get() + 1);
            let n = calls.get();
            let seen = &seen;
            async move {
                seen.borrow_mut().push(("poll", IN_SCOPE.with(Cell::get)));
                if n < 2 { Err("busy") } else { Ok(n) }
            }
        })
        .retry(plain())
        .retry_any_error()
        .observe(Marking { polls_only })
        .await;
        assert_eq!(answer, Ok(2));
        let built = !polls_only;
        assert_eq!(*seen.borrow(), [("build", built), ("poll", true), ("build", built), ("poll", true)]);
        assert!(!IN_SCOPE.with(Cell::get), "the scope is left after each attempt");
    }
}

/// A borrowed `StopSlot` says why a call stopped, and stays empty when it succeeded.
#[tokio::test(start_paused = true)]
async fn a_stop_slot_stays_empty_on_success_and_names_a_permanent_error() {
    use retryscope::observe::StopSlot;

    let stop = StopSlot::default();
    let ok =
        (|| async { Ok::<_, &str>(1) }).retry(Policy::interactive()).retry_any_error().observe(&stop).await;
    assert_eq!(ok.ok(), Some(1));
    assert_eq!(stop.stopped(), None);
    let refused = (|| async { Err::<(), _>("no") })
        .retry(Policy::interactive())
        .when(|_: &&str| false)
        .observe(&stop)
        .await;
    assert!(refused.is_err());
    assert_eq!(stop.stopped(), Some((StopReason::Permanent, 1)));
}

/// Names shared through an `Arc` (a `'static` call's) are held while the call
/// runs and released with it, whether it ends on its first attempt or after
/// retries, observed or not: the fast path keeps only borrowed names, and a
/// call with shared ones starts with its driver instead.
#[tokio::test(start_paused = true)]
async fn shared_names_are_held_while_the_call_runs_and_released_with_it() {
    use std::future::IntoFuture;
    use std::sync::Arc;

    let dependency: Arc<str> = Arc::from("inventory");
    let operation: Arc<str> = Arc::from("stock");
    for failures in [0, 2] {
        let calls = Cell::new(0);
        let call = flaky(failures, &calls)
            .retry(plain())
            .retry_any_error()
            .dependency(Arc::clone(&dependency))
            .operation(Arc::clone(&operation))
            .into_future();
        assert_eq!((Arc::strong_count(&dependency), Arc::strong_count(&operation)), (2, 2));
        assert_eq!(call.await, Ok(failures + 1));
        assert_eq!((Arc::strong_count(&dependency), Arc::strong_count(&operation)), (1, 1));

        let rec = Recorder::default();
        let calls = Cell::new(0);
        let observed = flaky(failures, &calls)
            .retry(plain())
            .retry_any_error()
            .observe(rec.clone())
            .dependency(Arc::clone(&dependency))
            .operation(Arc::clone(&operation))
            .await;
        assert_eq!(observed, Ok(failures + 1));
        assert_eq!(
            rec.events()[0],
            Event::Start { dependency: "inventory".into(), operation: Some("stock".into()), max_attempts: 5 }
        );
        assert_eq!((Arc::strong_count(&dependency), Arc::strong_count(&operation)), (1, 1));
    }
}

/// A call the fast path starts (a silent observer, borrowed names) hands its
/// settings whole to the driver it builds once its first attempt fails: the
/// observer, told nothing of a success at once, hears that call's names and
/// priority. (An observer that says it is silent but records: a test's.)
#[tokio::test(start_paused = true)]
async fn a_call_the_fast_path_started_keeps_its_settings_once_it_fails() {
    use retryscope::observe::{NoObserver, Observer, OperationInfo};
    use retryscope::overload::Priority;
    use std::sync::Mutex;

    /// What `start` was told: the names, the attempt limit, whether hedged, the priority.
    type Info = (String, Option<String>, u32, bool, Priority);

    #[derive(Default)]
    struct Said(Mutex<Vec<Info>>);

    impl Observer for Said {
        type Operation = NoObserver;
        const SILENT: bool = true;

        fn start(&self, op: &OperationInfo<'_>) -> NoObserver {
            let info = (
                op.dependency.to_owned(),
                op.operation.map(str::to_owned),
                op.max_attempts,
                op.hedged,
                op.priority,
            );
            self.0.lock().expect("said lock").push(info);
            NoObserver
        }
    }

    let said = Said::default();
    for failures in [0, 1] {
        let calls = Cell::new(0);
        let answer = flaky(failures, &calls)
            .retry(plain())
            .retry_any_error()
            .observe(&said)
            .dependency("db")
            .operation("read")
            .priority(Priority::Sheddable)
            .await;
        assert_eq!(answer, Ok(failures + 1));
    }
    let said = said.0.into_inner().expect("said lock");
    assert_eq!(said, [("db".to_owned(), Some("read".to_owned()), 5, false, Priority::Sheddable)]);
}
