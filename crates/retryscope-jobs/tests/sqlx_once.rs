//! A job's database effect once across a worker crash, on a real nats-server,
//! Redis and PostgreSQL, the worker a separate OS process SIGKILLed in its
//! handler: with `retryscope_sqlx::ProcessedJobs` the effect and the job key
//! commit together, so the job run again by another worker finds the key and
//! ships nothing (one row), and a kill before COMMIT rolls both back (one row,
//! shipped by the re-run); without it, the re-run ships again (two rows).

mod support;

use retryscope::Policy;
use retryscope_idempotency::RedisStore;
use retryscope_jobs::nats::NatsQueue;
use retryscope_jobs::{Job, JobOutcome, Producer, Worker, WorkerStats};
use retryscope_sqlx::{Database, ProcessedJobs, Recorded};
use sqlx::{Executor, PgPool};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{
    CRASH_ACK_WAIT, CRASH_RENEWAL, TestError, fast_policy, nats_url, queue, queue_config, redis_store,
    redis_url, said_on_stdout, start, unique, wait_for, worker_process,
};

/// The test binary runs [`a_worker_process_runs_here_when_an_effect_test_starts_one`]
/// as a worker of its own when this names the queue's stream.
const CHILD: &str = "RETRYSCOPE_JOBS_SQLX_CHILD";
/// What the worker process prints once its handler's transaction committed.
const COMMITTED: &str = "effect committed";
/// What it prints when its transaction holds the effect and the key, uncommitted.
const UNCOMMITTED: &str = "effect not committed";
/// One fetch wait, a store round trip and the handler's transaction.
const MARGIN: Duration = Duration::from_millis(500);

/// How the handler makes its effect, one row in `shipments`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// Through the helper: the key recorded first, the row only on `Fresh`.
    Once,
    /// The row alone, as a handler without the helper does.
    Bare,
}

fn postgres_url() -> Option<String> {
    retryscope_test_support::external::required("RETRYSCOPE_POSTGRES_URL", "a PostgreSQL superuser's URL")
}

/// A fresh schema with `shipments` and the processed-jobs table; the URL whose
/// connections work in it.
async fn schema(url: &str, name: &str) -> String {
    let admin = PgPool::connect(url).await.expect("connect to RETRYSCOPE_POSTGRES_URL");
    let sql = format!(
        "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name};
         CREATE TABLE {name}.shipments (id serial PRIMARY KEY, job_key text NOT NULL)"
    );
    admin.execute(sql.as_str()).await.expect("the test's schema");
    ProcessedJobs::new(&format!("{name}.retryscope_processed_jobs"))
        .expect("a valid name")
        .ensure_table(&admin)
        .await
        .expect("the migration");
    admin.close().await;
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3D{name}")
}

async fn count(pool: &PgPool, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {table}");
    sqlx::query_scalar(&sql).fetch_one(pool).await.expect("the test's own query")
}

/// The job's effect in one transaction: with `Effect::Once`, the key recorded
/// first and the row shipped on `Fresh`. With `hang`, it says so on stdout and
/// never commits.
async fn ship(db: &Database, effect: Effect, key: &str, hang: bool) -> Result<Recorded, TestError> {
    let processed = ProcessedJobs::default();
    db.transaction(Policy::interactive())
        .operation("ship")
        .run(|tx| {
            let (processed, key) = (processed.clone(), key.to_owned());
            Box::pin(async move {
                let recorded = match effect {
                    Effect::Once => processed.record(tx, &key).await?,
                    Effect::Bare => Recorded::Fresh,
                };
                if recorded == Recorded::Fresh {
                    sqlx::query("INSERT INTO shipments (job_key) VALUES ($1)")
                        .bind(&key)
                        .execute(&mut **tx)
                        .await?;
                }
                if hang {
                    println!("{UNCOMMITTED}");
                    std::future::pending::<()>().await;
                }
                Ok(recorded)
            })
        })
        .await
        .map_err(|error| {
            eprintln!("the shipment failed: {error}");
            TestError::Busy
        })
}

async fn database(url: &str) -> Database {
    let pool = PgPool::connect(url).await.expect("connect to the test's schema");
    Database::builder(pool).no_telemetry().build()
}

/// A worker on `queue`, keyed in Redis under `prefix`, running `handler`.
async fn worker<H, Fut>(
    queue: NatsQueue,
    redis_url: &str,
    prefix: &str,
    handler: H,
) -> Worker<NatsQueue, TestError, RedisStore>
where
    H: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), TestError>> + Send + 'static,
{
    Worker::builder(queue, fast_policy(3), handler)
        .processed_keys(redis_store(redis_url, prefix).await)
        .attempt_timeout(Duration::from_secs(10))
        .fetch_wait(Duration::from_millis(100))
        .build()
        .expect("a valid worker")
}

/// Not a test of its own: the worker process an effect test starts (this
/// binary again, with [`CHILD`] set) and kills. Its handler ships, says so on
/// stdout (after COMMIT, or before it with `CHILD_HANG`) and never returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_runs_here_when_an_effect_test_starts_one() {
    let Ok(stream) = std::env::var(CHILD) else { return };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("the effect test sets {name}"));
    let (url, redis_url, postgres_url, subject, prefix) = (
        var("RETRYSCOPE_NATS_URL"),
        var("RETRYSCOPE_REDIS_URL"),
        var("CHILD_POSTGRES_URL"),
        var("CHILD_SUBJECT"),
        var("CHILD_PREFIX"),
    );
    let effect = if var("CHILD_EFFECT") == "once" { Effect::Once } else { Effect::Bare };
    let hang = std::env::var_os("CHILD_HANG").is_some();
    let client = async_nats::connect(&url).await.expect("nats-server answers");
    let queue = NatsQueue::open(client, queue_config(&stream, &subject, CRASH_ACK_WAIT))
        .await
        .expect("the test's queue");
    let db = database(&postgres_url).await;
    let handler = move |job: Job| {
        let db = db.clone();
        async move {
            // What it found is the parent's to check, on the second worker's run.
            let _found = ship(&db, effect, job.key.as_deref().unwrap_or_default(), hang).await?;
            println!("{COMMITTED}");
            std::future::pending::<Result<(), TestError>>().await
        }
    };
    worker(queue, &redis_url, &prefix, handler).await.run(std::future::pending()).await;
}

/// What one crash run measured.
struct Crash {
    shipments: i64,
    processed: i64,
    /// What the second worker's `record` found.
    second_found: Vec<Recorded>,
    /// From the SIGKILL to the second worker's handler returning.
    took: Duration,
    stats: Arc<WorkerStats>,
}

/// A worker process ships the job `effect`'s way and is SIGKILLed after its
/// COMMIT (or, with `hang`, before it); a second worker, up before the kill,
/// runs the job again the same way.
async fn crash(test: &str, effect: Effect, hang: bool) -> Option<Crash> {
    let (Some(url), Some(redis_url), Some(postgres_url)) = (nats_url(), redis_url(), postgres_url()) else {
        return None;
    };
    let name = unique(test);
    let postgres_url = schema(&postgres_url, &name).await;
    let q = queue(&url, test, CRASH_ACK_WAIT).await;
    let test = "a_worker_process_runs_here_when_an_effect_test_starts_one";
    let mut child = worker_process(test, CHILD, &q, &name, &url, &redis_url);
    child
        .env("CHILD_POSTGRES_URL", &postgres_url)
        .env("CHILD_EFFECT", if effect == Effect::Once { "once" } else { "bare" });
    if hang {
        child.env("CHILD_HANG", "1");
    }
    let mut child = child.spawn().expect("the worker process starts");
    let marker = said_on_stdout(&mut child, if hang { UNCOMMITTED } else { COMMITTED });
    Producer::new(q.queue.clone()).enqueue(&q.subject, "order-1", "ship 7").await.expect("enqueued");
    tokio::time::timeout(Duration::from_secs(30), marker)
        .await
        .expect("the worker process shipped")
        .expect("its stdout");

    // The second worker is up before the first dies, as in a fleet.
    let db = database(&postgres_url).await;
    let done_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let found: Arc<Mutex<Vec<Recorded>>> = Arc::default();
    let handler = {
        let (db, done_at, found) = (db.clone(), Arc::clone(&done_at), Arc::clone(&found));
        move |job: Job| {
            let (db, done_at, found) = (db.clone(), Arc::clone(&done_at), Arc::clone(&found));
            async move {
                let recorded = ship(&db, effect, job.key.as_deref().unwrap_or_default(), false).await?;
                found.lock().expect("not poisoned").push(recorded);
                *done_at.lock().expect("not poisoned") = Some(Instant::now());
                Ok(())
            }
        }
    };
    let worker = worker(q.queue.clone(), &redis_url, &name, handler).await;
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));

    // Killed two renewals into the handler, as in `claims.rs`.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    child.kill().expect("SIGKILL");
    let killed = Instant::now();
    let _ = child.wait();
    assert!(
        wait_for(Duration::from_secs(30), || stats.count(JobOutcome::Succeeded) == 1).await,
        "the other worker completes the job"
    );
    let done = done_at.lock().expect("not poisoned").expect("the handler returned");
    running.stop().await;
    let pool = db.pool();
    let processed = if effect == Effect::Once { count(pool, "retryscope_processed_jobs").await } else { 0 };
    let second_found = found.lock().expect("not poisoned").clone();
    Some(Crash {
        shipments: count(pool, "shipments").await,
        processed,
        second_found,
        took: done.duration_since(killed),
        stats,
    })
}

fn within_ack_wait_and_one_renewal(crash: &Crash, what: &str) {
    println!(
        "{what}: {} shipment(s), {} processed row(s), kill to completion {:?} (AckWait {CRASH_ACK_WAIT:?}, renewal {CRASH_RENEWAL:?})",
        crash.shipments, crash.processed, crash.took
    );
    assert_eq!(crash.stats.executions(), 1, "{what}: the second worker ran the job once");
    assert_eq!(crash.stats.claims_taken_over(), 1, "{what}: it took over the dead worker's claim");
    assert_eq!(crash.stats.count(JobOutcome::Held), 0, "{what}: a crash is not the dependency's hold");
    let bound = CRASH_ACK_WAIT + CRASH_RENEWAL + MARGIN;
    assert!(crash.took <= bound, "{what}: kill to completion {:?}, over {bound:?}", crash.took);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_after_its_commit_has_its_job_completed_by_another_with_one_shipment_through_the_helper()
 {
    let Some(crash) = crash("sqlx_once_after", Effect::Once, false).await else { return };
    within_ack_wait_and_one_renewal(&crash, "with the helper, killed after COMMIT");
    assert_eq!(crash.second_found, [Recorded::AlreadyProcessed], "the re-run found the committed key");
    assert_eq!((crash.shipments, crash.processed), (1, 1), "the effect and its record, once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_helper_the_same_crash_ships_twice() {
    let Some(crash) = crash("sqlx_once_bare", Effect::Bare, false).await else { return };
    within_ack_wait_and_one_renewal(&crash, "without the helper, killed after COMMIT");
    assert_eq!(crash.shipments, 2, "the re-run cannot know the first run shipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_before_its_commit_leaves_nothing_and_the_rerun_ships_once() {
    let Some(crash) = crash("sqlx_once_before", Effect::Once, true).await else { return };
    within_ack_wait_and_one_renewal(&crash, "with the helper, killed before COMMIT");
    assert_eq!(crash.second_found, [Recorded::Fresh], "the dead transaction's key was rolled back");
    assert_eq!((crash.shipments, crash.processed), (1, 1), "the effect and its record, once");
}
