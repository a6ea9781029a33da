//! A job's retry under the dependency's retry budget, against a real
//! nats-server: the engine admits each redelivery of a failed job as the
//! retry it is, so the budget charges it as one, and a budget with nothing
//! left holds it — put back, not run, not counted as an attempt — until it
//! has. No job runs twice, none is lost, none reaches the dead letters.

mod support;

use retryscope::RetryBudget;
use retryscope::dependency::Dependencies;
use retryscope_jobs::{DeadLetterStore, JobOutcome, Producer, Worker};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{TestError, fast_policy, nats_url, queue, start, wait_for};

/// Jobs, each failing once then succeeding.
const JOBS: u32 = 10;
/// The budget's floor: retries a second for the whole dependency.
const RETRIES_PER_SECOND: u32 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_holds_a_jobs_retry_and_runs_it_once_when_it_has_one() {
    let Some(url) = nats_url() else { return };
    let q = queue(&url, "budget", Duration::from_secs(5)).await;
    // No share of requests: only the floor's two retries a second.
    let guards = Dependencies::builder()
        .budget(|| {
            RetryBudget::builder()
                .ratio(0.0)
                .min_per_second(RETRIES_PER_SECOND)
                .window(Duration::from_secs(1))
                .build()
                .expect("valid budget")
        })
        .build();
    let failed: Arc<Mutex<HashSet<String>>> = Arc::default();
    let calls = Arc::new(AtomicU32::new(0));
    let (seen, count) = (Arc::clone(&failed), Arc::clone(&calls));
    let worker = Worker::builder(q.queue.clone(), fast_policy(3), move |job: retryscope_jobs::Job| {
        count.fetch_add(1, Ordering::SeqCst);
        let payload = String::from_utf8_lossy(&job.payload).into_owned();
        let first = seen.lock().expect("not poisoned").insert(payload);
        async move { if first { Err(TestError::Busy) } else { Ok(()) } }
    })
    .guards(guards.get("inventory"))
    .hold(Duration::from_millis(100))
    .concurrency(8)
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let started = Instant::now();
    let running = start(|stopped| worker.run(stopped));
    let producer = Producer::new(q.queue.clone());
    for n in 0..JOBS {
        producer.enqueue(&q.subject, &format!("b-{n}"), format!("payload-{n}")).await.expect("stored");
    }
    let all = wait_for(Duration::from_secs(20), || stats.count(JobOutcome::Succeeded) == JOBS as u64).await;
    let took = started.elapsed();
    running.stop().await;
    println!(
        "{JOBS} jobs failing once under {RETRIES_PER_SECOND} retries/s: succeeded {} in {took:?}, held {}, retried {}, dead-lettered {}, handler calls {}",
        stats.count(JobOutcome::Succeeded),
        stats.count(JobOutcome::Held),
        stats.count(JobOutcome::Retried),
        stats.count(JobOutcome::DeadLettered),
        calls.load(Ordering::SeqCst)
    );
    assert!(all, "every job completes once the budget has retries");
    assert_eq!(calls.load(Ordering::SeqCst), 2 * JOBS, "each job ran once, then its retry once");
    assert!(stats.count(JobOutcome::Held) > 0, "the budget held retries it had no token for");
    assert_eq!(stats.count(JobOutcome::DeadLettered), 0, "a hold is not an attempt");
    assert_eq!(q.queue.dead_depth().await.expect("depth"), 0);
    // Ten retries at two a second (the first two free at once) take about four seconds.
    assert!(took >= Duration::from_secs(3), "the retries went faster than the budget allows: {took:?}");
}
