//! A keyed request's claim while it runs and after, against a real axum
//! server on 127.0.0.1 (docs/guide/idempotency.md, "Runs once, and when
//! not"): a request slower than its lease keeps its key, since the claim is
//! renewed while it runs; a completion the store failed to record is tried
//! again until the lease would have run out, so its repeats get the stored
//! response rather than a second run.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retryscope_idempotency::store::{Claim, Completion, Ticket};
use retryscope_idempotency::{
    Fingerprint, IdempotencyKey, IdempotencyLayer, IdempotencyStore, MemoryStore, StoreError,
};
use support::{app, send, serve};

#[tokio::test]
async fn a_request_slower_than_its_lease_keeps_its_key_and_runs_once() {
    // A 600-ms lease and a request that takes 2 s: renewed every 200 ms,
    // the claim holds throughout; without renewal a repeat 1.2 s in would
    // find the key free and run the request a second time.
    let layer = IdempotencyLayer::new(MemoryStore::default()).lease(Duration::from_millis(600));
    let (router, executions) = app(layer, Duration::from_secs(2));
    let addr = serve(router).await;
    let first = tokio::spawn(async move { send(addr, "/orders", Some("\"slow\""), "sku=1").await });
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let during = send(addr, "/orders", Some("\"slow\""), "sku=1").await;
    assert_eq!(during.status, 409, "still running, two leases in: {during:?}");
    let first = first.await.expect("the first caller finishes");
    assert_eq!((first.status, first.replayed()), (201, false));
    let after = send(addr, "/orders", Some("\"slow\""), "sku=1").await;
    assert_eq!((after.status, after.replayed(), after.body.as_str()), (201, true, "order 1: sku=1"));
    assert_eq!(executions.count(), 1);
}

/// The memory store, whose `complete` fails while `failing` is above zero
/// (taking one off each time): a store that blipped just as a request
/// completed.
#[derive(Clone)]
struct CompletionFails {
    inner: MemoryStore,
    failing: Arc<AtomicU32>,
}

impl IdempotencyStore for CompletionFails {
    async fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        self.inner.claim(key, fingerprint, lease).await
    }

    async fn complete(
        &self,
        ticket: &Ticket,
        completion: Completion,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        if self.failing.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(StoreError::new("complete", "an injected failure: the store blipped"));
        }
        self.inner.complete(ticket, completion, ttl).await
    }

    async fn release(&self, ticket: &Ticket) -> Result<(), StoreError> {
        self.inner.release(ticket).await
    }

    async fn renew(&self, ticket: &Ticket, lease: Duration) -> Result<bool, StoreError> {
        self.inner.renew(ticket, lease).await
    }

    async fn raise_mark(
        &self,
        key: &IdempotencyKey,
        mark: u64,
        ttl: Duration,
    ) -> Result<Option<u64>, StoreError> {
        self.inner.raise_mark(key, mark, ttl).await
    }
}

#[tokio::test]
async fn a_completion_the_store_failed_to_record_is_recorded_later_and_its_repeat_replayed() {
    // Four failed tries (the first, then 50, 100 and 200 ms apart); the
    // fifth, 400 ms after that (750 ms in all), records it. The lease is
    // 2 s: without the later tries the key would stay claimed (409) until
    // then, and a repeat after it would run the request a second time.
    let store = CompletionFails { inner: MemoryStore::default(), failing: Arc::new(AtomicU32::new(4)) };
    let layer = IdempotencyLayer::new(store.clone()).lease(Duration::from_secs(2));
    let (router, executions) = app(layer, Duration::ZERO);
    let addr = serve(router).await;
    let first = send(addr, "/orders", Some("\"blip\""), "sku=2").await;
    assert_eq!((first.status, first.replayed()), (201, false), "the caller got its response at once");
    let at_once = send(addr, "/orders", Some("\"blip\""), "sku=2").await;
    assert_eq!(at_once.status, 409, "not yet recorded: in flight: {at_once:?}");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(store.failing.load(Ordering::SeqCst), 0, "every failure was used");
    let repeat = send(addr, "/orders", Some("\"blip\""), "sku=2").await;
    assert_eq!((repeat.status, repeat.replayed(), repeat.body.as_str()), (201, true, "order 1: sku=2"));
    // Past the lease: still the stored response, never a second run.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let later = send(addr, "/orders", Some("\"blip\""), "sku=2").await;
    assert_eq!((later.status, later.replayed()), (201, true));
    assert_eq!(executions.count(), 1);
}

#[tokio::test]
async fn a_completion_the_store_never_records_frees_the_key_after_its_lease_as_the_guide_says() {
    // The edge of the guarantee: the store fails every completion for longer
    // than the lease. The key stays claimed (409) until the lease ends; a
    // repeat after it runs the request again.
    let store =
        CompletionFails { inner: MemoryStore::default(), failing: Arc::new(AtomicU32::new(u32::MAX)) };
    let layer = IdempotencyLayer::new(store.clone()).lease(Duration::from_secs(1));
    let (router, executions) = app(layer, Duration::ZERO);
    let addr = serve(router).await;
    assert_eq!(send(addr, "/orders", Some("\"down\""), "sku=3").await.status, 201);
    assert_eq!(send(addr, "/orders", Some("\"down\""), "sku=3").await.status, 409, "in flight");
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let after = send(addr, "/orders", Some("\"down\""), "sku=3").await;
    assert_eq!((after.status, after.replayed()), (201, false), "run again after the lease");
    assert_eq!(executions.count(), 2);
}
