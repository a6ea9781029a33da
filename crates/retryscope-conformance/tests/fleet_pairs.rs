//! Fleet pacing (issue 38) through both integrations, on the real Redis
//! (`RETRYSCOPE_REDIS_URL`; skipped outside CI without it): two independent
//! clients in this process, each with its own `RedisPaceShare` naming the
//! same quota — two replicas as far as Redis can tell, though one process
//! (the multi-process tests are `retryscope-redis`'s `tests/fleet.rs`, and
//! the lab's fleet storm). A 429 one client is told holds the other's next
//! call to the same dependency, which it never heard from; two clients whose
//! budgets share their floor spend one floor between them.

use retryscope::{Policy, RetryBudget};
use retryscope_redis::RedisPaceShare;
use retryscope_test_support::{Reply, Server};
use retryscope_tower::RetryOptions;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

mod common;

use common::{Answer, BOTH, Call, Setup};
use retryscope_reqwest::prelude::*;

/// One attempt: the 429 is what the caller gets.
fn once() -> Policy {
    Policy::builder().max_attempts(1).deadline(Duration::from_secs(15)).build().expect("valid policy")
}

/// Two replicas of one fleet, as far as Redis can tell: two shares naming a
/// fresh quota, each with the deadline a loaded test machine needs.
fn two_replicas(redis: &str, prefix: &str) -> (Arc<RedisPaceShare>, Arc<RedisPaceShare>) {
    let quota = retryscope_conformance::services::fresh_name(prefix);
    let share = || {
        let client = redis::Client::open(redis).expect("a Redis URL");
        RedisPaceShare::builder(client, &quota).timeout(Duration::from_millis(50)).build().expect("a share")
    };
    (share(), share())
}

/// Waits (10 s at most) until both shares share, each counting the other.
async fn until_shared(a: &RedisPaceShare, b: &RedisPaceShare) {
    let waiting = Instant::now();
    while !(a.is_shared() && b.is_shared() && a.live_replicas() >= 2 && b.live_replicas() >= 2) {
        assert!(waiting.elapsed() < Duration::from_secs(10), "not shared: {a:?} {b:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_one_client_is_told_holds_the_next_call_of_another_client_of_the_fleet() {
    let Some(redis) = retryscope_conformance::services::redis_url() else { return };
    for integration in BOTH {
        let (share_a, share_b) = two_replicas(&redis, "conformance-fleet");
        let setup = |share: Arc<RedisPaceShare>| {
            Setup::new(Policy::builder().max_attempts(2).build().expect("valid policy")).pace_shared(share)
        };
        let a = integration.client(setup(Arc::clone(&share_a)));
        let b = integration.client(setup(Arc::clone(&share_b)));
        until_shared(&share_a, &share_b).await;
        let server = Server::start().await;
        // Each client's pacer of the server exists once it called it: a first
        // call each, answered 200, before anything is limited.
        assert_eq!(b.get(&server.url("/warm")).await, Answer::Status(200), "{integration:?}");
        assert_eq!(a.get(&server.url("/warm")).await, Answer::Status(200), "{integration:?}");

        server.script("/told", [Reply::with_header(429, "retry-after", "1")]);
        let told = Call::post(server.url("/told")).extension(RetryOptions::new().policy(once()));
        assert_eq!(a.answer(told).await, Answer::Status(429), "{integration:?}");
        let told_at = server.seen().last().expect("the 429's request").at;
        // B never saw the 429; the gate reaches it through Redis within
        // milliseconds, before its call below is sent.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(b.get(&server.url("/next")).await, Answer::Status(200), "{integration:?}");
        let sent = server.seen().iter().find(|s| s.path == "/next").expect("B's call").at;
        let held = sent - told_at;
        eprintln!("{integration:?}: B's call sent {held:?} after A's 429");
        assert!(held >= Duration::from_millis(900), "{integration:?}: B was not held: {held:?}");
        assert!(held < Duration::from_secs(3), "{integration:?}: held far past the gate: {held:?}");
    }
}

/// Two clients of a fleet call a dependency that answers every call 503:
/// their budgets (no ratio, a floor of 1 retry a second over 10 s) share the
/// floor through Redis, so the two make 10 retries between them, not 10 each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_of_the_fleet_spend_one_budget_floor_between_them() {
    let Some(redis) = retryscope_conformance::services::redis_url() else { return };
    // The same floor from the builder, or from a configuration file (whose
    // guards are made apart from the builder's, and shared all the same).
    let file = "[dependencies.down]\npath_prefix = \"/down\"\nattempts = 2\n\
                backoff = { initial = \"1ms\", max = \"1ms\" }\ndeadline = \"15s\"\n\
                budget = { ratio = 0.0, min_per_second = 1 }\n";
    for (integration, configured) in BOTH.into_iter().flat_map(|i| [(i, false), (i, true)]) {
        let (share_a, share_b) = two_replicas(&redis, "conformance-fleet-budget");
        let setup = |share: Arc<RedisPaceShare>| {
            let policy = Policy::builder()
                .max_attempts(2)
                .base_delay(Duration::from_millis(1))
                .deadline(Duration::from_secs(15))
                .build()
                .expect("valid policy");
            let setup = Setup::new(policy)
                .budget_per_dependency(|| {
                    RetryBudget::builder().ratio(0.0).min_per_second(1).build().expect("valid budget")
                })
                .no_breaker();
            let setup = if configured {
                let known = retryscope_config::KnownNames::new();
                let config = retryscope_config::Config::parse(
                    file,
                    retryscope_config::Format::Toml,
                    "fleet.toml",
                    &known,
                )
                .expect("a valid file");
                setup.config(
                    retryscope_config::ConfigHandle::builder(known).config(config).build().expect("a handle"),
                )
            } else {
                setup
            };
            setup.budget_shared(share)
        };
        let a = integration.client(setup(Arc::clone(&share_a)));
        let b = integration.client(setup(Arc::clone(&share_b)));
        until_shared(&share_a, &share_b).await;
        let server = Server::start().await;
        server.script("/down", (0..100).map(|_| Reply::status(503)));
        for client in [&a, &b] {
            for _ in 0..20 {
                assert_eq!(client.get(&server.url("/down")).await, Answer::Status(503), "{integration:?}");
            }
        }
        let seen = server.seen();
        let retries = seen.iter().filter(|s| s.headers.contains_key("retry-attempt")).count();
        let how = if configured { "from the file" } else { "from the builder" };
        assert_eq!(seen.len() - retries, 40, "{integration:?}, {how}: every call sent once");
        assert_eq!(retries, 10, "{integration:?}, {how}: one floor for the two clients, 5 retries each");
    }
}

/// A builder without a budget refuses a budget share, on both integrations:
/// there is no floor to divide, and the share would be ignored.
#[tokio::test]
async fn a_budget_share_is_refused_by_a_builder_without_a_budget() {
    let client = redis::Client::open("redis://127.0.0.1:1/").expect("a valid URL");
    let share = RedisPaceShare::builder(client, "conformance-no-budget").build().expect("a share");
    let refused = retryscope_reqwest::RetryMiddleware::builder(Policy::interactive())
        .no_budget()
        .budget_shared(share.clone())
        .err();
    assert_eq!(refused, Some(retryscope_reqwest::NoBudgetToShare));
    let refused = retryscope_tower::RetryLayer::builder(Policy::interactive())
        .no_budget()
        .budget_shared(share.clone())
        .err();
    assert_eq!(refused, Some(retryscope_tower::NoBudgetToShare));
    assert_eq!(
        refused.map(|e| e.to_string()).as_deref(),
        Some("budget_shared needs a retry budget per dependency, and this builder has none (no_budget)")
    );
    // With the default budget, the share is taken.
    assert!(retryscope_reqwest::RetryMiddleware::builder(Policy::interactive()).budget_shared(share).is_ok());
}
