//! A nats-server restart in the middle of a run, on a server of the test's
//! own (the `nats-server` CI installs, on a free port, with its own store):
//! no job is lost and none runs twice.

mod support;

use retryscope_idempotency::MemoryStore;
use retryscope_jobs::nats::{NatsQueue, NatsQueueConfig};
use retryscope_jobs::{Job, JobOutcome, Producer, Worker};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::own_nats::{OwnNats, ready};
use support::{TestError, fast_policy, nats_url, start, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_server_restart_mid_run_loses_no_job_and_runs_none_twice() {
    // The shared server's variable says a nats-server is installed; this test runs its own.
    if nats_url().is_none() {
        return;
    }
    let port = retryscope_test_support::net::closed_port().await;
    let store = std::env::temp_dir().join(support::unique("retryscope-jobs-restart"));
    let mut server = OwnNats::start(port, &store);
    ready(port).await;
    let url = format!("nats://127.0.0.1:{port}");
    let client = async_nats::ConnectOptions::new()
        .reconnect_delay_callback(|_| Duration::from_millis(100))
        .connect(&url)
        .await
        .expect("connects");
    let policy = fast_policy(8);
    let queue = NatsQueue::open(
        client,
        NatsQueueConfig::new("RESTART", ["restart.work"], "workers").ack_wait(Duration::from_secs(1)),
    )
    .await
    .expect("streams");
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let seen = Arc::clone(&runs);
    let worker = Worker::builder(queue.clone(), policy, move |job: Job| {
        let seen = Arc::clone(&seen);
        async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            *seen
                .lock()
                .expect("not poisoned")
                .entry(job.key.as_deref().unwrap_or("").to_owned())
                .or_default() += 1;
            Ok::<(), TestError>(())
        }
    })
    .concurrency(4)
    .processed_keys(MemoryStore::default())
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    let producer = Producer::new(queue.clone());
    for n in 0..300 {
        producer.enqueue("restart.work", &format!("r-{n}"), "x").await.expect("stored");
    }
    assert!(wait_for(Duration::from_secs(10), || runs.lock().expect("not poisoned").len() >= 60).await);
    let done_before = runs.lock().expect("not poisoned").len();
    server.stop();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _server = OwnNats::start(server.port, &server.store);
    ready(port).await;
    let all = wait_for(Duration::from_secs(20), || runs.lock().expect("not poisoned").len() == 300).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await; // any redelivery would come by now
    running.stop().await;
    let runs = runs.lock().expect("not poisoned");
    println!(
        "restart: {done_before} done before the stop, {} after; unsettled {}, deduplicated {}",
        runs.len(),
        stats.count(JobOutcome::Unsettled),
        stats.count(JobOutcome::Deduplicated)
    );
    assert!(done_before < 300, "the restart came mid-run ({done_before} done)");
    assert!(all, "{} of 300 completed", runs.len());
    assert!(runs.values().all(|&n| n == 1), "no job ran twice");
    let _ = std::fs::remove_dir_all(&store);
}
