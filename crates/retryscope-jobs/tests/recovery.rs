//! What goes wrong around a job, against a real nats-server: a worker dies
//! after the effect and before the ack, the dependency is down for longer
//! than the whole retry window, and a dead letter is replayed.

mod support;

use retryscope::dependency::Dependencies;
use retryscope::{CircuitBreaker, Jitter, Policy};
use retryscope_idempotency::store::{Claim, Completion, Ticket};
use retryscope_idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore, MemoryStore, StoreError};
use retryscope_jobs::{DeadLetterStore, Job, JobOutcome, Producer, Replayed, Worker, dead};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use support::{TestError, fast_policy, nats_url, queue, start, wait_for};

/// A memory store that, once armed, records a completion and then never
/// returns: the worker holding it is killed right after the job's effect
/// was recorded and before its ack went out.
#[derive(Clone)]
struct DiesAfterRecording {
    inner: MemoryStore,
    armed: Arc<AtomicBool>,
    recorded: Arc<AtomicBool>,
}

impl IdempotencyStore for DiesAfterRecording {
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
        self.inner.complete(ticket, completion, ttl).await?;
        if self.armed.load(Ordering::SeqCst) {
            self.recorded.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        Ok(())
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_after_the_effect_and_before_the_ack_leaves_the_job_executed_once() {
    let Some(url) = nats_url() else { return };
    let policy = fast_policy(3);
    let q = queue(&url, "lost_ack", Duration::from_millis(500)).await;
    let effects = Arc::new(AtomicU32::new(0));
    let memory = MemoryStore::default();
    let dying = DiesAfterRecording {
        inner: memory.clone(),
        armed: Arc::new(AtomicBool::new(true)),
        recorded: Arc::new(AtomicBool::new(false)),
    };
    let handler = |effects: Arc<AtomicU32>| {
        move |_job: Job| {
            effects.fetch_add(1, Ordering::SeqCst);
            async { Ok::<(), TestError>(()) }
        }
    };
    let first = Worker::builder(q.queue.clone(), policy, handler(Arc::clone(&effects)))
        .processed_keys(dying.clone())
        .build()
        .expect("valid settings");
    let killed = tokio::spawn(first.run(std::future::pending()));
    Producer::new(q.queue.clone()).enqueue(&q.subject, "payment-42", "charge").await.expect("stored");
    assert!(wait_for(Duration::from_secs(5), || dying.recorded.load(Ordering::SeqCst)).await);
    killed.abort(); // the process dies: no ack, no nak, no more in-progress acks
    let _ = killed.await;

    let second = Worker::builder(q.queue.clone(), policy, handler(Arc::clone(&effects)))
        .processed_keys(memory)
        .build()
        .expect("valid settings");
    let stats = second.stats();
    let started = Instant::now();
    let running = start(|stopped| second.run(stopped));
    // Redelivered once the AckWait (500 ms) runs out.
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::Deduplicated) == 1).await);
    let redelivered_after = started.elapsed();
    running.stop().await;
    assert_eq!(effects.load(Ordering::SeqCst), 1, "the effect ran once");
    assert_eq!(stats.executions(), 0, "the redelivery was acked from the key store");
    println!("lost ack: redelivered and acked from the key store after {redelivered_after:?}, effects = 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_three_times_the_retry_window_sends_no_job_to_the_dead_letters() {
    let Some(url) = nats_url() else { return };
    // Retry window: 50 + 100 + 200 + 200 ms = 550 ms over 5 attempts.
    let policy = Policy::builder()
        .max_attempts(5)
        .base_delay(Duration::from_millis(50))
        .max_delay(Duration::from_millis(200))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid");
    let window = Duration::from_millis(550);
    let outage = window * 3;
    let q = queue(&url, "outage", Duration::from_secs(5)).await;
    let guards = Dependencies::builder()
        .breaker(|| {
            CircuitBreaker::builder()
                .min_calls(4)
                .failure_ratio(0.5)
                .cool_down(Duration::from_millis(300))
                .build()
                .expect("valid breaker")
        })
        .build();
    let down_until = Instant::now() + outage;
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    let worker = Worker::builder(q.queue.clone(), policy, move |_job: Job| {
        seen.fetch_add(1, Ordering::SeqCst);
        let down = Instant::now() < down_until;
        async move { if down { Err(TestError::Busy) } else { Ok(()) } }
    })
    .guards(guards.get("inventory"))
    .hold(Duration::from_millis(200))
    .concurrency(8)
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    let producer = Producer::new(q.queue.clone());
    for n in 0..40 {
        producer.enqueue(&q.subject, &format!("o-{n}"), "x").await.expect("stored");
    }
    let all = wait_for(outage + Duration::from_secs(8), || stats.count(JobOutcome::Succeeded) == 40).await;
    running.stop().await;
    println!(
        "outage {outage:?} (3x the {window:?} retry window): succeeded {}, dead-lettered {}, held {}, retried {}, handler calls {}",
        stats.count(JobOutcome::Succeeded),
        stats.count(JobOutcome::DeadLettered),
        stats.count(JobOutcome::Held),
        stats.count(JobOutcome::Retried),
        calls.load(Ordering::SeqCst)
    );
    assert!(all, "every job completes after the outage");
    assert_eq!(stats.count(JobOutcome::DeadLettered), 0, "a hold is not an attempt");
    assert_eq!(q.queue.dead_depth().await.expect("depth"), 0);
    assert!(stats.count(JobOutcome::Held) > 0, "the breaker held jobs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_dead_letter_runs_again_from_attempt_one_under_its_key() {
    let Some(url) = nats_url() else { return };
    let policy = fast_policy(2);
    let q = queue(&url, "replay", Duration::from_secs(5)).await;
    let fixed = Arc::new(AtomicBool::new(false));
    let attempts: Arc<std::sync::Mutex<Vec<(String, u32, u32)>>> = Arc::default();
    let (is_fixed, seen) = (Arc::clone(&fixed), Arc::clone(&attempts));
    let worker = Worker::builder(q.queue.clone(), policy, move |job: Job| {
        seen.lock().expect("not poisoned").push((
            job.key.as_deref().unwrap_or("").to_owned(),
            job.attempt,
            job.replays,
        ));
        let ok = is_fixed.load(Ordering::SeqCst);
        async move { if ok { Ok(()) } else { Err(TestError::Busy) } }
    })
    .processed_keys(MemoryStore::default())
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    Producer::new(q.queue.clone()).enqueue(&q.subject, "invoice-3", "pdf").await.expect("stored");
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::DeadLettered) == 1).await);
    let listed = dead::list(&q.queue, 0, 10).await.expect("listed");
    assert_eq!(listed.len(), 1);
    let letter = listed[0].letter.as_ref().expect("readable");
    assert_eq!(letter.reason.as_str(), "attempts_exhausted");
    assert_eq!(letter.meta.attempt, 2);
    fixed.store(true, Ordering::SeqCst);
    let replayed = dead::replay(&q.queue, listed[0].id).await.expect("replayed");
    assert!(
        matches!(&replayed, Replayed::Queued { key: Some(key), replays: 1, .. } if key == "invoice-3"),
        "{replayed:?}"
    );
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::Succeeded) == 1).await);
    running.stop().await;
    assert_eq!(q.queue.dead_depth().await.expect("depth"), 0, "the replayed letter is removed");
    assert_eq!(dead::replay(&q.queue, listed[0].id).await.expect("asked"), Replayed::NotFound);
    let attempts = attempts.lock().expect("not poisoned");
    assert_eq!(
        *attempts,
        vec![("invoice-3".into(), 1, 0), ("invoice-3".into(), 2, 0), ("invoice-3".into(), 1, 1)],
        "the replay restarts at attempt 1 and keeps the key"
    );
}
