//! The job key travels with the handler's calls (issue 52), on a real
//! nats-server (`RETRYSCOPE_NATS_URL`), a real Redis (`RETRYSCOPE_REDIS_URL`)
//! and a real axum service on 127.0.0.1: a keyed POST a job's handler makes
//! through either client carries `"<job key>/<n>"`, the same keys on every
//! run of the job; a worker process SIGKILLed after its POST was answered
//! leaves the effect done once, the re-run's POST replayed from Redis by
//! `IdempotencyLayer`; and without `job_keyed_calls` the same crash runs the
//! effect twice. Real time: claims, AckWait and the kill are real.

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use bytes::Bytes;
use retryscope::{ErrorType, Transient, Verdict};
use retryscope_conformance::services::{fresh_name, nats_url, redis_url};
use retryscope_idempotency::{IdempotencyLayer, IdempotencyStore, RedisStore};
use retryscope_jobs::nats::{NatsQueue, NatsQueueConfig};
use retryscope_jobs::{Job, JobOutcome, Producer, Worker, WorkerStats};
use retryscope_reqwest::RetryMiddleware;
use retryscope_test_support::quick_policy;
use retryscope_tower::KeyChoice;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::{BOTH, Call, Integration, Setup};
use retryscope_reqwest::prelude::*;

/// The test binary runs [`a_worker_process_runs_here_when_a_crash_test_starts_one`]
/// as a worker of its own when this names the queue's stream.
const CHILD: &str = "RETRYSCOPE_JOB_KEYED_CALLS_CHILD";
/// What the worker process prints once its POST was answered.
const POSTED: &str = "the charge was answered";
/// The crash tests' AckWait: claims are renewed every 500 ms and last 1.5 s.
const ACK_WAIT: Duration = Duration::from_millis(1500);
/// A third of the AckWait: how often a running job's claim is renewed.
const RENEWAL: Duration = Duration::from_millis(500);

#[derive(Debug)]
enum TestError {
    /// The dependency failed for now: the job is retried.
    Busy,
    /// The call itself failed.
    Call(String),
}

impl std::fmt::Display for TestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TestError::Busy => f.write_str("busy (503)"),
            TestError::Call(error) => write!(f, "the call failed: {error}"),
        }
    }
}

impl Transient for TestError {
    fn verdict(&self) -> Verdict {
        match self {
            TestError::Busy => Verdict::retryable(ErrorType::Status(503)),
            TestError::Call(_) => Verdict::permanent(ErrorType::OTHER),
        }
    }
}

fn queue_config(stream: &str, subject: &str) -> NatsQueueConfig {
    NatsQueueConfig::new(stream, [subject.to_owned()], "workers")
        .ack_wait(ACK_WAIT)
        .dead_letters(format!("{stream}_DEAD"), format!("dead_{}", stream.to_lowercase()))
}

async fn open_queue(url: &str, stream: &str, subject: &str) -> NatsQueue {
    let client = async_nats::connect(url).await.expect("nats-server answers");
    NatsQueue::open(client, queue_config(stream, subject)).await.expect("the test's queue")
}

async fn redis_store(url: &str, prefix: &str) -> RedisStore {
    let client = redis::Client::open(url).expect("a valid Redis URL");
    RedisStore::connect(client).await.expect("redis-server answers").prefix(format!("{prefix}:"))
}

/// What the service saw: each request that reached its handler, as (path,
/// its idempotency key), and how many charges it made.
#[derive(Default)]
struct Seen {
    requests: Mutex<Vec<(String, Option<String>)>>,
    charges: AtomicU32,
}

impl Seen {
    fn record(&self, path: &str, headers: &HeaderMap) {
        let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
        self.requests.lock().expect("not poisoned").push((path.to_owned(), key));
    }

    fn keys(&self) -> Vec<(String, Option<String>)> {
        self.requests.lock().expect("not poisoned").clone()
    }
}

/// `POST /charge` (counts a charge), `POST /email`, `POST /audit` and
/// `GET /status`, behind `IdempotencyLayer` with `store` when there is one.
async fn service(store: Option<RedisStore>) -> (SocketAddr, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let route = |path: &'static str, seen: &Arc<Seen>| {
        let seen = Arc::clone(seen);
        move |headers: HeaderMap, _body: Bytes| async move {
            seen.record(path, &headers);
            if path == "/charge" {
                seen.charges.fetch_add(1, Ordering::SeqCst);
            }
            (StatusCode::CREATED, path)
        }
    };
    let router = Router::new()
        .route("/charge", post(route("/charge", &seen)))
        .route("/email", post(route("/email", &seen)))
        .route("/audit", post(route("/audit", &seen)))
        .route("/status", get(route("/status", &seen)));
    let router = match store {
        Some(store) => router.layer(IdempotencyLayer::new(store)),
        None => router,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, router).await.expect("the server runs") });
    (addr, seen)
}

/// A retryscope reqwest client as a user builds it: no `.idempotency_keys()`.
fn reqwest_client() -> reqwest_middleware::ClientWithMiddleware {
    let middleware = RetryMiddleware::builder(quick_policy()).no_telemetry().build();
    reqwest_middleware::ClientBuilder::new(reqwest::Client::builder().no_proxy().build().expect("a client"))
        .with(middleware)
        .build()
}

/// POSTs the charge; `Ok` once it was answered 2xx.
async fn charge(client: &reqwest_middleware::ClientWithMiddleware, url: &str) -> Result<(), TestError> {
    let response =
        client.post(url).body("amount=7").send().await.map_err(|e| TestError::Call(e.to_string()))?;
    match response.status().is_success() {
        true => Ok(()),
        false => Err(TestError::Call(response.status().to_string())),
    }
}

/// Not a test of its own: the worker process a crash test starts (this
/// binary again, with [`CHILD`] set) and kills. Its handler POSTs the charge,
/// says so once answered, and never returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_runs_here_when_a_crash_test_starts_one() {
    let Ok(stream) = std::env::var(CHILD) else { return };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("the crash test sets {name}"));
    let (url, redis_url, subject, prefix, charge_url) = (
        var("RETRYSCOPE_NATS_URL"),
        var("RETRYSCOPE_REDIS_URL"),
        var("CHILD_SUBJECT"),
        var("CHILD_PREFIX"),
        var("CHILD_CHARGE_URL"),
    );
    let keyed = var("CHILD_JOB_KEYED_CALLS") == "true";
    let client = reqwest_client();
    let handler = move |_job: Job| {
        let (client, charge_url) = (client.clone(), charge_url.clone());
        async move {
            charge(&client, &charge_url).await?;
            println!("{POSTED}");
            std::future::pending::<Result<(), TestError>>().await
        }
    };
    let worker = Worker::builder(open_queue(&url, &stream, &subject).await, quick_policy(), handler)
        .processed_keys(redis_store(&redis_url, &prefix).await)
        .job_keyed_calls(keyed)
        .fetch_wait(Duration::from_millis(100))
        .build()
        .expect("a valid worker");
    worker.run(std::future::pending()).await;
}

/// What one crash run measured.
struct Crash {
    charges: u32,
    kill_to_completion: Duration,
    keys: Vec<(String, Option<String>)>,
}

/// A worker process takes the job `order-1`, POSTs its charge through a
/// retryscope reqwest client to the service behind `IdempotencyLayer` (Redis),
/// and is SIGKILLed once the POST was answered, before its handler returns;
/// a second worker, here, runs the job again and completes it.
async fn crash(url: &str, redis_url: &str, job_keyed_calls: bool) -> Crash {
    let stream = fresh_name("KEYED_CRASH");
    let subject = format!("{}.charge", stream.to_lowercase());
    let prefix = fresh_name("test:conformance:keyed-crash");
    let queue = open_queue(url, &stream, &subject).await;
    let (addr, seen) = service(Some(redis_store(redis_url, &format!("{prefix}:http")).await)).await;
    let charge_url = format!("http://{addr}/charge");
    let (prefix_jobs, keyed) = (format!("{prefix}:jobs"), job_keyed_calls.to_string());
    let (mut child, posted) = retryscope_test_support::child::start(
        "a_worker_process_runs_here_when_a_crash_test_starts_one",
        [
            (CHILD, stream.as_str()),
            ("CHILD_SUBJECT", &subject),
            ("CHILD_PREFIX", &prefix_jobs),
            ("CHILD_CHARGE_URL", &charge_url),
            ("CHILD_JOB_KEYED_CALLS", &keyed),
            ("RETRYSCOPE_NATS_URL", url),
            ("RETRYSCOPE_REDIS_URL", redis_url),
        ],
        POSTED,
    );
    Producer::new(queue.clone()).enqueue(&subject, "order-1", "charge 7").await.expect("enqueued");

    // The second worker is up before the first dies, as in a fleet.
    let done_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handler = {
        let (client, done_at, charge_url) = (reqwest_client(), Arc::clone(&done_at), charge_url.clone());
        move |_job: Job| {
            let (client, done_at, charge_url) = (client.clone(), Arc::clone(&done_at), charge_url.clone());
            async move {
                charge(&client, &charge_url).await?;
                *done_at.lock().expect("not poisoned") = Some(Instant::now());
                Ok::<(), TestError>(())
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), posted)
        .await
        .expect("the worker process POSTed the charge")
        .expect("its stdout");
    let worker = Worker::builder(queue.clone(), quick_policy(), handler)
        .processed_keys(redis_store(redis_url, &prefix_jobs).await)
        .job_keyed_calls(job_keyed_calls)
        .fetch_wait(Duration::from_millis(100))
        .build()
        .expect("a valid worker");
    let (stats, killed) = run_worker(worker, async {
        // Killed a renewal after the answer: its claim was alive and renewed.
        tokio::time::sleep(RENEWAL).await;
        child.kill().expect("SIGKILL");
        let killed = Instant::now();
        let _ = child.wait();
        killed
    })
    .await;
    let done = done_at.lock().expect("not poisoned").expect("the handler returned");
    assert_eq!(stats.claims_taken_over(), 1, "the dead worker's claim was taken over");
    Crash {
        charges: seen.charges.load(Ordering::SeqCst),
        kill_to_completion: done.duration_since(killed),
        keys: seen.keys(),
    }
}

/// The headline: with job-keyed calls (the default), the crash leaves one
/// charge — the re-run's POST carries `"order-1/1"` again and is replayed
/// from Redis — and the job completes within AckWait plus one renewal period
/// of the kill. Before (`job_keyed_calls(false)`), the same crash charges twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_after_its_post_was_answered_leaves_the_effect_done_once() {
    let (Some(url), Some(redis_url)) = (nats_url(), redis_url()) else { return };
    let after = crash(&url, &redis_url, true).await;
    let before = crash(&url, &redis_url, false).await;
    println!(
        "job-keyed calls: {} charge(s), kill to completion {:?}; without (job_keyed_calls(false)): {} charge(s), kill to completion {:?} (AckWait {ACK_WAIT:?}, renewal {RENEWAL:?})",
        after.charges, after.kill_to_completion, before.charges, before.kill_to_completion
    );
    assert_eq!(after.charges, 1, "the re-run's POST is replayed: {:?}", after.keys);
    assert_eq!(after.keys, [("/charge".to_owned(), Some(r#""order-1/1""#.to_owned()))]);
    assert_eq!(before.charges, 2, "without the job's key, each run charges: {:?}", before.keys);
    assert!(before.keys.iter().all(|(_, key)| key.is_none()), "{:?}", before.keys);
    // A fetch wait and a few store round trips of slack on top of the bound.
    let bound = ACK_WAIT + RENEWAL + Duration::from_secs(1);
    for took in [after.kill_to_completion, before.kill_to_completion] {
        assert!(took <= bound, "kill to completion {took:?}, over AckWait + one renewal period");
    }
}

/// Runs the job `key` on a worker of its own with `handler`, until it
/// succeeded, and returns the worker's stats.
async fn run_job<F, Fut>(url: &str, key: &str, handler: F) -> Arc<WorkerStats>
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), TestError>> + Send + 'static,
{
    let stream = fresh_name("KEYED_CALLS");
    let subject = format!("{}.run", stream.to_lowercase());
    let queue = open_queue(url, &stream, &subject).await;
    let worker = Worker::builder(queue.clone(), quick_policy(), handler)
        .fetch_wait(Duration::from_millis(100))
        .build()
        .expect("a valid worker");
    let enqueued = async { Producer::new(queue).enqueue(&subject, key, "job").await.expect("enqueued") };
    run_worker(worker, enqueued).await.0
}

/// Runs `worker` on a task of its own, does `meanwhile`, waits until the
/// worker has completed a job, and stops it.
async fn run_worker<S: IdempotencyStore, T>(
    worker: Worker<NatsQueue, TestError, S>,
    meanwhile: impl Future<Output = T>,
) -> (Arc<WorkerStats>, T) {
    let stats = worker.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    let got = meanwhile.await;
    retryscope_conformance::checks::jobs_reached(&stats, JobOutcome::Succeeded, 1, Duration::from_secs(30))
        .await;
    let _ = stop.send(());
    running.await.expect("the worker stops");
    (stats, got)
}

/// Sends `call` through `integration`'s client, as built without `.idempotency_keys()`.
async fn send(integration: Integration, call: Call) -> Result<(), TestError> {
    let client = integration.client(Setup::new(quick_policy()));
    match client.send(call).await {
        Ok(response) if response.status < 300 => Ok(()),
        Ok(response) => Err(TestError::Call(response.status.to_string())),
        Err(failure) => Err(TestError::Call(failure.chain.join(": "))),
    }
}

/// Two POSTs, then a transient failure the policy retries: the re-run sends
/// the same two keys, for reqwest's client and for tower's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_making_two_posts_sends_two_distinct_keys_and_the_same_two_on_its_re_run() {
    let Some(url) = nats_url() else { return };
    for integration in BOTH {
        let (addr, seen) = service(None).await;
        let stats = run_job(&url, "order-7781", move |job: Job| async move {
            send(integration, Call::post(format!("http://{addr}/charge")).body("amount=7")).await?;
            send(integration, Call::post(format!("http://{addr}/email")).body("paid")).await?;
            if job.attempt == 1 { Err(TestError::Busy) } else { Ok(()) }
        })
        .await;
        assert_eq!(stats.executions(), 2, "{integration:?}");
        let key = |path: &str, n: u32| (path.to_owned(), Some(format!("\"order-7781/{n}\"")));
        let run = [key("/charge", 1), key("/email", 2)];
        assert_eq!(seen.keys(), [run.clone(), run].concat(), "{integration:?}");
    }
}

/// A caller's key, a `KeyChoice` and a suppression each win over the job's,
/// a GET gets none, and none of them takes an ordinal: the plain POST after
/// them is the handler's call 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_own_key_wins_over_the_jobs_and_a_get_gets_none() {
    let Some(url) = nats_url() else { return };
    for integration in BOTH {
        let (addr, seen) = service(None).await;
        run_job(&url, "order-42", move |_job: Job| async move {
            let at = |path: &str| format!("http://{addr}{path}");
            send(integration, Call::post(at("/audit")).header("idempotency-key", r#""mine""#).body("a"))
                .await?;
            let choice = KeyChoice::new("chosen").map_err(|e| TestError::Call(e.to_string()))?;
            send(integration, Call::post(at("/audit")).extension(choice).body("b")).await?;
            send(integration, Call::post(at("/audit")).extension(KeyChoice::suppress()).body("c")).await?;
            send(integration, Call::get(at("/status"))).await?;
            send(integration, Call::post(at("/charge")).body("amount=7")).await
        })
        .await;
        let key = |path: &str, key: Option<&str>| (path.to_owned(), key.map(str::to_owned));
        assert_eq!(
            seen.keys(),
            [
                key("/audit", Some(r#""mine""#)),
                key("/audit", Some(r#""chosen""#)),
                key("/audit", None),
                key("/status", None),
                key("/charge", Some(r#""order-42/1""#)),
            ],
            "{integration:?}"
        );
    }
}
