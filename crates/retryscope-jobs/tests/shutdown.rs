//! A worker's shutdown against a real nats-server: a job still running when
//! the grace period ends is put back at once, not left for AckWait.

mod support;

use retryscope_jobs::{Job, JobOutcome, Producer, Worker};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use support::{TestError, fast_policy, nats_url, queue, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_still_running_after_the_grace_period_is_put_back_at_once() {
    let Some(url) = nats_url() else { return };
    let policy = fast_policy(3);
    // AckWait 30 s: a job left unsettled would come back only after it.
    let q = queue(&url, "shutdown", Duration::from_secs(30)).await;
    let slow_calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&slow_calls);
    let slow = Worker::builder(q.queue.clone(), policy, move |_job: Job| {
        seen.fetch_add(1, Ordering::SeqCst);
        async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<(), TestError>(())
        }
    })
    .grace(Duration::from_millis(200))
    .build()
    .expect("valid settings");
    let slow_stats = slow.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(slow.run(async {
        let _ = stopped.await;
    }));
    Producer::new(q.queue.clone()).enqueue(&q.subject, "report-1", "x").await.expect("stored");
    assert!(wait_for(Duration::from_secs(5), || slow_calls.load(Ordering::SeqCst) == 1).await);
    let stopping = Instant::now();
    let _ = stop.send(());
    running.await.expect("the worker stops");
    assert!(stopping.elapsed() < Duration::from_secs(3), "stopped in {:?}", stopping.elapsed());
    assert_eq!(slow_stats.count(JobOutcome::Unsettled), 1, "the running job was abandoned");

    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    let next = Worker::builder(q.queue.clone(), policy, move |_job: Job| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { Ok::<(), TestError>(()) }
    })
    .build()
    .expect("valid settings");
    let stats = next.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let started = Instant::now();
    let running = tokio::spawn(next.run(async {
        let _ = stopped.await;
    }));
    let done = wait_for(Duration::from_secs(10), || stats.count(JobOutcome::Succeeded) == 1).await;
    let took = started.elapsed();
    let _ = stop.send(());
    running.await.expect("the worker stops");
    assert!(done, "the abandoned job was taken again");
    assert!(took < Duration::from_secs(10), "taken after {took:?}, well before AckWait (30 s)");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
