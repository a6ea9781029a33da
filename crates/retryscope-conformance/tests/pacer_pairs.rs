//! The pacer where it meets the attempt timeout, the caller's timeout and
//! idempotency keys, for both integrations against a real loopback server.
//! The attempt-timeout pair runs on the wall clock (a stalled attempt cut by
//! its timeout while real sockets wait is a claim about real time); the others
//! on tokio's paused clock.

use retryscope::{Pacer, Policy, StopReason};
use retryscope_test_support::telemetry::Telemetry;
use retryscope_test_support::{Reply, Server};
use retryscope_tower::RetryOptions;
use std::time::Duration;
use tokio::time::Instant;

mod common;

use common::{Answer, BOTH, Call, Client, Integration, Setup};

/// One attempt: what the server answers is what the caller gets.
fn once() -> Policy {
    Policy::builder().max_attempts(1).deadline(Duration::from_secs(15)).build().expect("valid policy")
}

/// The dependency tells `client` to slow down: a POST sent once is answered
/// 503 with `Retry-After: 1`, which holds every call to it for 1 s (and up to
/// a fifth more, the spread). Returns when the server saw it.
async fn told_to_wait(client: &Client, server: &Server) -> Instant {
    server.script("/told", [Reply::with_header(503, "retry-after", "1")]);
    let told = Call::post(server.url("/told")).extension(RetryOptions::new().policy(once()));
    assert_eq!(client.answer(told).await, Answer::Status(503));
    server.seen().last().expect("the 503's request").at
}

/// A call held by the pacer gets its whole attempt timeout once it is sent:
/// the hold is a wait before the attempt, not part of it. It counts against
/// the call's deadline instead: the attempt after a hold is cut to what the
/// hold left of the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_held_by_the_pacer_gets_its_whole_attempt_timeout_and_the_hold_counts_against_its_deadline() {
    for integration in BOTH {
        let server = Server::start().await;
        let policy = |deadline| {
            Policy::builder()
                .max_attempts(3)
                .base_delay(Duration::from_millis(10))
                .max_delay(Duration::from_millis(10))
                .attempt_timeout(Duration::from_millis(300))
                .deadline(deadline)
                .build()
                .expect("valid policy")
        };
        let client =
            integration.client(Setup::new(policy(Duration::from_secs(5))).pacer_per_dependency(Pacer::new));
        let told_at = told_to_wait(&client, &server).await;

        // Held ~1 s, sent, stalled: cut 300 ms after it was sent, retried.
        server.script("/slow", [Reply::Stall, Reply::ok("second").into()]);
        let start = Instant::now();
        assert_eq!(client.get(&server.url("/slow")).await, Answer::Status(200), "{integration:?}");
        let took = start.elapsed();
        let sends: Vec<Instant> = server.seen().iter().filter(|s| s.path == "/slow").map(|s| s.at).collect();
        assert_eq!(sends.len(), 2, "{integration:?}");
        let held = sends[0] - told_at;
        let first_attempt = sends[1] - sends[0];
        eprintln!("{integration:?}: held {held:?}, first attempt ran {first_attempt:?}, call {took:?}");
        assert!(held >= Duration::from_millis(950), "{integration:?}: sent during the hold: {held:?}");
        // Seen by the server: the gap between the two arrivals is the 300 ms
        // timeout plus the 10 ms backoff, less however late the first arrival
        // was seen on a loaded machine (299.4 ms measured under a parallel
        // build). An attempt cut by the hold it waited out would have run next
        // to nothing.
        assert!(
            first_attempt >= Duration::from_millis(250) && first_attempt < Duration::from_millis(800),
            "{integration:?}: the stalled attempt ran {first_attempt:?}, not its 300 ms"
        );

        // A deadline of 2.5 s and an attempt timeout of 2 s: the hold (1 to
        // 1.2 s) leaves the call more than the 1 s the pacer keeps for a send
        // (`Pacer`'s limits), so it is held, not refused; its stalled attempt
        // is then cut at the deadline, short of its own 2 s, and the call
        // stops there.
        let patient = Policy::builder()
            .max_attempts(3)
            .attempt_timeout(Duration::from_secs(2))
            .deadline(Duration::from_millis(2_500))
            .build()
            .expect("valid policy");
        let client = integration.client(Setup::new(patient).pacer_per_dependency(Pacer::new));
        let told_at = told_to_wait(&client, &server).await;
        server.script("/stalled", [Reply::Stall]);
        let start = Instant::now();
        let answer = client.get(&server.url("/stalled")).await;
        let took = start.elapsed();
        let sent = server.seen().iter().filter(|s| s.path == "/stalled").map(|s| s.at).collect::<Vec<_>>();
        assert_eq!(sent.len(), 1, "{integration:?}");
        let cut_after = start + took - sent[0];
        eprintln!(
            "{integration:?}: deadline 2.5 s, held {:?}, attempt cut after {cut_after:?}: {answer:?} after {took:?}",
            sent[0] - told_at
        );
        assert!(
            matches!(answer, Answer::GaveUp(StopReason::DeadlineExceeded, _)),
            "{integration:?}: {answer:?}"
        );
        assert!(
            took >= Duration::from_millis(2_450) && took < Duration::from_millis(2_900),
            "{integration:?}: {took:?}"
        );
        assert!(
            cut_after < Duration::from_millis(1_600),
            "{integration:?}: the attempt outlived the deadline"
        );
    }
}

/// A caller's timeout shorter than the pacer's hold: the call is refused at
/// once with `RateLimited` (the hold and what was left both named), nothing
/// is sent, and `retryscope.refused` counts it as throttled by the pacer.
/// reqwest's caller sets `.timeout()`; a tower caller gives the call its
/// deadline with `RetryOptions::policy`.
#[tokio::test(start_paused = true)]
async fn a_caller_timeout_shorter_than_the_hold_is_refused_at_once_and_sends_nothing() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        let client =
            integration.client(Setup::new(Policy::interactive()).pacer_per_dependency(Pacer::new).meter(&t));
        told_to_wait(&client, &server).await;
        let sent = server.seen().len();

        let call = Call::get(server.url("/api"));
        let call = match integration {
            Integration::Reqwest => call.timeout(Duration::from_millis(500)),
            Integration::Tower => call.extension(
                RetryOptions::new()
                    .policy(Policy::interactive().with_deadline_within(Duration::from_millis(500))),
            ),
        };
        let start = Instant::now();
        let answer = client.answer(call).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "{integration:?}: not at once");
        let Answer::GaveUp(StopReason::RateLimited { wait, limit, .. }, _) = answer else {
            panic!("{integration:?}: {answer:?}")
        };
        eprintln!("{integration:?}: refused, hold {wait:?} against {limit:?} left");
        assert_eq!(limit, Duration::from_millis(500), "{integration:?}");
        assert!(wait > limit, "{integration:?}: {wait:?}");
        assert_eq!(server.seen().len(), sent, "{integration:?}: the refused call was sent");
        let refused = t.counter(
            "retryscope.refused",
            &[("retryscope.outcome", "throttled"), ("retryscope.throttle.reason", "rate_limited")],
        );
        assert_eq!(refused, 1, "{integration:?}");
    }
}

/// A keyed POST held by the pacer, then sent and retried: one key for the
/// whole call, the same on every send, whether the client generated it or
/// the caller gave it; and no send inside the hold.
#[tokio::test(start_paused = true)]
async fn a_keyed_post_held_then_retried_keeps_one_key() {
    for integration in BOTH {
        for own_key in [None, Some("order-7")] {
            let server = Server::start().await;
            let policy = Policy::builder()
                .max_attempts(3)
                .base_delay(Duration::from_millis(10))
                .deadline(Duration::from_secs(15))
                .build()
                .expect("valid policy");
            let setup = Setup::new(policy).pacer_per_dependency(Pacer::new).idempotency_keys();
            let client = integration.client(setup);
            let told_at = told_to_wait(&client, &server).await;

            server.script("/orders", [Reply::status(503), Reply::status(201)]);
            let call = Call::post(server.url("/orders")).body("{}");
            let call = match own_key {
                Some(key) => call.header("idempotency-key", key),
                None => call,
            };
            assert_eq!(client.answer(call).await, Answer::Status(201), "{integration:?}");
            let sends: Vec<_> = server.seen().into_iter().filter(|s| s.path == "/orders").collect();
            assert_eq!(sends.len(), 2, "{integration:?}");
            assert!(sends[0].at - told_at >= Duration::from_secs(1), "{integration:?}: sent during the hold");
            let keys: Vec<Option<&String>> = sends.iter().map(|s| s.headers.get("idempotency-key")).collect();
            assert!(keys[0].is_some(), "{integration:?}: no key: {keys:?}");
            assert_eq!(keys[0], keys[1], "{integration:?}: the key changed across the hold and the retry");
            if let Some(key) = own_key {
                assert_eq!(keys[0].map(String::as_str), Some(key), "{integration:?}");
            }
        }
    }
}

/// A hedge's copy teaches the pacer as an attempt does (the engine hands
/// the dependency's pacer what every answer says, copies' included): the
/// first copy is slow, the second is answered `429` with `Retry-After: 1`;
/// the first copy's 200 wins the call, and the next call to the dependency
/// is held until the gate the losing copy learned opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedge_copys_retry_after_holds_the_next_call() {
    use retryscope::hedge::{HedgeDelay, HedgePolicy};
    for integration in BOTH {
        let server = Server::start().await;
        let slow = Reply::ok("first").after(Duration::from_millis(400));
        server.script("/item", [slow, Reply::with_header(429, "retry-after", "1").into()]);
        let hedge = HedgePolicy::builder()
            .max_copies(2)
            .delay(HedgeDelay::Fixed(Duration::from_millis(50)))
            .build()
            .expect("valid hedging policy");
        let setup = Setup::new(Policy::interactive()).hedge(hedge).pacer_per_dependency(Pacer::new);
        let client = integration.client(setup);
        assert_eq!(client.get(&server.url("/item")).await, Answer::Status(200), "{integration:?}");
        let copies: Vec<Instant> = server.seen().iter().filter(|s| s.path == "/item").map(|s| s.at).collect();
        assert_eq!(copies.len(), 2, "{integration:?}: the second copy was sent");

        server.script("/next", [Reply::ok("next")]);
        assert_eq!(client.get(&server.url("/next")).await, Answer::Status(200), "{integration:?}");
        let next = server.seen().iter().find(|s| s.path == "/next").expect("the next call was sent").at;
        let held = next - copies[1];
        eprintln!("{integration:?}: the next call was sent {held:?} after the copy told to wait");
        assert!(held >= Duration::from_millis(950), "{integration:?}: not held by the copy's gate: {held:?}");
    }
}
