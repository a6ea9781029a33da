//! The layer with the Redis store, against a real Redis (`RETRYSCOPE_REDIS_URL`)
//! and real axum servers on 127.0.0.1 — two of them where the claim is about
//! several instances sharing one store.

mod support;

use std::time::Duration;

use retryscope_idempotency::{IdempotencyLayer, RedisStore};
use retryscope_test_support::external;
use support::{app, send, send_and_lose_the_response, serve};

const QUICK: Duration = Duration::ZERO;

fn redis_url() -> Option<String> {
    external::required("RETRYSCOPE_REDIS_URL", "a Redis 7, e.g. redis://127.0.0.1:6399/")
}

/// A store whose keys no other test (or earlier run) shares.
async fn store(url: &str, test: &str) -> RedisStore {
    let client = redis::Client::open(url).expect("a Redis URL");
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_nanos();
    RedisStore::connect(client).await.expect("Redis answers").prefix(format!("test:{test}:{nanos}:"))
}

#[tokio::test]
async fn a_post_whose_response_is_lost_is_retried_and_runs_once_with_redis() {
    let Some(url) = redis_url() else { return };
    let (router, executions) = app(IdempotencyLayer::new(store(&url, "lost").await), QUICK);
    let addr = serve(router).await;
    send_and_lose_the_response(addr, "\"order-1\"", "sku=7").await;
    let retry = send(addr, "/orders", Some("\"order-1\""), "sku=7").await;
    assert_eq!((retry.status, retry.replayed()), (201, true), "{retry:?}");
    assert_eq!(retry.body, "order 1: sku=7");
    assert_eq!(retry.headers["location"], "/orders/1");
    assert_eq!(executions.count(), 1);
}

#[tokio::test]
async fn twenty_duplicates_spread_over_two_instances_run_once() {
    let Some(url) = redis_url() else { return };
    let shared = store(&url, "dup").await;
    let (first, runs_a) = app(IdempotencyLayer::new(shared.clone()), Duration::from_millis(200));
    let (second, runs_b) = app(IdempotencyLayer::new(shared), Duration::from_millis(200));
    let instances = [serve(first).await, serve(second).await];
    let calls = (0..20).map(|i| {
        let addr = instances[i % 2];
        tokio::spawn(async move { send(addr, "/orders", Some("\"dup\""), "one").await })
    });
    let mut executed = 0;
    for call in calls {
        let answer = call.await.expect("the caller finishes");
        match (answer.status, answer.replayed()) {
            (201, false) => executed += 1,
            (201, true) => assert_eq!(answer.body, "order 1: one"),
            (409, _) => assert!(answer.body.contains("#conflict"), "{}", answer.body),
            other => panic!("unexpected answer {other:?}: {answer:?}"),
        }
    }
    assert_eq!(executed, 1);
    assert_eq!(runs_a.count() + runs_b.count(), 1);
}

#[tokio::test]
async fn the_same_key_with_another_body_gets_422_with_redis() {
    let Some(url) = redis_url() else { return };
    let (router, executions) = app(IdempotencyLayer::new(store(&url, "mismatch").await), QUICK);
    let addr = serve(router).await;
    assert_eq!(send(addr, "/orders", Some("\"k\""), "sku=7").await.status, 201);
    assert_eq!(send(addr, "/orders", Some("\"k\""), "sku=8").await.status, 422);
    assert_eq!(executions.count(), 1);
}

#[tokio::test]
async fn redis_expires_an_entry_after_its_real_ttl() {
    let Some(url) = redis_url() else { return };
    let layer = IdempotencyLayer::new(store(&url, "ttl").await).ttl(Duration::from_millis(300));
    let (router, executions) = app(layer, QUICK);
    let addr = serve(router).await;
    assert_eq!(send(addr, "/orders", Some("\"t\""), "").await.status, 201);
    assert!(send(addr, "/orders", Some("\"t\""), "").await.replayed(), "kept within the ttl");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later = send(addr, "/orders", Some("\"t\""), "").await;
    assert_eq!((later.status, later.replayed()), (201, false), "expired: runs again");
    assert_eq!(executions.count(), 2);
}

#[tokio::test]
async fn a_5xx_releases_the_key_in_redis() {
    let Some(url) = redis_url() else { return };
    let (router, executions) = app(IdempotencyLayer::new(store(&url, "5xx").await), QUICK);
    let addr = serve(router).await;
    assert_eq!(send(addr, "/fail/500", Some("\"f\""), "").await.status, 500);
    assert_eq!(send(addr, "/fail/500", Some("\"f\""), "").await.status, 500);
    assert_eq!(executions.count(), 2);
}

#[tokio::test]
async fn an_unreachable_redis_gets_503_and_nothing_runs() {
    let port = retryscope_test_support::net::closed_port().await;
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("a Redis URL");
    let layer = IdempotencyLayer::new(RedisStore::new(client).expect("a lazy store"));
    let (router, executions) = app(layer, QUICK);
    let addr = serve(router).await;
    let started = std::time::Instant::now();
    let answer = send(addr, "/orders", Some("\"down\""), "").await;
    assert_eq!(answer.status, 503);
    assert!(answer.body.contains("#store-unavailable"), "{}", answer.body);
    assert_eq!(answer.headers["retry-after"], "1");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the store timeout: {:?}",
        started.elapsed()
    );
    assert_eq!(executions.count(), 0);
}

/// A `redis-server` of this test's own (the one CI installs), on a free port,
/// killed when dropped: the test moves its memory limit, which would refuse
/// every other test's writes on a shared one.
struct OwnRedis {
    child: std::process::Child,
    url: String,
}

impl OwnRedis {
    async fn start() -> Self {
        let port = retryscope_test_support::net::closed_port().await;
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--maxmemory-policy", "noeviction"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server on PATH (.ci/run installs Debian's)");
        let redis = Self { child, url: format!("redis://127.0.0.1:{port}/") };
        let client = redis::Client::open(redis.url.as_str()).expect("a Redis URL");
        for _ in 0..100 {
            if let Ok(mut connection) = client.get_multiplexed_async_connection().await
                && redis::cmd("PING").query_async::<String>(&mut connection).await.is_ok()
            {
                return redis;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("redis-server did not answer on port {port} within 5 s");
    }

    /// `CONFIG SET maxmemory`: 1 byte is a Redis that is full (with
    /// `noeviction`, every write is refused with OOM); 0 is no limit.
    async fn set_maxmemory(&self, bytes: u64) {
        let client = redis::Client::open(self.url.as_str()).expect("a Redis URL");
        let mut connection = client.get_multiplexed_async_connection().await.expect("Redis answers");
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(bytes)
            .query_async::<()>(&mut connection)
            .await
            .expect("CONFIG SET maxmemory");
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_full_redis_gets_503_and_nothing_runs_then_the_retry_runs_once() {
    // Where Redis is provided, so is `redis-server`; this test starts its own.
    if redis_url().is_none() {
        return;
    }
    let redis = OwnRedis::start().await;
    let client = redis::Client::open(redis.url.as_str()).expect("a Redis URL");
    let layer = IdempotencyLayer::new(RedisStore::connect(client).await.expect("Redis answers"));
    let (router, executions) = app(layer, QUICK);
    let addr = serve(router).await;

    redis.set_maxmemory(1).await;
    let refused = send(addr, "/orders", Some("\"full\""), "sku=7").await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert!(refused.body.contains("#store-unavailable"), "{}", refused.body);
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(executions.count(), 0, "nothing runs that the store could not record");

    redis.set_maxmemory(0).await;
    let retry = send(addr, "/orders", Some("\"full\""), "sku=7").await;
    assert_eq!((retry.status, retry.replayed()), (201, false), "{retry:?}");
    let again = send(addr, "/orders", Some("\"full\""), "sku=7").await;
    assert_eq!((again.status, again.replayed()), (201, true), "{again:?}");
    assert_eq!(executions.count(), 1);
}

#[tokio::test]
async fn a_renewed_claim_outlives_its_lease_in_redis_and_one_that_ran_out_is_taken_over_with_its_age() {
    use retryscope_idempotency::store::{Claim, EntryState};
    use retryscope_idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore};
    let Some(url) = redis_url() else { return };
    let store = store(&url, "renew").await;
    let key = IdempotencyKey::parse(br#""job-1""#).expect("a key");
    let print = Fingerprint::of(&http::Method::POST, "jobs", b"pay");
    let lease = Duration::from_millis(300);
    let Ok(Claim::Claimed(first)) = store.claim(&key, print, lease).await else { panic!("a free key") };
    assert_eq!(first.took_over(), None, "a first claim takes nothing over");
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(store.renew(&first, lease).await.expect("Redis answers"));
    }
    let Ok(Claim::Held(entry)) = store.claim(&key, print, lease).await else { panic!("renewed, still held") };
    assert_eq!(entry.state, EntryState::InFlight);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let Ok(Claim::Claimed(second)) = store.claim(&key, print, lease).await else { panic!("taken over") };
    let age = second.took_over().expect("the dead claim is told");
    assert!(
        age >= Duration::from_millis(850) && age < Duration::from_secs(3),
        "the dead claim's age: {age:?}"
    );
    assert!(!store.renew(&first, lease).await.expect("Redis answers"), "the dead claim cannot be renewed");
    store.release(&second).await.expect("Redis answers");
    let Ok(Claim::Claimed(third)) = store.claim(&key, print, lease).await else { panic!("a free key") };
    assert_eq!(third.took_over(), None, "a released claim was not taken over");
}

#[tokio::test]
async fn a_mark_in_redis_only_rises_is_atomic_across_raisers_and_expires_with_its_ttl() {
    use retryscope_idempotency::store::Claim;
    use retryscope_idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore};
    let Some(url) = redis_url() else { return };
    let store = store(&url, "mark").await;
    let key = IdempotencyKey::parse(br#""job-1""#).expect("a key");
    let ttl = Duration::from_secs(60);
    assert_eq!(store.raise_mark(&key, 1, ttl).await.expect("Redis answers"), None);
    assert_eq!(store.raise_mark(&key, 3, ttl).await.expect("Redis answers"), Some(1));
    assert_eq!(
        store.raise_mark(&key, 2, ttl).await.expect("Redis answers"),
        Some(3),
        "a lower mark leaves it"
    );
    // Past 2^53, where Lua's numbers would round: kept exactly.
    let big = (7u64 << 32) | 2;
    assert_eq!(store.raise_mark(&key, big, ttl).await.expect("Redis answers"), Some(3));
    assert_eq!(store.raise_mark(&key, big - 1, ttl).await.expect("Redis answers"), Some(big));
    assert_eq!(store.raise_mark(&key, u64::MAX, ttl).await.expect("Redis answers"), Some(big));
    // A claim released beside it leaves the mark.
    let print = Fingerprint::of(&http::Method::POST, "jobs", b"pay");
    let Ok(Claim::Claimed(ticket)) = store.claim(&key, print, ttl).await else { panic!("a free key") };
    store.release(&ticket).await.expect("Redis answers");
    assert_eq!(store.raise_mark(&key, 1, ttl).await.expect("Redis answers"), Some(u64::MAX));
    // Concurrent raisers of 1..=20: each sees a mark below its own or the
    // highest; exactly one saw none, and the mark ends at 20.
    let fresh = IdempotencyKey::parse(br#""job-2""#).expect("a key");
    let raises = (1..=20u64).map(|n| {
        let (store, fresh) = (store.clone(), fresh.clone());
        tokio::spawn(async move { store.raise_mark(&fresh, n, ttl).await.expect("Redis answers") })
    });
    let mut seen = Vec::new();
    for raise in raises {
        seen.push(raise.await.expect("no panic"));
    }
    assert_eq!(seen.iter().filter(|s| s.is_none()).count(), 1, "{seen:?}");
    assert_eq!(store.raise_mark(&fresh, 0, ttl).await.expect("Redis answers"), Some(20));
    // Expires with its ttl.
    let short = IdempotencyKey::parse(br#""job-3""#).expect("a key");
    store.raise_mark(&short, 5, Duration::from_millis(200)).await.expect("Redis answers");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(store.raise_mark(&short, 1, ttl).await.expect("Redis answers"), None, "expired");
}
