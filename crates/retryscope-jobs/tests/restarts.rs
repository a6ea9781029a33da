//! nats-server stopped and restarted mid-run, ten times over, with every
//! fifth job failing once, the worker a separate OS process keyed in Redis:
//! every job executes exactly as often as scheduled — once, or twice for a
//! job that fails once. A failed attempt whose ack a restart lost comes again
//! after its retry was stored: it is dropped as `superseded`, not run.

mod support;

use retryscope::{Jitter, Policy};
use retryscope_jobs::nats::NatsQueue;
use retryscope_jobs::{Job, JobOutcome, Producer, Worker};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use support::own_nats::{OwnNats, ready};
use support::{TestError, TestQueue, nats_url, queue_config, redis_store, redis_url, unique, worker_process};

/// The test binary runs [`a_worker_process_runs_here_when_the_restarts_test_starts_one`]
/// as the worker when this names the queue's stream.
const CHILD: &str = "RETRYSCOPE_JOBS_RESTARTS_CHILD";
const ACK_WAIT: Duration = Duration::from_secs(1);
/// Longer than the AckWait: a failed attempt whose ack was lost is delivered
/// again while its retry still waits for its run-at, as with real backoffs.
const RETRY_DELAY: Duration = Duration::from_millis(1500);
const RESTARTS: usize = 10;
const JOBS_PER_ROUND: usize = 60;
/// With 8 at a time, a round's jobs take about 400 ms: the stop, 150 ms in,
/// comes while handlers run, retries are published and deliveries acked.
const HANDLER_TIME: Duration = Duration::from_millis(50);
const STOP_AFTER: Duration = Duration::from_millis(150);
/// How the worker process reports what it did, on its stdout, when stopped.
const STATS: &str = "worker stats:";

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(RETRY_DELAY)
        .max_delay(RETRY_DELAY)
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("a valid policy")
}

/// Every fifth job fails its first attempt.
fn fails_once(key: &str) -> bool {
    key.strip_prefix("j-").and_then(|n| n.parse::<usize>().ok()).is_some_and(|n| n % 5 == 0)
}

async fn redis(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).expect("a valid Redis URL");
    client.get_multiplexed_async_connection().await.expect("redis-server answers")
}

/// Not a test of its own: the worker process the restarts test starts (this
/// binary again, with [`CHILD`] set). Its handler counts each execution per
/// job key in Redis; it stops when the test sets `<prefix>:stop`, and prints
/// its counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_runs_here_when_the_restarts_test_starts_one() {
    let Ok(stream) = std::env::var(CHILD) else { return };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("the restarts test sets {name}"));
    let (url, redis_url, subject, prefix) =
        (var("RETRYSCOPE_NATS_URL"), var("RETRYSCOPE_REDIS_URL"), var("CHILD_SUBJECT"), var("CHILD_PREFIX"));
    let client = async_nats::ConnectOptions::new()
        .reconnect_delay_callback(|_| Duration::from_millis(100))
        .connect(&url)
        .await
        .expect("nats-server answers");
    let queue =
        NatsQueue::open(client, queue_config(&stream, &subject, ACK_WAIT)).await.expect("the test's queue");
    let connection = redis(&redis_url).await;
    let handler = {
        let (connection, prefix) = (connection.clone(), prefix.clone());
        move |job: Job| {
            let (mut connection, prefix) = (connection.clone(), prefix.clone());
            async move {
                let key = job.key.as_deref().unwrap_or_default().to_owned();
                let _: u32 = redis::cmd("HINCRBY")
                    .arg(format!("{prefix}:runs"))
                    .arg(&key)
                    .arg(1)
                    .query_async(&mut connection)
                    .await
                    .expect("HINCRBY");
                tokio::time::sleep(HANDLER_TIME).await;
                if job.attempt == 1 && fails_once(&key) { Err(TestError::Busy) } else { Ok(()) }
            }
        }
    };
    let worker = Worker::builder(queue, policy(), handler)
        .processed_keys(redis_store(&redis_url, &prefix).await)
        .concurrency(8)
        .fetch_wait(Duration::from_millis(100))
        .build()
        .expect("a valid worker");
    let stats = worker.stats();
    let mut polling = connection.clone();
    let stop = async move {
        loop {
            let stop: bool = redis::cmd("EXISTS")
                .arg(format!("{prefix}:stop"))
                .query_async(&mut polling)
                .await
                .unwrap_or(false);
            if stop {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    worker.run(stop).await;
    let count = |outcome| stats.count(outcome);
    println!(
        "{STATS} superseded={} unsettled={} held={} retried={} succeeded={} deduplicated={} claimed_elsewhere={} executions={}",
        count(JobOutcome::Superseded),
        count(JobOutcome::Unsettled),
        count(JobOutcome::Held),
        count(JobOutcome::Retried),
        count(JobOutcome::Succeeded),
        count(JobOutcome::Deduplicated),
        count(JobOutcome::ClaimedElsewhere),
        stats.executions(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_server_restarted_ten_times_mid_run_every_job_executes_exactly_as_often_as_scheduled() {
    // The shared server's variable says a nats-server is installed; this test runs its own.
    let (Some(_), Some(redis_url)) = (nats_url(), redis_url()) else { return };
    let began = Instant::now();
    let port = retryscope_test_support::net::closed_port().await;
    let dir = std::env::temp_dir().join(unique("retryscope-jobs-restarts"));
    let mut server = OwnNats::start(port, &dir);
    ready(port).await;
    let url = server.url();
    let client = async_nats::ConnectOptions::new()
        .reconnect_delay_callback(|_| Duration::from_millis(100))
        .connect(&url)
        .await
        .expect("connects");
    let stream = unique("restarts").to_uppercase();
    let subject = format!("{}.work", stream.to_lowercase());
    let queue =
        NatsQueue::open(client.clone(), queue_config(&stream, &subject, ACK_WAIT)).await.expect("streams");
    let q = TestQueue { queue: queue.clone(), client, subject: subject.clone(), stream };
    let prefix = unique("restarts");
    let test = "a_worker_process_runs_here_when_the_restarts_test_starts_one";
    let child = worker_process(test, CHILD, &q, &prefix, &url, &redis_url)
        .spawn()
        .expect("the worker process starts");

    let producer = Producer::new(queue);
    let mut keys = Vec::new();
    for round in 0..RESTARTS {
        for i in 0..JOBS_PER_ROUND {
            let key = format!("j-{}", round * JOBS_PER_ROUND + i);
            // The client may still be reconnecting after the last restart;
            // the key is the publish's de-duplication id, so a retry is safe.
            let enqueued = Instant::now();
            while let Err(error) = producer.enqueue(&subject, &key, "x").await {
                assert!(enqueued.elapsed() < Duration::from_secs(10), "{key} not enqueued: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            keys.push(key);
        }
        // Mid-run: the round's jobs running, failing, their retries queued.
        tokio::time::sleep(STOP_AFTER).await;
        server.stop();
        tokio::time::sleep(Duration::from_millis(200)).await;
        server = OwnNats::start(port, &dir);
        ready(port).await;
    }

    let expected = |key: &str| if fails_once(key) { 2 } else { 1 };
    let mut connection = redis(&redis_url).await;
    let runs_key = format!("{prefix}:runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let runs: HashMap<String, u32> =
            redis::cmd("HGETALL").arg(&runs_key).query_async(&mut connection).await.expect("HGETALL");
        if keys.iter().all(|k| runs.get(k).copied().unwrap_or(0) >= expected(k)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // An old attempt whose ack the last restart lost comes again within an
    // AckWait, and a retry at its run-at: both by now.
    tokio::time::sleep(ACK_WAIT + RETRY_DELAY + Duration::from_millis(500)).await;
    let runs: HashMap<String, u32> =
        redis::cmd("HGETALL").arg(&runs_key).query_async(&mut connection).await.expect("HGETALL");
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}:stop"))
        .arg(1)
        .query_async(&mut connection)
        .await
        .expect("SET");
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("no panic")
        .expect("the worker process stops");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line =
        stdout.lines().find_map(|l| l.strip_prefix(STATS)).expect("the worker process printed its stats");
    let stat = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|pair| pair.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {line:?}"))
    };

    let failing = keys.iter().filter(|k| fails_once(k)).count();
    let wrong: Vec<(String, u32, u32)> = keys
        .iter()
        .filter_map(|k| {
            let ran = runs.get(k).copied().unwrap_or(0);
            (ran != expected(k)).then(|| (k.clone(), ran, expected(k)))
        })
        .collect();
    let total: u64 = runs.values().map(|&n| u64::from(n)).sum();
    println!(
        "restarts: {} jobs ({failing} failing once) over {RESTARTS} restarts in {:?}; executions {total}; worker:{line}; wrong (key, ran, scheduled): {wrong:?}",
        keys.len(),
        began.elapsed()
    );
    assert!(wrong.is_empty(), "jobs executed other than as scheduled (key, ran, scheduled): {wrong:?}");
    assert_eq!(total, (keys.len() + failing) as u64);
    // The handler's count in Redis and the worker's own agree.
    assert_eq!(stat("executions"), total);
    // A superseded delivery is an attempt delivered again after its retry
    // was stored, its ack lost to a restart (confirmed or not: a restart can
    // lose a confirmed ack too): only an attempt that was retried has one.
    assert!(stat("superseded") <= stat("retried"), "{line}");
    // Each failing job's first attempt was retried, or its settle failed and it came again.
    assert!(stat("retried") + stat("unsettled") + stat("held") >= failing as u64, "{line}");
    // Each job's last attempt succeeded, or its ack failed after it did.
    assert!(stat("succeeded") <= keys.len() as u64, "{line}");
    assert!(stat("succeeded") + stat("unsettled") >= keys.len() as u64, "{line}");
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
