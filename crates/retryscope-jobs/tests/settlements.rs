//! Settlements the broker never hears of, on a real nats-server.
//!
//! A dead-lettered job whose `Term` was lost (to a restart): the broker
//! delivers its last attempt again once the AckWait runs out. A keyed job's
//! attempt record was raised past that attempt when its dead letter was
//! stored (docs/guide/jobs.md), so the redelivery is dropped: the handler ran
//! once and there is one letter. A keyless job has no record, and runs again
//! into a second letter, as the guide says it does.
//!
//! A progress ack that never returns (a reconnecting client whose command
//! queue is full): the handler and its claim's renewal go on beside it, so
//! the job completes and the broker's redelivery waits on the claim, then is
//! acked as done.

mod support;

use bytes::Bytes;
use retryscope_idempotency::MemoryStore;
use retryscope_jobs::{
    Broker, BrokerError, DeadLetterStore, Delivery, Job, JobOutcome, Outgoing, Producer, Published, Worker,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use support::{TestError, fast_policy, nats_url, queue, start, wait_for};

/// What goes wrong with a delivery's settlements.
#[derive(Clone, Copy)]
enum Fault {
    /// `Term` answers as if sent and never reaches the broker (counted).
    LoseTerms,
    /// A progress ack never returns.
    HangProgress,
}

/// The broker in front of `inner`, whose deliveries settle with `fault`.
#[derive(Clone)]
struct Faulty<B> {
    inner: B,
    fault: Fault,
    lost: Arc<AtomicU32>,
}

struct FaultyDelivery<D> {
    inner: D,
    fault: Fault,
    lost: Arc<AtomicU32>,
}

impl<D: Delivery> Delivery for FaultyDelivery<D> {
    fn subject(&self) -> &str {
        self.inner.subject()
    }

    fn payload(&self) -> &Bytes {
        self.inner.payload()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.inner.header(name)
    }

    fn message_id(&self) -> String {
        self.inner.message_id()
    }

    fn delivered(&self) -> u64 {
        self.inner.delivered()
    }

    async fn ack(&self) -> Result<(), BrokerError> {
        self.inner.ack().await
    }

    async fn nak(&self, delay: Duration) -> Result<(), BrokerError> {
        self.inner.nak(delay).await
    }

    async fn in_progress(&self) -> Result<(), BrokerError> {
        match self.fault {
            Fault::HangProgress => std::future::pending().await,
            Fault::LoseTerms => self.inner.in_progress().await,
        }
    }

    async fn term(&self) -> Result<(), BrokerError> {
        match self.fault {
            Fault::LoseTerms => {
                self.lost.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            Fault::HangProgress => self.inner.term().await,
        }
    }
}

impl<B: Broker> Broker for Faulty<B> {
    type Delivery = FaultyDelivery<B::Delivery>;

    async fn fetch(&self, max: usize, wait: Duration) -> Result<Vec<Self::Delivery>, BrokerError> {
        let fetched = self.inner.fetch(max, wait).await?;
        let (fault, lost) = (self.fault, &self.lost);
        Ok(fetched.into_iter().map(|inner| FaultyDelivery { inner, fault, lost: Arc::clone(lost) }).collect())
    }

    async fn publish(&self, message: Outgoing) -> Result<Published, BrokerError> {
        self.inner.publish(message).await
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

support::dead_letters_of_inner!(Faulty);

/// What one case saw.
struct Seen {
    runs: u32,
    letters: u64,
    lost_terms: u32,
    stats: Arc<retryscope_jobs::WorkerStats>,
}

/// One job (`key`, or keyless) whose handler fails permanently, on a queue
/// with a 1-s AckWait whose `Term`s are lost; watched for three AckWaits
/// after its first dead letter, long enough for two redeliveries.
async fn run_case(url: &str, test: &str, key: Option<&str>) -> Seen {
    let ack_wait = Duration::from_secs(1);
    let q = queue(url, test, ack_wait).await;
    let broker = Faulty { inner: q.queue.clone(), fault: Fault::LoseTerms, lost: Arc::default() };
    let runs = Arc::new(AtomicU32::new(0));
    let handler = {
        let runs = Arc::clone(&runs);
        move |_: Job| {
            runs.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Err::<(), _>(TestError::Invalid))
        }
    };
    let worker = Worker::builder(broker.clone(), fast_policy(3), handler)
        .fetch_wait(Duration::from_millis(100))
        .processed_keys(MemoryStore::default())
        .build()
        .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    match key {
        Some(key) => {
            Producer::new(q.queue.clone()).enqueue(&q.subject, key, "x").await.expect("stored");
        }
        None => {
            let js = q.queue.context();
            js.publish(q.subject.clone(), "x".into()).await.expect("sent").await.expect("stored");
        }
    }
    let dead = wait_for(Duration::from_secs(10), || stats.count(JobOutcome::DeadLettered) == 1).await;
    assert!(dead, "the job was dead-lettered within 10 s");
    tokio::time::sleep(ack_wait * 3).await;
    running.stop().await;
    let letters = q.queue.dead_depth().await.expect("depth");
    Seen { runs: runs.load(Ordering::SeqCst), letters, lost_terms: broker.lost.load(Ordering::SeqCst), stats }
}

fn report(case: &str, seen: &Seen) {
    println!(
        "{case}: runs {}, dead letters {}, lost terms {}, dead-lettered {}, superseded {}, claimed elsewhere {}",
        seen.runs,
        seen.letters,
        seen.lost_terms,
        seen.stats.count(JobOutcome::DeadLettered),
        seen.stats.count(JobOutcome::Superseded),
        seen.stats.count(JobOutcome::ClaimedElsewhere),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_job_whose_term_was_lost_is_not_run_again_into_a_second_dead_letter() {
    let Some(url) = nats_url() else { return };
    let seen = run_case(&url, "lost_term_keyed", Some("refund-7")).await;
    report("keyed", &seen);
    assert_eq!(seen.runs, 1, "the handler ran once: a permanent failure is not retried");
    assert_eq!(seen.letters, 1, "one dead letter");
    assert_eq!(seen.stats.count(JobOutcome::DeadLettered), 1);
    assert!(seen.stats.count(JobOutcome::Superseded) >= 1, "the redelivery of the last attempt was dropped");
    assert_eq!(seen.lost_terms, 1, "only the dead-lettered delivery was terminated (and that Term lost)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_job_whose_term_was_lost_runs_again_as_the_guide_says() {
    let Some(url) = nats_url() else { return };
    let seen = run_case(&url, "lost_term_keyless", None).await;
    report("keyless", &seen);
    // Nothing identifies a keyless job's deliveries as one job: its last
    // attempt comes again after the AckWait and is dead-lettered again.
    assert!(seen.runs >= 2, "the redelivery ran: {} runs", seen.runs);
    assert!(seen.letters >= 2, "and was dead-lettered again: {} letters", seen.letters);
    assert_eq!(seen.stats.count(JobOutcome::Superseded), 0, "nothing to supersede it by");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_ack_that_never_returns_stalls_neither_the_handler_nor_its_claim() {
    let Some(url) = nats_url() else { return };
    // A 1-s AckWait and a handler that takes 2.5 s: no progress ack reaches
    // the broker, which delivers the job again after each AckWait; the claim,
    // renewed beside the hung ack, keeps those deliveries waiting.
    let ack_wait = Duration::from_secs(1);
    let q = queue(&url, "hung_progress", ack_wait).await;
    let broker = Faulty { inner: q.queue.clone(), fault: Fault::HangProgress, lost: Arc::default() };
    let runs = Arc::new(AtomicU32::new(0));
    let handler = {
        let runs = Arc::clone(&runs);
        move |_: Job| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2_500)).await;
                Ok::<(), TestError>(())
            }
        }
    };
    let worker = Worker::builder(broker, fast_policy(3), handler)
        .fetch_wait(Duration::from_millis(100))
        .processed_keys(MemoryStore::default())
        .build()
        .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    Producer::new(q.queue.clone()).enqueue(&q.subject, "slow-1", "x").await.expect("stored");
    let done = wait_for(Duration::from_secs(10), || stats.count(JobOutcome::Succeeded) == 1).await;
    // The redelivery that waited on the claim is acked as done.
    let settled = wait_for(Duration::from_secs(5), || stats.count(JobOutcome::Deduplicated) >= 1).await;
    // A worker stalled on the ack would not stop either: bounded, it fails.
    let stopped = tokio::time::timeout(Duration::from_secs(5), running.stop()).await.is_ok();
    println!(
        "hung progress acks: runs {}, succeeded {}, claimed elsewhere {}, deduplicated {}",
        runs.load(Ordering::SeqCst),
        stats.count(JobOutcome::Succeeded),
        stats.count(JobOutcome::ClaimedElsewhere),
        stats.count(JobOutcome::Deduplicated),
    );
    assert!(done, "the handler finished beside the hung ack");
    assert!(stats.count(JobOutcome::ClaimedElsewhere) >= 1, "the broker delivered it again meanwhile");
    assert!(settled, "and that delivery was acked as done once the job completed");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
    assert!(stopped, "the worker stopped within 5 s");
}
