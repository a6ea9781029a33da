//! A retry whose publish failed, on a real nats-server: a keyed one is
//! published again, twice at most, under its de-duplication id
//! (docs/guide/jobs.md); past that — and at once for a keyless one — the
//! attempt is held and comes again. Publishes fail in front of the broker,
//! as many times as the test says: before anything reaches it, or after it
//! stored the message (its answer lost, as to a restart).

mod support;

use retryscope_idempotency::MemoryStore;
use retryscope_jobs::{
    Broker, BrokerError, DeadLetterStore, Job, JobOutcome, Outgoing, Producer, Published, Worker,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{TestError, fast_policy, nats_url, queue, start, wait_for};

/// The worker's hold: how soon an attempt whose retry could not be queued comes again.
const HOLD: Duration = Duration::from_millis(300);
/// The pause before each republish (`REPUBLISH_PAUSE` in `worker/requeue.rs`).
const PAUSE: Duration = Duration::from_millis(200);

/// The broker in front of `inner`: every `publish` is counted (with its
/// de-duplication id), and fails without reaching `inner` while `fail` is
/// above zero, then — while `lose` is — fails after `inner` stored it
/// (taking one off either). The next publish waits `slow` first, once (a
/// broker slow to answer, as one restarting). Everything else is `inner`'s.
#[derive(Clone)]
struct FailingPublishes<B> {
    inner: B,
    fail: Arc<AtomicU32>,
    lose: Arc<AtomicU32>,
    calls: Arc<Mutex<Vec<Option<String>>>>,
    slow: Arc<Mutex<Duration>>,
    /// The publishes `inner` answered as duplicates.
    duplicates: Arc<AtomicU32>,
}

impl<B> FailingPublishes<B> {
    fn new(inner: B) -> Self {
        Self {
            inner,
            fail: Arc::default(),
            lose: Arc::default(),
            calls: Arc::default(),
            slow: Arc::default(),
            duplicates: Arc::default(),
        }
    }

    /// The de-duplication ids of the publishes so far, failed ones included.
    fn calls(&self) -> Vec<Option<String>> {
        self.calls.lock().expect("not poisoned").clone()
    }
}

impl<B: Broker> Broker for FailingPublishes<B> {
    type Delivery = B::Delivery;

    async fn fetch(&self, max: usize, wait: Duration) -> Result<Vec<B::Delivery>, BrokerError> {
        self.inner.fetch(max, wait).await
    }

    async fn publish(&self, message: Outgoing) -> Result<Published, BrokerError> {
        self.calls.lock().expect("not poisoned").push(message.dedup_id.clone());
        let slow = std::mem::take(&mut *self.slow.lock().expect("not poisoned"));
        if !slow.is_zero() {
            tokio::time::sleep(slow).await;
        }
        if self.fail.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(BrokerError::new("publish", "an injected publish failure"));
        }
        let published = self.inner.publish(message).await?;
        if published.duplicate {
            self.duplicates.fetch_add(1, Ordering::SeqCst);
        }
        if self.lose.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(BrokerError::new("publish", "an injected lost answer (the message is stored)"));
        }
        Ok(published)
    }

    async fn publish_dead(&self, message: Outgoing) -> Result<Published, BrokerError> {
        self.inner.publish_dead(message).await
    }

    fn ack_wait(&self) -> Duration {
        self.inner.ack_wait()
    }

    fn max_deliver(&self) -> Option<u64> {
        self.inner.max_deliver()
    }
}

support::dead_letters_of_inner!(FailingPublishes);

/// A handler that fails its first run (retryable) and succeeds on every
/// later one, recording each run's attempt number and when it started.
fn fails_first_run(
    runs: &Arc<Mutex<Vec<(u32, Instant)>>>,
) -> impl Fn(Job) -> std::future::Ready<Result<(), TestError>> + Send + Sync + 'static {
    let runs = Arc::clone(runs);
    move |job: Job| {
        let mut runs = runs.lock().expect("not poisoned");
        runs.push((job.attempt, Instant::now()));
        std::future::ready(if runs.len() == 1 { Err(TestError::Busy) } else { Ok(()) })
    }
}

/// What one case saw.
struct Seen {
    /// Each run's attempt number.
    runs: Vec<u32>,
    /// From the first run's start to the second's (`None`: one run only).
    gap: Option<Duration>,
    /// The publishes the broker answered as duplicates.
    duplicates: u32,
    publishes: Vec<Option<String>>,
    /// The publishes when the first `Held` was counted (`None`: never held).
    publishes_when_held: Option<usize>,
    stats: Arc<retryscope_jobs::WorkerStats>,
    dead: u64,
    took: Duration,
}

/// Runs one job (`key`, or keyless) on a worker in front of which the
/// first `failures` publishes of retries fail, and the next `lost` are
/// stored but answered with a failure, until it succeeded, then a while
/// longer for anything that would come again.
async fn run_case(url: &str, test: &str, key: Option<&str>, failures: u32, lost: u32) -> Seen {
    run_case_with(url, test, key, (failures, lost), Duration::from_secs(5), Duration::ZERO).await
}

/// [`run_case`] on a queue with `ack_wait`, the first publish answering
/// after `slow`.
async fn run_case_with(
    url: &str,
    test: &str,
    key: Option<&str>,
    (failures, lost): (u32, u32),
    ack_wait: Duration,
    slow: Duration,
) -> Seen {
    let started = Instant::now();
    let q = queue(url, test, ack_wait).await;
    let broker = FailingPublishes::new(q.queue.clone());
    broker.fail.store(failures, Ordering::SeqCst);
    broker.lose.store(lost, Ordering::SeqCst);
    *broker.slow.lock().expect("not poisoned") = slow;
    let runs: Arc<Mutex<Vec<(u32, Instant)>>> = Arc::default();
    let worker = Worker::builder(broker.clone(), fast_policy(5), fails_first_run(&runs))
        .hold(HOLD)
        .fetch_wait(Duration::from_millis(100))
        .processed_keys(MemoryStore::default())
        .build()
        .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    // Enqueued on the queue itself: only the worker's publishes are counted.
    match key {
        Some(key) => {
            Producer::new(q.queue.clone()).enqueue(&q.subject, key, "x").await.expect("stored");
        }
        None => {
            let js = q.queue.context();
            js.publish(q.subject.clone(), "x".into()).await.expect("sent").await.expect("stored");
        }
    }
    // The publishes are read as the hold is first seen, every 20 ms: well
    // within the hold, before the held attempt comes again.
    let mut publishes_when_held = None;
    let succeeded = wait_for(Duration::from_secs(10), || {
        if publishes_when_held.is_none() && stats.count(JobOutcome::Held) > 0 {
            publishes_when_held = Some(broker.calls().len());
        }
        stats.count(JobOutcome::Succeeded) == 1
    })
    .await;
    // Two holds and more: a delivery that would come again (or a retry stored
    // twice) would have run by now.
    tokio::time::sleep(HOLD * 2 + Duration::from_millis(400)).await;
    running.stop().await;
    assert!(succeeded, "the job completed within 10 s; runs {:?}", runs.lock().expect("not poisoned"));
    let dead = q.queue.dead_depth().await.expect("depth");
    let runs = runs.lock().expect("not poisoned").clone();
    Seen {
        gap: runs.get(1).map(|(_, second)| second.duration_since(runs[0].1)),
        runs: runs.iter().map(|(attempt, _)| *attempt).collect(),
        duplicates: broker.duplicates.load(Ordering::SeqCst),
        publishes: broker.calls(),
        publishes_when_held,
        stats,
        dead,
        took: started.elapsed(),
    }
}

fn report(case: &str, seen: &Seen) {
    println!(
        "{case}: runs {:?} ({:?} apart), publishes {:?} ({} duplicate), publishes when held {:?}, succeeded {}, retried {}, held {}, dead {}, superseded {}, deduplicated {}, claimed elsewhere {}, in {:?}",
        seen.runs,
        seen.gap,
        seen.publishes,
        seen.duplicates,
        seen.publishes_when_held,
        seen.stats.count(JobOutcome::Succeeded),
        seen.stats.count(JobOutcome::Retried),
        seen.stats.count(JobOutcome::Held),
        seen.dead,
        seen.stats.count(JobOutcome::Superseded),
        seen.stats.count(JobOutcome::Deduplicated),
        seen.stats.count(JobOutcome::ClaimedElsewhere),
        seen.took,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_retry_whose_publish_failed_twice_is_stored_on_the_third_and_runs_once() {
    let Some(url) = nats_url() else { return };
    let seen = run_case(&url, "republish_inside", Some("order-1"), 2, 0).await;
    report("two failed publishes", &seen);
    let retry = Some("order-1#r0a2".to_owned());
    assert_eq!(
        seen.publishes,
        vec![retry.clone(), retry.clone(), retry],
        "the retry published once and again twice, under its de-duplication id"
    );
    assert_eq!(seen.runs, vec![1, 2], "attempt 1 failed, its retry (attempt 2) ran once and succeeded");
    let gap = seen.gap.expect("two runs");
    assert!(gap >= PAUSE * 2, "the retry ran {gap:?} after attempt 1: after two pauses");
    assert_eq!(seen.publishes_when_held, None, "never held: the third publish stored the retry");
    assert_eq!(seen.stats.count(JobOutcome::Retried), 1);
    assert_eq!(seen.stats.count(JobOutcome::Held), 0);
    assert_eq!(seen.stats.count(JobOutcome::Succeeded), 1, "completed once");
    assert_eq!(seen.stats.count(JobOutcome::DeadLettered), 0);
    assert_eq!(seen.dead, 0, "nothing dead-lettered");
    assert_eq!(seen.stats.executions(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_retry_whose_publish_failed_three_times_holds_its_attempt_which_comes_again() {
    let Some(url) = nats_url() else { return };
    let seen = run_case(&url, "republish_outside", Some("order-2"), 3, 0).await;
    report("three failed publishes", &seen);
    let retry = Some("order-2#r0a2".to_owned());
    assert_eq!(
        seen.publishes_when_held,
        Some(3),
        "the attempt was held after the publish and two republishes, no fourth"
    );
    assert_eq!(
        seen.publishes,
        vec![retry.clone(), retry.clone(), retry],
        "three publishes of the retry in all: none after the hold"
    );
    // The held attempt 1 comes again after the hold and runs (its record was
    // not raised to the retry that was never stored): the handler's second
    // run succeeds, and no attempt 2 ever exists.
    assert_eq!(seen.runs, vec![1, 1], "attempt 1 ran, was held, ran again and succeeded");
    let gap = seen.gap.expect("two runs");
    assert!(
        gap >= PAUSE * 2 + HOLD,
        "attempt 1 came again {gap:?} after it ran: after two pauses and the hold"
    );
    assert_eq!(seen.stats.count(JobOutcome::Held), 1, "held once");
    assert_eq!(seen.stats.count(JobOutcome::Retried), 0, "no retry was stored");
    assert_eq!(seen.stats.count(JobOutcome::Superseded), 0, "the held attempt was not dropped");
    assert_eq!(seen.stats.count(JobOutcome::Succeeded), 1, "completed once");
    assert_eq!(seen.stats.count(JobOutcome::DeadLettered), 0);
    assert_eq!(seen.dead, 0, "nothing dead-lettered");
    assert_eq!(seen.stats.executions(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_retry_whose_publish_failed_is_not_published_again_and_its_attempt_comes_again() {
    let Some(url) = nats_url() else { return };
    let seen = run_case(&url, "republish_keyless", None, 1, 0).await;
    report("a keyless retry's failed publish", &seen);
    assert_eq!(seen.publishes_when_held, Some(1), "held after the one failed publish");
    assert_eq!(seen.publishes, vec![None], "one publish, without an id, never again");
    assert_eq!(seen.runs, vec![1, 1], "attempt 1 ran, was held, ran again and succeeded");
    let gap = seen.gap.expect("two runs");
    assert!(gap >= HOLD, "attempt 1 came again {gap:?} after it ran: after the hold");
    assert_eq!(seen.stats.count(JobOutcome::Held), 1, "held once");
    assert_eq!(seen.stats.count(JobOutcome::Retried), 0);
    assert_eq!(seen.stats.count(JobOutcome::Succeeded), 1, "completed once");
    assert_eq!(seen.stats.count(JobOutcome::DeadLettered), 0);
    assert_eq!(seen.dead, 0, "nothing dead-lettered");
    assert_eq!(seen.stats.executions(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_retry_stored_before_its_answer_was_lost_is_one_retry_and_runs_once() {
    let Some(url) = nats_url() else { return };
    // The case republishing is for: the broker stored the retry and its
    // answer was lost. The republish is a duplicate, which says it is stored.
    let seen = run_case(&url, "republish_lost_answer", Some("order-3"), 0, 1).await;
    report("a lost answer", &seen);
    let retry = Some("order-3#r0a2".to_owned());
    assert_eq!(seen.publishes, vec![retry.clone(), retry], "the retry published, then once again");
    assert_eq!(seen.duplicates, 1, "the republish was the broker's duplicate: one retry stored");
    assert_eq!(seen.runs, vec![1, 2], "attempt 1 failed, its retry ran once; attempt 1 never again");
    assert_eq!(seen.publishes_when_held, None, "never held");
    assert_eq!(seen.stats.count(JobOutcome::Retried), 1);
    assert_eq!(seen.stats.count(JobOutcome::Held), 0);
    assert_eq!(seen.stats.count(JobOutcome::Succeeded), 1, "completed once");
    assert_eq!(seen.stats.count(JobOutcome::DeadLettered), 0);
    assert_eq!(seen.dead, 0, "nothing dead-lettered");
    assert_eq!(seen.stats.executions(), 2);
}

/// A retry whose publish outlasts the job key's claim (the broker slow to
/// answer, as while it restarts; a claim lasts one AckWait here): the claim is
/// renewed while the retry is stored and recorded, as while the handler ran.
/// The failed attempt, delivered again meanwhile (no ack within its AckWait),
/// finds the claim held, waits, and is dropped once the retry is recorded
/// (superseded, or deduplicated if the retry completed the job first): it does
/// not run again beside its retry. (The restarts test found
/// this edge: the claim ran out during the publish, and the attempt ran twice.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_whose_publish_outlasts_the_claim_keeps_it_and_its_attempt_runs_once() {
    let Some(url) = nats_url() else { return };
    let ack_wait = Duration::from_secs(1);
    let seen =
        run_case_with(&url, "republish_slow", Some("order-slow"), (0, 0), ack_wait, ack_wait * 3).await;
    report("a publish slower than the claim", &seen);
    assert_eq!(seen.runs, vec![1, 2], "attempt 1 failed once, its retry ran once");
    assert!(
        seen.stats.count(JobOutcome::ClaimedElsewhere) >= 1,
        "attempt 1 came again while its retry was being stored, and found the claim held"
    );
    // Then it was dropped without running: superseded if it came back before
    // its retry completed the key, deduplicated if after (either, by timing).
    assert_eq!(
        seen.stats.count(JobOutcome::Superseded) + seen.stats.count(JobOutcome::Deduplicated),
        1,
        "attempt 1's redelivery dropped once, not run"
    );
    assert_eq!(seen.stats.executions(), 2);
}
