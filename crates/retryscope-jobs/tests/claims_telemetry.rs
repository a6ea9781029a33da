//! What a worker reports about another worker's claim, against a real
//! nats-server, read back from an in-memory OpenTelemetry SDK: a job whose key
//! a dead worker still claims is `claimed_elsewhere` (not `held`) until the
//! claim runs out, and then its claim is taken over, counted once. (One test
//! per file: the meter provider is process-wide.)

mod support;

use retryscope_idempotency::store::Claim;
use retryscope_idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore, MemoryStore};
use retryscope_jobs::telemetry::{CLAIMS_TAKEN_OVER, DELIVERIES, DESTINATION_ATTR, OUTCOME_ATTR};
use retryscope_jobs::{Job, JobOutcome, Producer, Worker};
use retryscope_test_support::telemetry::Telemetry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use support::{TestError, fast_policy, nats_url, queue, start, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_a_dead_worker_claims_is_claimed_elsewhere_until_its_claim_runs_out_then_taken_over_once() {
    let Some(url) = nats_url() else { return };
    let telemetry = Telemetry::install();
    telemetry.install_global_meter();
    // Claims renewed every 200 ms, lasting 600 ms.
    let q = queue(&url, "claim_telemetry", Duration::from_millis(600)).await;
    let store = MemoryStore::default();
    // A worker that claimed the key for 1 s and died: never renewed, never released.
    let key = IdempotencyKey::parse(br#""order-9""#).expect("a key");
    let print = Fingerprint::of(&http::Method::POST, &q.subject, b"pay 9");
    let claimed = store.claim(&key, print, Duration::from_secs(1)).await.expect("the memory store answers");
    assert!(matches!(claimed, Claim::Claimed(_)));
    let died = Instant::now();

    let runs = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&runs);
    let worker = Worker::builder(q.queue.clone(), fast_policy(3), move |_job: Job| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { Ok::<(), TestError>(()) }
    })
    .processed_keys(store)
    .fetch_wait(Duration::from_millis(100))
    .build()
    .expect("a valid worker");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    Producer::new(q.queue.clone()).enqueue(&q.subject, "order-9", "pay 9").await.expect("enqueued");
    assert!(wait_for(Duration::from_secs(10), || stats.count(JobOutcome::Succeeded) == 1).await);
    let took = died.elapsed();
    running.stop().await;

    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Not before the dead claim ran out. (How soon after is the crash test's, in
    // claims.rs: here a put-back's redelivery can wait on the broker's fetch.)
    assert!(took >= Duration::from_secs(1), "taken over {took:?} after the claim, before it ran out");
    let outcome = |value: &str| {
        telemetry.counter(DELIVERIES, &[(OUTCOME_ATTR, value), (DESTINATION_ATTR, q.subject.as_str())])
    };
    assert!(outcome("claimed_elsewhere") >= 1, "the job waited on the claim as claimed_elsewhere");
    assert_eq!(outcome("held"), 0, "a dead worker's claim is not the dependency's hold");
    assert_eq!(outcome("succeeded"), 1);
    assert_eq!(telemetry.counter(CLAIMS_TAKEN_OVER, &[(DESTINATION_ATTR, q.subject.as_str())]), 1);
    assert_eq!(stats.claims_taken_over(), 1);
}
