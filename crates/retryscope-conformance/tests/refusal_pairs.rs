//! Where the guards that refuse a call meet each other and the time limits,
//! for both integrations on real loopback servers: a keyed POST and an open
//! breaker (behind the real `IdempotencyLayer`), the budget and the breaker
//! refusing the same call, and the caller's timeout against the attempt
//! timeout. Wall clock: the breaker's cool-down and the cut attempts are real
//! time, kept short.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use retryscope::budget::RetryQuota;
use retryscope::{CircuitBreaker, ErrorType, Policy, RetryBudget, StopReason};
use retryscope_idempotency::{IdempotencyLayer, MemoryStore};
use retryscope_test_support::telemetry::Telemetry;
use retryscope_test_support::{Reply, Server};
use retryscope_tower::RetryOptions;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod common;

use common::{Answer, BOTH, Call, Integration, Setup};

const COOL_DOWN: Duration = Duration::from_millis(300);

/// Opens on the second failure of two calls, for `COOL_DOWN`.
fn quick_breaker() -> CircuitBreaker {
    CircuitBreaker::builder()
        .min_calls(2)
        .failure_ratio(0.5)
        .cool_down(COOL_DOWN)
        .build()
        .expect("valid breaker")
}

/// A server with `GET /down` (always 503: what trips the breaker) and
/// `POST /orders` behind `IdempotencyLayer` with the in-memory store,
/// answering 201 and counting its runs; and every request reaching the
/// server, counted before the layer sees it.
async fn orders() -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (runs, received) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let counted = Arc::clone(&runs);
    let keyed = Router::new()
        .route(
            "/orders",
            post(move || {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                async move { (StatusCode::CREATED, format!("order {n}")) }
            }),
        )
        .layer(IdempotencyLayer::new(MemoryStore::default()));
    let seen = Arc::clone(&received);
    let router = keyed.route("/down", get(|| async { StatusCode::SERVICE_UNAVAILABLE })).layer(
        axum::middleware::from_fn(move |request: axum::extract::Request, next: axum::middleware::Next| {
            seen.fetch_add(1, Ordering::SeqCst);
            next.run(request)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, router).await.expect("the server runs") });
    (addr, runs, received)
}

/// A keyed POST that meets an open breaker is refused before anything is
/// sent: the server never hears of the key, so it is not burned. After the
/// cool-down the same call (same key) runs once and gets its 201; sent again,
/// it is replayed, never run twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_post_refused_by_an_open_breaker_sends_nothing_and_runs_once_after_the_cool_down() {
    for integration in BOTH {
        let (addr, runs, received) = orders().await;
        let policy = Policy::builder().max_attempts(1).build().expect("valid policy");
        let client = integration.client(Setup::new(policy).breaker_per_dependency(quick_breaker));
        let down = format!("http://{addr}/down");
        assert_eq!(client.get(&down).await, Answer::Status(503), "{integration:?}");
        assert_eq!(client.get(&down).await, Answer::Status(503), "{integration:?}");
        let before = received.load(Ordering::SeqCst);

        let order = || {
            Call::post(format!("http://{addr}/orders"))
                .header("idempotency-key", r#""order-9""#)
                .body("sku=7")
        };
        let refused = client.answer(order()).await;
        assert!(
            matches!(refused, Answer::GaveUp(StopReason::CircuitOpen, _)),
            "{integration:?}: {refused:?}"
        );
        assert_eq!(
            received.load(Ordering::SeqCst),
            before,
            "{integration:?}: the refused POST reached the server"
        );

        tokio::time::sleep(COOL_DOWN + Duration::from_millis(50)).await;
        let first = client.send(order()).await.expect("the probe's answer");
        assert_eq!(first.status, 201, "{integration:?}");
        assert!(!first.headers.contains_key("idempotency-replayed"), "{integration:?}: a replay of nothing");
        assert_eq!(first.text().await, "order 1", "{integration:?}");
        let again = client.send(order()).await.expect("the replay");
        assert_eq!(again.status, 201, "{integration:?}");
        assert_eq!(again.headers.get("idempotency-replayed").map(|v| v.as_bytes()), Some(&b"true"[..]));
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{integration:?}: executed once");
    }
}

/// A budget with nothing to spend on retries (no share, no reserve).
fn empty_budget() -> RetryBudget {
    RetryBudget::builder().ratio(0.0).min_per_second(0).build().expect("valid budget")
}

/// A budget that never runs out here.
fn ample_budget() -> RetryBudget {
    RetryBudget::builder().ratio(1.0).min_per_second(100).build().expect("valid budget")
}

/// Opens on the first failure, for 10 s.
fn hair_trigger() -> CircuitBreaker {
    CircuitBreaker::builder()
        .min_calls(1)
        .failure_ratio(0.5)
        .cool_down(Duration::from_secs(10))
        .build()
        .expect("valid breaker")
}

/// Four attempts a call, a 200 ms backoff: long enough to see whether a
/// refused retry waited for it.
fn patient() -> Policy {
    Policy::builder()
        .max_attempts(4)
        .base_delay(Duration::from_millis(200))
        .jitter(retryscope::Jitter::None)
        .deadline(Duration::from_secs(5))
        .build()
        .expect("valid policy")
}

/// A breaker that a single failure does not open.
fn steady_breaker() -> CircuitBreaker {
    CircuitBreaker::builder().min_calls(100).build().expect("valid breaker")
}

/// The budget and the breaker on one call. A retry is refused when it is
/// planned, at the failure, never after a backoff it could not use: by a
/// breaker that is open past the backoff (`CircuitOpen`, which answers first
/// when both would refuse: the dependency is down, whatever the budget
/// holds), else by an empty budget (`BudgetExhausted`). Before, a retry the
/// breaker refused waited its whole backoff first (207 ms here). Either way
/// one attempt was sent, so `retryscope.refused` (calls that sent nothing)
/// stays 0 and `retryscope.throttled` names the guard. The next call, sending
/// nothing, is the breaker's refusal in `retryscope.refused`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_and_the_breaker_on_one_call_refuse_at_the_failure_and_say_which() {
    type Guards = (fn() -> RetryBudget, fn() -> CircuitBreaker, StopReason);
    let cases: [Guards; 3] = [
        (empty_budget, steady_breaker, StopReason::BudgetExhausted),
        (empty_budget, hair_trigger, StopReason::CircuitOpen),
        (ample_budget, hair_trigger, StopReason::CircuitOpen),
    ];
    for integration in BOTH {
        for (budget, breaker, reason) in cases {
            let t = Telemetry::install();
            let server = Server::start().await;
            server.script("/down", vec![Reply::status(503); 10]);
            let setup =
                Setup::new(patient()).budget_per_dependency(budget).breaker_per_dependency(breaker).meter(&t);
            let client = integration.client(setup);
            let url = server.url("/down");

            let start = Instant::now();
            let answer = client.get(&url).await;
            let took = start.elapsed();
            eprintln!("{integration:?} {reason:?}: {answer:?} after {took:?}");
            // A retryable response whose retry was refused: the caller gets it.
            assert_eq!(answer, Answer::Status(503), "{integration:?}");
            assert_eq!(server.seen().len(), 1, "{integration:?}");
            assert!(
                took < Duration::from_millis(150),
                "{integration:?} {reason:?}: waited {took:?} for nothing"
            );
            let label = if reason == StopReason::BudgetExhausted { "budget" } else { "circuit_open" };
            let throttled = t.counter("retryscope.throttled", &[("retryscope.throttle.reason", label)]);
            assert_eq!(throttled, 1, "{integration:?} {reason:?}");
            assert_eq!(t.counter("retryscope.refused", &[]), 0, "{integration:?}: one attempt was sent");
            let calls =
                t.histogram_count("retryscope.request.duration", &[("retryscope.outcome", "throttled")]);
            assert_eq!(calls, 1, "{integration:?} {reason:?}");

            if reason == StopReason::CircuitOpen {
                let next = client.get(&url).await;
                assert!(
                    matches!(next, Answer::GaveUp(StopReason::CircuitOpen, _)),
                    "{integration:?}: {next:?}"
                );
                assert_eq!(server.seen().len(), 1, "{integration:?}");
                let refused = t.counter(
                    "retryscope.refused",
                    &[("retryscope.outcome", "throttled"), ("retryscope.throttle.reason", "circuit_open")],
                );
                assert_eq!(refused, 1, "{integration:?}");
            }
        }
    }
}

/// The AWS SDKs' 2026 retry quota as each dependency's budget, given
/// through the integrations' `budget_per_dependency` (which takes any
/// `Budget`): each retry pays the price of its cause, 14 tokens after a 503
/// and 5 after a 429, and a retry the quota cannot pay for is not sent — the
/// caller gets the last answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aws_retry_quota_per_dependency_prices_each_retry_by_its_cause() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/busy", vec![Reply::status(503); 5]);
        server.script("/limited", vec![Reply::status(429); 5]);
        // 20 tokens: a 503's retry leaves 6, too few for a second (14) but
        // enough for a 429's (5), after which 1 is left.
        let quota = || RetryQuota::builder().capacity(20).build().expect("a valid quota");
        let setup = Setup::new(common::code_policy()).budget_per_dependency(quota).no_breaker().no_pacer();
        let client = integration.client(setup);

        for (path, status) in [("/busy", 503), ("/limited", 429)] {
            let answer = client.get(&server.url(path)).await;
            assert_eq!(answer, Answer::Status(status), "{integration:?} {path}: the last answer");
        }
        let seen = server.seen();
        let sent = |path: &str| seen.iter().filter(|s| s.path == path).count();
        // Five attempts allowed each; the quota paid for one retry of each.
        assert_eq!((sent("/busy"), sent("/limited")), (2, 2), "{integration:?}");
    }
}

/// The caller's timeout and the attempt timeout on one call: the shorter
/// wins, and the stop says which. A caller's 400 ms under a 2 s attempt
/// timeout ends the call at 400 ms as `DeadlineExceeded`, and the attempt's
/// connection is closed then, not at 2 s. A 200 ms attempt timeout under a
/// caller's 2 s cuts each attempt at 200 ms and ends as `AttemptsExhausted`
/// on `timeout`, well inside the caller's limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shorter_of_the_callers_timeout_and_the_attempt_timeout_wins_and_the_stop_says_which() {
    let policy = |attempt_timeout| {
        Policy::builder()
            .max_attempts(2)
            .base_delay(Duration::from_millis(10))
            .attempt_timeout(attempt_timeout)
            .deadline(Duration::from_secs(15))
            .build()
            .expect("valid policy")
    };
    // The caller's own limit: reqwest's `.timeout()`; a tower caller's
    // deadline in `RetryOptions`.
    let limited = |integration, call: Call, policy: Policy, limit| match integration {
        Integration::Reqwest => call.timeout(limit),
        Integration::Tower => call.extension(RetryOptions::new().policy(policy.with_deadline_within(limit))),
    };
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/stall", [Reply::StallUntilClosed, Reply::StallUntilClosed, Reply::StallUntilClosed]);
        let url = server.url("/stall");

        let long_attempts = policy(Duration::from_secs(2));
        let client = integration.client(Setup::new(long_attempts));
        let call = limited(integration, Call::get(&url), long_attempts, Duration::from_millis(400));
        let start = Instant::now();
        let answer = client.answer(call).await;
        let took = start.elapsed();
        let closed_after = wait_closed(&server, 1).await.map(|_| start.elapsed());
        eprintln!(
            "{integration:?}: caller 400 ms, attempt 2 s: {answer:?} after {took:?}, closed {closed_after:?}"
        );
        assert!(
            matches!(answer, Answer::GaveUp(StopReason::DeadlineExceeded, _)),
            "{integration:?}: {answer:?}"
        );
        assert!(
            took >= Duration::from_millis(390) && took < Duration::from_millis(700),
            "{integration:?}: {took:?}"
        );
        assert!(
            closed_after.is_some_and(|c| c < Duration::from_millis(900)),
            "{integration:?}: {closed_after:?}"
        );
        assert_eq!(server.seen().len(), 1, "{integration:?}");

        let short_attempts = policy(Duration::from_millis(200));
        let client = integration.client(Setup::new(short_attempts));
        let call = limited(integration, Call::get(&url), short_attempts, Duration::from_secs(2));
        let start = Instant::now();
        let answer = client.answer(call).await;
        let took = start.elapsed();
        eprintln!("{integration:?}: caller 2 s, attempt 200 ms: {answer:?} after {took:?}");
        assert_eq!(
            answer,
            Answer::GaveUp(StopReason::AttemptsExhausted, Some(ErrorType::TIMEOUT)),
            "{integration:?}"
        );
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_millis(900),
            "{integration:?}: {took:?}"
        );
        assert_eq!(server.seen().len(), 3, "{integration:?}");
    }
}

/// Waits (up to 2 s) until the server saw `n` stalled connections closed.
async fn wait_closed(server: &Server, n: usize) -> Option<()> {
    let until = Instant::now() + Duration::from_secs(2);
    while server.closed().len() < n {
        if Instant::now() > until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Some(())
}
