//! The worker against a real nats-server: each job runs to one success, one
//! dead letter, or — while its dependency is down — waits without spending attempts.

mod support;

use retryscope_idempotency::MemoryStore;
use retryscope_jobs::{DeadLetterStore, DeadReason, Job, JobOutcome, Producer, Worker, dead};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{TestError, fast_policy, nats_url, queue, start, wait_for};

type Counts = Arc<Mutex<HashMap<String, u32>>>;

fn key_of(job: &Job) -> String {
    job.key.as_deref().unwrap_or("").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_runs_once_and_leaves_one_dead_letter_with_its_reason() {
    let Some(url) = nats_url() else { return };
    let policy = fast_policy(5);
    let q = queue(&url, "permanent", Duration::from_secs(5)).await;
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    let worker = Worker::builder(q.queue.clone(), policy, move |_job: Job| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(TestError::Invalid) }
    })
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    Producer::new(q.queue.clone()).enqueue(&q.subject, "order-1", "sku=1").await.expect("stored");
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::DeadLettered) == 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.stop().await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "a permanent failure is not retried");
    let letters = dead::list(&q.queue, 0, 10).await.expect("dead letters listed");
    assert_eq!(letters.len(), 1);
    let letter = letters[0].letter.as_ref().expect("a readable dead letter");
    assert_eq!(letter.reason, DeadReason::Permanent);
    assert_eq!(letter.meta.key.as_deref(), Some("order-1"));
    assert_eq!(letter.meta.attempt, 1);
    assert_eq!(letter.subject, q.subject);
    assert_eq!(letter.error_type.as_deref(), Some("422"));
    assert_eq!(letter.last_error.as_deref(), Some("the order is invalid"));
    assert!(letter.meta.first_attempt_at.is_some());
    assert_eq!(q.queue.dead_depth().await.expect("depth"), 1);
}

/// A handler that panics: its attempt is a permanent failure, the job a
/// dead letter with `error.type` `panic`, run once. (Nothing caught it: the
/// delivery was neither acked nor nak'ed, and every redelivery after the
/// AckWait panicked again as a first attempt, until JetStream's delivery
/// limit.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_panics_is_a_permanent_failure_and_runs_once() {
    let Some(url) = nats_url() else { return };
    let q = queue(&url, "panics", Duration::from_secs(1)).await;
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    let worker = Worker::builder(q.queue.clone(), fast_policy(5), move |_job: Job| {
        seen.fetch_add(1, Ordering::SeqCst);
        async {
            if true {
                panic!("the handler's bug");
            }
            Ok::<(), TestError>(())
        }
    })
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    Producer::new(q.queue.clone()).enqueue(&q.subject, "order-9", "sku=9").await.expect("stored");
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::DeadLettered) == 1).await);
    // Past two AckWaits: no redelivery runs it again.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    running.stop().await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "a panic is not retried");
    let letters = dead::list(&q.queue, 0, 10).await.expect("dead letters listed");
    assert_eq!(letters.len(), 1);
    let letter = letters[0].letter.as_ref().expect("a readable dead letter");
    assert_eq!(letter.reason, DeadReason::Permanent);
    assert_eq!(letter.error_type.as_deref(), Some("panic"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_jobs_with_thirty_percent_transient_failures_all_complete_each_once() {
    let Some(url) = nats_url() else { return };
    let policy = fast_policy(10);
    let q = queue(&url, "thousand", Duration::from_secs(5)).await;
    let successes: Counts = Arc::default();
    let done = Arc::clone(&successes);
    let worker = Worker::builder(q.queue.clone(), policy, move |job: Job| {
        // 30 % of attempts fail, decided by the job and attempt (every third attempt of
        // a job fails at most twice in a row: the policy's 10 attempts always suffice).
        let n: u32 = key_of(&job).trim_start_matches("job-").parse().unwrap_or(0);
        let fails = (n.wrapping_mul(7).wrapping_add(job.attempt * 13)) % 10 < 3 && job.attempt < 4;
        let done = Arc::clone(&done);
        async move {
            if fails {
                return Err(TestError::Busy);
            }
            *done.lock().expect("not poisoned").entry(key_of(&job)).or_default() += 1;
            Ok(())
        }
    })
    .concurrency(64)
    .processed_keys(MemoryStore::default())
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    let producer = Producer::new(q.queue.clone());
    for n in 0..1000 {
        producer.enqueue(&q.subject, &format!("job-{n}"), format!("n={n}")).await.expect("stored");
    }
    let all =
        wait_for(Duration::from_secs(30), || successes.lock().expect("not poisoned").len() == 1000).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
    let successes = successes.lock().expect("not poisoned");
    assert!(all, "{} of 1000 completed", successes.len());
    assert!(successes.values().all(|&n| n == 1), "every job completed exactly once");
    assert_eq!(stats.count(JobOutcome::DeadLettered), 0);
    let retried = stats.count(JobOutcome::Retried);
    assert!(retried >= 250, "about 30 % of first attempts failed, and some retries: {retried}");
    assert_eq!(stats.executions(), 1000 + retried);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_slower_than_ack_wait_is_not_redelivered() {
    let Some(url) = nats_url() else { return };
    let policy = fast_policy(3);
    let q = queue(&url, "slow", Duration::from_millis(500)).await;
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    let worker = Worker::builder(q.queue.clone(), policy, move |_job: Job| {
        seen.fetch_add(1, Ordering::SeqCst);
        async {
            // Three AckWaits: only the in-progress acks keep it ours.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            Ok::<(), TestError>(())
        }
    })
    .concurrency(4)
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    Producer::new(q.queue.clone()).enqueue(&q.subject, "slow-1", "x").await.expect("stored");
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::Succeeded) == 1).await);
    // Another AckWait and a half: a redelivery would have come by now.
    tokio::time::sleep(Duration::from_millis(800)).await;
    running.stop().await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "never redelivered while running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_a_producer_sends_within_the_window_are_one_job() {
    let Some(url) = nats_url() else { return };
    let policy = fast_policy(3);
    let q = queue(&url, "duplicates", Duration::from_secs(5)).await;
    let producer = Producer::new(q.queue.clone());
    let first = producer.enqueue(&q.subject, "event-9", "e").await.expect("stored");
    let again = producer.enqueue(&q.subject, "event-9", "e").await.expect("stored");
    let third = producer.enqueue(&q.subject, "event-9", "e").await.expect("stored");
    assert!(!first.duplicate && again.duplicate && third.duplicate);
    assert_eq!(again.sequence, first.sequence);
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    let worker = Worker::builder(q.queue.clone(), policy, move |_job: Job| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { Ok::<(), TestError>(()) }
    })
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::Succeeded) == 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.stop().await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_without_headers_is_attempt_one_and_malformed_headers_are_a_dead_letter() {
    let Some(url) = nats_url() else { return };
    let policy = fast_policy(3);
    let q = queue(&url, "bad_input", Duration::from_secs(5)).await;
    let attempts: Arc<Mutex<Vec<u32>>> = Arc::default();
    let seen = Arc::clone(&attempts);
    let worker = Worker::builder(q.queue.clone(), policy, move |job: Job| {
        seen.lock().expect("not poisoned").push(job.attempt);
        async { Ok::<(), TestError>(()) }
    })
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    let js = q.queue.context();
    js.publish(q.subject.clone(), "plain".into()).await.expect("sent").await.expect("stored");
    let mut bad = async_nats::HeaderMap::new();
    bad.insert(retryscope_jobs::meta::ATTEMPT_HEADER, "two");
    js.publish_with_headers(q.subject.clone(), bad, "bad".into()).await.expect("sent").await.expect("stored");
    assert!(
        wait_for(Duration::from_secs(5), || stats.count(JobOutcome::Succeeded) == 1
            && stats.count(JobOutcome::DeadLettered) == 1)
        .await
    );
    running.stop().await;
    assert_eq!(*attempts.lock().expect("not poisoned"), vec![1]);
    let letters = dead::list(&q.queue, 0, 10).await.expect("listed");
    let letter = letters[0].letter.as_ref().expect("readable");
    assert_eq!(letter.reason, DeadReason::InvalidJobMetadata);
    assert_eq!(letter.reason.as_str(), "invalid_job_metadata");
    assert_eq!(letter.payload.as_ref(), b"bad");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_counts_from_the_first_attempt_across_requeues() {
    let Some(url) = nats_url() else { return };
    // 20 attempts 100 ms apart would take 1.9 s; the deadline, 700 ms from the
    // first attempt, ends the job first, though each retry is a new message.
    let deadline = Duration::from_millis(700);
    let policy = retryscope::Policy::builder()
        .max_attempts(20)
        .base_delay(Duration::from_millis(100))
        .max_delay(Duration::from_millis(100))
        .jitter(retryscope::Jitter::None)
        .deadline(deadline)
        .build()
        .expect("a valid policy");
    let q = queue(&url, "deadline", Duration::from_secs(5)).await;
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    let worker = Worker::builder(q.queue.clone(), policy, move |_job: Job| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(TestError::Busy) }
    })
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    Producer::new(q.queue.clone()).enqueue(&q.subject, "order-9", "x").await.expect("stored");
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::DeadLettered) == 1).await);
    running.stop().await;
    let letters = dead::list(&q.queue, 0, 10).await.expect("listed");
    let letter = letters[0].letter.as_ref().expect("readable");
    assert_eq!(letter.reason, DeadReason::DeadlineExceeded);
    let attempts = calls.load(Ordering::SeqCst);
    assert_eq!(letter.meta.attempt, attempts);
    assert!((3..20).contains(&attempts), "{attempts} attempts, each its own message");
    let first = letter.meta.first_attempt_at.expect("the first attempt's time, carried across requeues");
    let span = letter.last_attempt_at.duration_since(first).expect("the last attempt after the first");
    assert!(span <= deadline, "the last attempt {span:?} after the first: within the deadline");
    println!("deadline {deadline:?}: {attempts} attempts over {span:?}, then deadline_exceeded");
    assert_eq!(stats.count(JobOutcome::Retried), u64::from(attempts) - 1);
}
