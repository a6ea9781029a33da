//! The layer with the in-memory store, specified against a real axum server on
//! 127.0.0.1 (and the store's expiry arithmetic on tokio's paused clock).

mod support;

use std::time::Duration;

use retryscope_idempotency::store::{Claim, Completion, EntryState};
use retryscope_idempotency::{Fingerprint, IdempotencyKey, IdempotencyLayer, IdempotencyStore, MemoryStore};
use support::{app, send, send_and_hang_up, send_and_lose_the_response, send_with, serve};

const QUICK: Duration = Duration::ZERO;

#[tokio::test]
async fn a_post_whose_response_is_lost_is_retried_with_its_key_and_runs_once() {
    let (router, executions) = app(IdempotencyLayer::new(MemoryStore::default()), QUICK);
    let addr = serve(router).await;
    send_and_lose_the_response(addr, "\"order-1\"", "sku=7").await;
    let retry = send(addr, "/orders", Some("\"order-1\""), "sku=7").await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed(), "{retry:?}");
    assert_eq!(retry.body, "order 1: sku=7");
    assert_eq!(retry.headers["location"], "/orders/1");
    assert!(retry.headers.get("x-request-id").is_none(), "only the chosen headers are replayed");
    assert_eq!(executions.count(), 1);
}

/// A replayed body comes with its encoding: the layer keeps the body as it
/// was sent, so a response compressed inside it is replayed with its
/// `content-encoding` (and, by default, its `content-language`) — whatever
/// `store_headers` lists, for the encoding. (Replayed without it, the gzip
/// bytes reached the client as garbage.)
#[tokio::test]
async fn a_replayed_body_keeps_its_content_encoding() {
    let layers = [
        IdempotencyLayer::new(MemoryStore::default()),
        IdempotencyLayer::new(MemoryStore::default()).store_headers([http::header::CONTENT_TYPE]),
    ];
    for (n, layer) in layers.into_iter().enumerate() {
        let (router, executions) = app(layer, QUICK);
        let addr = serve(router).await;
        let first = send(addr, "/encoded", Some("\"enc-1\""), "").await;
        let replay = send(addr, "/encoded", Some("\"enc-1\""), "").await;
        assert!(replay.replayed(), "{replay:?}");
        assert_eq!((replay.body.as_str(), executions.count()), (first.body.as_str(), 1));
        assert_eq!(replay.headers["content-encoding"], "gzip", "layer {n}");
        let language = replay.headers.get("content-language").map(|v| v.to_str().ok());
        assert_eq!(language, if n == 0 { Some(Some("fr")) } else { None }, "layer {n}");
    }
}

#[tokio::test]
async fn a_caller_that_hangs_up_mid_request_still_gets_the_stored_response_on_retry() {
    let (router, executions) = app(IdempotencyLayer::new(MemoryStore::default()), Duration::from_millis(300));
    let addr = serve(router).await;
    send_and_hang_up(addr, "\"gone\"", "sku=7").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let during = send(addr, "/orders", Some("\"gone\""), "sku=7").await;
    assert_eq!(during.status, 409, "the first still runs, though its caller left: {during:?}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let retry = send(addr, "/orders", Some("\"gone\""), "sku=7").await;
    assert_eq!((retry.status, retry.replayed(), retry.body.as_str()), (201, true, "order 1: sku=7"));
    assert_eq!(executions.count(), 1);
}

#[tokio::test]
async fn twenty_concurrent_duplicates_run_once_and_the_rest_are_replays_or_409() {
    let (router, executions) = app(IdempotencyLayer::new(MemoryStore::default()), Duration::from_millis(200));
    let addr = serve(router).await;
    let calls =
        (0..20).map(|_| tokio::spawn(async move { send(addr, "/orders", Some("\"dup\""), "one").await }));
    let mut executed = 0;
    for call in calls {
        let answer = call.await.expect("the caller finishes");
        match (answer.status, answer.replayed()) {
            (201, false) => executed += 1,
            (201, true) => assert_eq!(answer.body, "order 1: one"),
            (409, _) => assert_eq!(answer.headers["content-type"], "application/problem+json"),
            other => panic!("unexpected answer {other:?}: {answer:?}"),
        }
    }
    assert_eq!(executed, 1);
    assert_eq!(executions.count(), 1);
}

#[tokio::test]
async fn the_same_key_with_another_body_gets_422() {
    let (router, executions) = app(IdempotencyLayer::new(MemoryStore::default()), QUICK);
    let addr = serve(router).await;
    assert_eq!(send(addr, "/orders", Some("\"k\""), "sku=7").await.status, 201);
    let other = send(addr, "/orders", Some("\"k\""), "sku=8").await;
    assert_eq!(other.status, 422);
    assert!(other.body.contains("#mismatch"), "{}", other.body);
    assert!(
        other.body.contains("\"title\":\"Idempotency-Key is already used\""),
        "the draft's title: {}",
        other.body
    );
    assert_eq!(other.headers["content-language"], "en");
    assert_eq!(executions.count(), 1);
}

#[tokio::test]
async fn a_required_key_that_is_missing_gets_400_and_other_methods_pass() {
    let (router, executions) = app(IdempotencyLayer::new(MemoryStore::default()).require_key(), QUICK);
    let addr = serve(router).await;
    let missing = send(addr, "/orders", None, "sku=7").await;
    assert_eq!(missing.status, 400);
    assert!(missing.body.contains("#missing-key"), "{}", missing.body);
    assert!(missing.body.contains("idempotency-key"), "{}", missing.body);
    assert_eq!(executions.count(), 0);
    let get = send_with(addr, http::Method::GET, "/orders", vec![], "").await;
    assert_eq!((get.status, get.body.as_str()), (200, "list"));
}

#[tokio::test]
async fn without_require_key_an_unkeyed_post_runs_every_time() {
    let (router, executions) = app(IdempotencyLayer::new(MemoryStore::default()), QUICK);
    let addr = serve(router).await;
    assert_eq!(send(addr, "/orders", None, "a").await.status, 201);
    assert_eq!(send(addr, "/orders", None, "a").await.status, 201);
    assert_eq!(executions.count(), 2);
}

#[tokio::test]
async fn hostile_keys_get_a_clear_400_and_the_server_keeps_serving() {
    let (router, executions) = app(IdempotencyLayer::new(MemoryStore::default()), QUICK);
    let addr = serve(router).await;
    let ten_kb = format!("\"{}\"", "k".repeat(10 * 1024));
    let cases: Vec<(Vec<Vec<u8>>, &str)> = vec![
        (vec![b"\"\"".to_vec()], "empty"),
        (vec![ten_kb.into_bytes()], "longer than 255"),
        (vec!["\"clé\"".as_bytes().to_vec()], "non-ASCII"),
        (vec![b"unquoted".to_vec()], "double quotes"),
        (vec![b"\"open".to_vec()], "not a Structured Field String"),
        (vec![b"\"a\"".to_vec(), b"\"b\"".to_vec()], "more than once"),
    ];
    for (keys, reason) in cases {
        let answer = send_with(addr, http::Method::POST, "/orders", keys, "x").await;
        assert_eq!(answer.status, 400, "{answer:?}");
        assert_eq!(answer.headers["content-type"], "application/problem+json");
        assert!(
            answer.body.contains("#invalid-key") && answer.body.contains(reason),
            "{reason}: {}",
            answer.body
        );
    }
    assert_eq!(executions.count(), 0);
    assert_eq!(send(addr, "/orders", Some("\"fine\""), "x").await.status, 201);
}

#[tokio::test]
async fn a_5xx_frees_the_key_for_the_retry_and_a_4xx_is_kept() {
    let (router, executions) = app(IdempotencyLayer::new(MemoryStore::default()), QUICK);
    let addr = serve(router).await;
    assert_eq!(send(addr, "/fail/503", Some("\"s\""), "").await.status, 503);
    let retry = send(addr, "/fail/503", Some("\"s\""), "").await;
    assert!(!retry.replayed());
    assert_eq!(executions.count(), 2, "the retry of a 5xx runs again");
    assert_eq!(send(addr, "/fail/404", Some("\"c\""), "").await.status, 404);
    let repeat = send(addr, "/fail/404", Some("\"c\""), "").await;
    assert_eq!((repeat.status, repeat.replayed()), (404, true));
    assert_eq!(executions.count(), 3);
}

#[tokio::test]
async fn a_response_too_large_to_keep_is_sent_whole_then_never_runs_again() {
    let (router, executions) = app(IdempotencyLayer::new(MemoryStore::default()).max_body(1024), QUICK);
    let addr = serve(router).await;
    let first = send(addr, "/big/5000", Some("\"big\""), "").await;
    assert_eq!((first.status, first.body.len()), (200, 5000));
    let repeat = send(addr, "/big/5000", Some("\"big\""), "").await;
    assert_eq!(repeat.status, 409);
    assert!(repeat.body.contains("#not-replayable"), "{}", repeat.body);
    assert_eq!(executions.count(), 1);
    let small = send(addr, "/big/1024", Some("\"small\""), "").await;
    assert_eq!(small.body.len(), 1024);
    assert!(
        send(addr, "/big/1024", Some("\"small\""), "").await.replayed(),
        "a body of exactly max_body is kept"
    );
}

#[tokio::test]
async fn a_request_body_over_the_bound_gets_413_and_does_not_run() {
    let (router, executions) = app(IdempotencyLayer::new(MemoryStore::default()).max_body(16), QUICK);
    let addr = serve(router).await;
    let answer = send(addr, "/orders", Some("\"large\""), &"b".repeat(17)).await;
    assert_eq!(answer.status, 413);
    assert!(answer.body.contains("#body-too-large"), "{}", answer.body);
    assert_eq!(executions.count(), 0);
}

#[tokio::test]
async fn a_full_store_refuses_new_keys_with_503_and_retry_after() {
    let (router, executions) = app(IdempotencyLayer::new(MemoryStore::with_limits(2, 1 << 20)), QUICK);
    let addr = serve(router).await;
    assert_eq!(send(addr, "/orders", Some("\"1\""), "").await.status, 201);
    assert_eq!(send(addr, "/orders", Some("\"2\""), "").await.status, 201);
    let full = send(addr, "/orders", Some("\"3\""), "").await;
    assert_eq!(full.status, 503);
    assert!(full.body.contains("#store-full"), "{}", full.body);
    let retry_after: u64 =
        full.headers["retry-after"].to_str().expect("ASCII").parse().expect("delay-seconds");
    assert!((86_000..=86_400).contains(&retry_after), "the first key expires in about 24 h: {retry_after}");
    assert!(send(addr, "/orders", Some("\"1\""), "").await.replayed(), "held keys still replay");
    assert_eq!(executions.count(), 2);
}

fn key(text: &str) -> IdempotencyKey {
    IdempotencyKey::parse(format!("\"{text}\"").as_bytes()).expect("a valid key")
}

#[tokio::test(start_paused = true)]
async fn entries_expire_after_the_ttl_and_claims_after_their_lease() {
    let store = MemoryStore::default();
    let print = Fingerprint::of(&http::Method::POST, "/orders", b"");
    let lease = Duration::from_secs(60);
    let Claim::Claimed(ticket) = store.claim(&key("a"), print, lease).await.expect("no error") else {
        panic!("a free key is claimed")
    };
    tokio::time::advance(Duration::from_secs(59)).await;
    assert!(
        matches!(store.claim(&key("a"), print, lease).await, Ok(Claim::Held(entry)) if entry.state == EntryState::InFlight)
    );
    store.complete(&ticket, Completion::NotReplayable, Duration::from_secs(10)).await.expect("no error");
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(
        matches!(store.claim(&key("a"), print, lease).await, Ok(Claim::Held(_))),
        "the ttl counts from completion"
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(matches!(store.claim(&key("a"), print, lease).await, Ok(Claim::Claimed(_))), "expired");

    // A claim whose process never completes it frees the key after its lease.
    let Ok(Claim::Claimed(stale)) = store.claim(&key("b"), print, lease).await else { panic!("claimed") };
    tokio::time::advance(Duration::from_secs(61)).await;
    let Ok(Claim::Claimed(_)) = store.claim(&key("b"), print, lease).await else {
        panic!("the lease ran out")
    };
    store.complete(&stale, Completion::NotReplayable, Duration::from_secs(10)).await.expect("no error");
    assert!(
        matches!(store.claim(&key("b"), print, lease).await, Ok(Claim::Held(entry)) if entry.state == EntryState::InFlight),
        "a stale ticket cannot complete the new claim"
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_store_makes_room_from_expired_keys_only() {
    let store = MemoryStore::with_limits(2, 1024);
    let print = Fingerprint::of(&http::Method::POST, "/", b"");
    let ttl = Duration::from_secs(30);
    for name in ["a", "b"] {
        let Ok(Claim::Claimed(ticket)) = store.claim(&key(name), print, ttl).await else { panic!("claimed") };
        store.complete(&ticket, Completion::NotReplayable, ttl).await.expect("no error");
    }
    let Ok(Claim::Full { retry_after }) = store.claim(&key("c"), print, ttl).await else { panic!("full") };
    assert_eq!(retry_after, ttl);
    tokio::time::advance(ttl).await;
    assert!(matches!(store.claim(&key("c"), print, ttl).await, Ok(Claim::Claimed(_))));
    assert_eq!(store.len(), 1, "both expired keys were dropped");
}

#[tokio::test]
async fn keep_server_errors_replays_a_5xx_as_the_draft_says() {
    let (router, executions) = app(IdempotencyLayer::new(MemoryStore::default()).keep_server_errors(), QUICK);
    let addr = serve(router).await;
    assert_eq!(send(addr, "/fail/503", Some("\"s\""), "").await.status, 503);
    let retry = send(addr, "/fail/503", Some("\"s\""), "").await;
    assert_eq!((retry.status, retry.replayed()), (503, true));
    assert_eq!(executions.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_renewed_claim_outlives_its_lease_and_one_that_ran_out_is_taken_over_with_its_age() {
    let store = MemoryStore::default();
    let key = IdempotencyKey::parse(br#""job-1""#).expect("a key");
    let print = Fingerprint::of(&http::Method::POST, "jobs", b"pay");
    let lease = Duration::from_secs(3);
    let Ok(Claim::Claimed(first)) = store.claim(&key, print, lease).await else { panic!("a free key") };
    assert_eq!(first.took_over(), None, "a first claim takes nothing over");
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(store.renew(&first, lease).await.expect("the memory store answers"));
    }
    // Four seconds in, past the lease: renewed, it still holds.
    let Ok(Claim::Held(entry)) = store.claim(&key, print, lease).await else { panic!("renewed, still held") };
    assert_eq!(entry.state, EntryState::InFlight);
    // Its worker dies: no more renewals; the claim runs out 3 s after the last.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let Ok(Claim::Claimed(second)) = store.claim(&key, print, lease).await else { panic!("taken over") };
    assert_eq!(second.took_over(), Some(Duration::from_secs(8)), "the dead claim's age");
    assert!(!store.renew(&first, lease).await.expect("answers"), "the dead claim cannot be renewed");
    // A released claim that is claimed again was not taken over.
    store.release(&second).await.expect("answers");
    let Ok(Claim::Claimed(third)) = store.claim(&key, print, lease).await else { panic!("a free key") };
    assert_eq!(third.took_over(), None);
    store.complete(&third, Completion::NotReplayable, Duration::from_secs(60)).await.expect("answers");
    assert!(!store.renew(&third, lease).await.expect("answers"), "a completed claim is not renewed");
}

#[tokio::test(start_paused = true)]
async fn a_mark_only_rises_outlives_the_claims_release_and_expires_with_its_ttl() {
    let store = MemoryStore::with_limits(2, 1024);
    let key = IdempotencyKey::parse(br#""job-1""#).expect("a key");
    let ttl = Duration::from_secs(60);
    assert_eq!(store.raise_mark(&key, 1, ttl).await.expect("answers"), None, "no mark yet");
    assert_eq!(store.raise_mark(&key, 3, ttl).await.expect("answers"), Some(1));
    // A lower mark is told the higher one and leaves it.
    assert_eq!(store.raise_mark(&key, 2, ttl).await.expect("answers"), Some(3));
    assert_eq!(store.raise_mark(&key, u64::MAX - 1, ttl).await.expect("answers"), Some(3));
    assert_eq!(store.raise_mark(&key, 4, ttl).await.expect("answers"), Some(u64::MAX - 1));
    // A claim taken and released beside it leaves the mark.
    let print = Fingerprint::of(&http::Method::POST, "jobs", b"pay");
    let Ok(Claim::Claimed(ticket)) = store.claim(&key, print, ttl).await else { panic!("a free key") };
    store.release(&ticket).await.expect("answers");
    assert_eq!(store.raise_mark(&key, 1, ttl).await.expect("answers"), Some(u64::MAX - 1));
    // Bounded: a second key fits, a third is refused while both live, never evicting one.
    let other = IdempotencyKey::parse(br#""job-2""#).expect("a key");
    let third = IdempotencyKey::parse(br#""job-3""#).expect("a key");
    assert_eq!(store.raise_mark(&other, 1, Duration::from_secs(10)).await.expect("answers"), None);
    assert!(store.raise_mark(&third, 1, ttl).await.is_err(), "full: refused");
    assert_eq!(store.raise_mark(&other, 1, Duration::from_secs(10)).await.expect("answers"), Some(1));
    // Expired: gone, and its room is taken.
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(store.raise_mark(&key, 2, ttl).await.expect("answers"), None, "expired with its ttl");
    assert_eq!(store.raise_mark(&third, 1, ttl).await.expect("answers"), None, "room again");
}
