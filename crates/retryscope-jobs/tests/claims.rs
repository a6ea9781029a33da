//! Job key claims that live by heartbeat, on a real nats-server and Redis:
//! a worker process SIGKILLed in the middle of a handler has its job run by
//! another worker within AckWait plus one renewal period, and a handler
//! slower than its claim keeps it (renewed) and runs once, while the job's
//! duplicate waits as `claimed_elsewhere`, not `held`. A claim taken over
//! after a crash is counted once.

mod support;

use retryscope_idempotency::RedisStore;
use retryscope_jobs::nats::{NatsQueue, NatsQueueConfig};
use retryscope_jobs::{Broker, Job, JobOutcome, Outgoing, Producer, Worker};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{TestError, fast_policy, nats_url, queue, start, unique, wait_for};

/// The test binary runs [`a_worker_process_runs_here_when_a_crash_test_starts_one`]
/// as a worker of its own when this names the queue's stream.
const CHILD: &str = "RETRYSCOPE_JOBS_CLAIMS_CHILD";
/// What the worker process prints once its handler's effect is done.
const EFFECT_DONE: &str = "effect done";
/// What the handlers count their effects under, in Redis (prefixed per test).
const EFFECTS: &str = "effects";
/// The crash test's AckWait: claims are renewed every 500 ms and last 1.5 s.
const CRASH_ACK_WAIT: Duration = Duration::from_millis(1500);
/// A third of the AckWait: how often a running job's claim is renewed.
const CRASH_RENEWAL: Duration = Duration::from_millis(500);
/// The attempt timeout of the report: a claim used to last it plus AckWait.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

fn redis_url() -> Option<String> {
    retryscope_test_support::external::required("RETRYSCOPE_REDIS_URL", "a redis-server 7+")
}

/// The same queue [`support::queue`] opened, from another process.
fn queue_config(stream: &str, subject: &str, ack_wait: Duration) -> NatsQueueConfig {
    NatsQueueConfig::new(stream, [subject.to_owned()], "workers")
        .ack_wait(ack_wait)
        .dead_letters(format!("{stream}_DEAD"), format!("dead_{}", stream.to_lowercase()))
}

async fn store(redis_url: &str, prefix: &str) -> RedisStore {
    let client = redis::Client::open(redis_url).expect("a valid Redis URL");
    RedisStore::connect(client).await.expect("redis-server answers").prefix(format!("{prefix}:"))
}

/// Counts one effect of the job in Redis, shared by every worker process.
async fn count_effect(redis_url: &str, prefix: &str) -> u32 {
    let client = redis::Client::open(redis_url).expect("a valid Redis URL");
    let mut connection = client.get_multiplexed_async_connection().await.expect("redis-server answers");
    redis::cmd("INCR").arg(format!("{prefix}:{EFFECTS}")).query_async(&mut connection).await.expect("INCR")
}

async fn effects(redis_url: &str, prefix: &str) -> u32 {
    let client = redis::Client::open(redis_url).expect("a valid Redis URL");
    let mut connection = client.get_multiplexed_async_connection().await.expect("redis-server answers");
    let count: Option<u32> =
        redis::cmd("GET").arg(format!("{prefix}:{EFFECTS}")).query_async(&mut connection).await.expect("GET");
    count.unwrap_or(0)
}

/// Not a test of its own: the worker process the crash test starts (this
/// binary again, with [`CHILD`] set) and kills. Its handler makes the effect,
/// says so on stdout and never returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_runs_here_when_a_crash_test_starts_one() {
    let Ok(stream) = std::env::var(CHILD) else { return };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("the crash test sets {name}"));
    let (url, redis_url, subject, prefix) =
        (var("RETRYSCOPE_NATS_URL"), var("RETRYSCOPE_REDIS_URL"), var("CHILD_SUBJECT"), var("CHILD_PREFIX"));
    let client = async_nats::connect(&url).await.expect("nats-server answers");
    let queue = NatsQueue::open(client, queue_config(&stream, &subject, CRASH_ACK_WAIT))
        .await
        .expect("the test's queue");
    let store = store(&redis_url, &prefix).await;
    let handler = move |_job: Job| {
        let (redis_url, prefix) = (redis_url.clone(), prefix.clone());
        async move {
            count_effect(&redis_url, &prefix).await;
            println!("{EFFECT_DONE}");
            std::future::pending::<Result<(), TestError>>().await
        }
    };
    let worker = Worker::builder(queue, fast_policy(3), handler)
        .processed_keys(store)
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .fetch_wait(Duration::from_millis(100))
        .build()
        .expect("a valid worker");
    worker.run(std::future::pending()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_handler_has_its_job_run_by_another_within_ack_wait_and_one_renewal() {
    let (Some(url), Some(redis_url)) = (nats_url(), redis_url()) else { return };
    let q = queue(&url, "crash", CRASH_ACK_WAIT).await;
    let prefix = unique("crash");
    let (mut child, effect_done) = retryscope_test_support::child::start(
        "a_worker_process_runs_here_when_a_crash_test_starts_one",
        [
            (CHILD, q.stream.as_str()),
            ("CHILD_SUBJECT", &q.subject),
            ("CHILD_PREFIX", &prefix),
            ("RETRYSCOPE_NATS_URL", &url),
            ("RETRYSCOPE_REDIS_URL", &redis_url),
        ],
        EFFECT_DONE,
    );
    Producer::new(q.queue.clone()).enqueue(&q.subject, "order-1", "pay 7").await.expect("enqueued");
    tokio::time::timeout(Duration::from_secs(30), effect_done)
        .await
        .expect("the worker process ran the handler")
        .expect("its stdout");

    // The second worker is up before the first dies, as in a fleet.
    let done_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handler = {
        let (redis_url, prefix, done_at) = (redis_url.clone(), prefix.clone(), Arc::clone(&done_at));
        move |_job: Job| {
            let (redis_url, prefix, done_at) = (redis_url.clone(), prefix.clone(), Arc::clone(&done_at));
            async move {
                count_effect(&redis_url, &prefix).await;
                *done_at.lock().expect("not poisoned") = Some(Instant::now());
                Ok::<(), TestError>(())
            }
        }
    };
    let worker = Worker::builder(q.queue.clone(), fast_policy(3), handler)
        .processed_keys(store(&redis_url, &prefix).await)
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .fetch_wait(Duration::from_millis(100))
        .build()
        .expect("a valid worker");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));

    // Killed two renewals into the handler: a claim kept alive by heartbeat
    // still runs out within AckWait of its last renewal.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    child.kill().expect("SIGKILL");
    let killed = Instant::now();
    let _ = child.wait();
    assert!(
        wait_for(Duration::from_secs(30), || stats.count(JobOutcome::Succeeded) == 1).await,
        "the other worker completes the job"
    );
    let done = done_at.lock().expect("not poisoned").expect("the handler returned");
    let took = done.duration_since(killed);
    println!(
        "kill to completion: {took:?} (AckWait {CRASH_ACK_WAIT:?}, renewal {CRASH_RENEWAL:?}, attempt timeout {ATTEMPT_TIMEOUT:?})"
    );
    running.stop().await;
    // Interrupted after its effect, the handler ran again: once in each process.
    assert_eq!(effects(&redis_url, &prefix).await, 2);
    assert_eq!(stats.executions(), 1);
    assert_eq!(stats.count(JobOutcome::Held), 0, "a crashed worker is not the dependency's hold");
    assert_eq!(stats.claims_taken_over(), 1, "the dead claim is counted once, by the worker that took it");
    // One fetch wait and a store round trip of slack on top of the bound.
    let bound = CRASH_ACK_WAIT + CRASH_RENEWAL + Duration::from_millis(500);
    assert!(took <= bound, "kill to completion {took:?}, over AckWait + one renewal period");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_slower_than_its_claim_is_renewed_and_runs_once_while_its_duplicate_waits_claimed_elsewhere()
 {
    let (Some(url), Some(redis_url)) = (nats_url(), redis_url()) else { return };
    // Claims renewed every 200 ms, lasting 600 ms; the handler takes 2 s.
    let ack_wait = Duration::from_millis(600);
    let q = queue(&url, "slow", ack_wait).await;
    let prefix = unique("slow");
    let runs = Arc::new(AtomicU32::new(0));
    let worker = |runs: Arc<AtomicU32>, store: RedisStore| {
        let handler = move |_job: Job| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(2)).await;
                Ok::<(), TestError>(())
            }
        };
        Worker::builder(q.queue.clone(), fast_policy(3), handler)
            .processed_keys(store)
            .concurrency(1)
            .fetch_wait(Duration::from_millis(100))
            .build()
            .expect("a valid worker")
    };
    let first = worker(Arc::clone(&runs), store(&redis_url, &prefix).await);
    let first_stats = first.stats();
    let first = start(|stopped| first.run(stopped));
    Producer::new(q.queue.clone()).enqueue(&q.subject, "order-slow", "ship 3").await.expect("enqueued");
    assert!(wait_for(Duration::from_secs(10), || runs.load(Ordering::SeqCst) == 1).await);

    // The same job again (a producer's second send past the de-duplication
    // window), to a second worker while the first runs it.
    let second = worker(Arc::clone(&runs), store(&redis_url, &prefix).await);
    let second_stats = second.stats();
    let second = start(|stopped| second.run(stopped));
    let duplicate = Outgoing {
        subject: q.subject.clone(),
        payload: "ship 3".into(),
        headers: vec![(retryscope_jobs::meta::KEY_HEADER.to_owned(), "order-slow".to_owned())],
        dedup_id: None,
    };
    q.queue.publish(duplicate).await.expect("the duplicate is stored");
    assert!(
        wait_for(Duration::from_secs(15), || {
            let acked =
                first_stats.count(JobOutcome::Deduplicated) + second_stats.count(JobOutcome::Deduplicated);
            first_stats.count(JobOutcome::Succeeded) == 1 && acked >= 1
        })
        .await,
        "the first worker completes the job and a worker acks its duplicate: first {:?}, second {:?}",
        JobOutcome::ALL.map(|o| (o.as_str(), first_stats.count(o))),
        JobOutcome::ALL.map(|o| (o.as_str(), second_stats.count(o))),
    );
    first.stop().await;
    second.stop().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "renewed, the claim was never taken over");
    assert!(second_stats.count(JobOutcome::ClaimedElsewhere) >= 1);
    assert_eq!(first_stats.count(JobOutcome::Held) + second_stats.count(JobOutcome::Held), 0);
    assert_eq!(second_stats.executions(), 0);
    assert_eq!(first_stats.claims_taken_over() + second_stats.claims_taken_over(), 0);
}
