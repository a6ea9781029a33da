//! The processed-jobs table against a real PostgreSQL (`RETRYSCOPE_POSTGRES_URL`):
//! two runs of one job key at once do the effect once, whatever the isolation
//! level (the blocked run sees the key, or fails `40001` and its retry does); a
//! rolled-back run leaves nothing behind; the migration runs again and at once;
//! the cleanup forgets only old keys; bad names and keys are refused, never sent.

mod common;

use retryscope::{Policy, StopReason};
use retryscope_sqlx::{Database, Failure, Isolation, ProcessedJobs, ProcessedJobsError, Recorded};
use sqlx::{Executor, PgPool};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long the first run holds its transaction open after recording the key.
const HOLD: Duration = Duration::from_millis(500);

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect("the test's own query")
}

/// A pool in a fresh schema with `shipments` and the default processed-jobs table.
async fn set_up(url: &str, schema: &str) -> (PgPool, Database, ProcessedJobs) {
    let pool = common::pool(url, schema, 4).await;
    pool.execute("CREATE TABLE shipments (id serial PRIMARY KEY, job_key text NOT NULL)")
        .await
        .expect("set up");
    let processed = ProcessedJobs::default();
    processed.ensure_table(&pool).await.expect("the migration");
    let db = Database::builder(pool.clone()).no_telemetry().no_budget().build();
    (pool, db, processed)
}

/// One run of the job `key`: records it, ships on `Fresh`, holds the
/// transaction open for `hold`, commits. Counts its attempts in `runs`.
async fn ship(
    db: &Database,
    processed: &ProcessedJobs,
    key: &str,
    isolation: Isolation,
    hold: Duration,
    recorded: Option<tokio::sync::oneshot::Sender<()>>,
    runs: &AtomicU32,
) -> Result<Recorded, retryscope::RetryError<Failure>> {
    let recorded = std::sync::Mutex::new(recorded);
    db.transaction(common::patient())
        .isolation(isolation)
        .operation("ship")
        .run(|tx| {
            runs.fetch_add(1, Ordering::SeqCst);
            let (processed, key) = (processed.clone(), key.to_owned());
            let said = recorded.lock().expect("not poisoned").take();
            Box::pin(async move {
                let first = processed.record(tx, &key).await?;
                if first == Recorded::Fresh {
                    sqlx::query("INSERT INTO shipments (job_key) VALUES ($1)")
                        .bind(&key)
                        .execute(&mut **tx)
                        .await?;
                }
                if let Some(said) = said {
                    let _ = said.send(());
                }
                tokio::time::sleep(hold).await;
                Ok(first)
            })
        })
        .await
}

/// Two runs of `key` at once: the first records it and holds its
/// transaction; the second starts then, under `second`'s isolation. What
/// each found, the second's attempts, and how long the second took.
async fn two_at_once(url: &str, schema: &str, second: Isolation) -> (PgPool, [Recorded; 2], u32, Duration) {
    let (pool, db, processed) = set_up(url, schema).await;
    let (said, heard) = tokio::sync::oneshot::channel();
    let first = {
        let (db, processed) = (db.clone(), processed.clone());
        tokio::spawn(async move {
            let runs = AtomicU32::new(0);
            ship(&db, &processed, "order-7", Isolation::ReadCommitted, HOLD, Some(said), &runs).await
        })
    };
    heard.await.expect("the first run recorded the key");
    let started = Instant::now();
    let runs = AtomicU32::new(0);
    let second =
        ship(&db, &processed, "order-7", second, Duration::ZERO, None, &runs).await.expect("committed");
    let took = started.elapsed();
    let first = first.await.expect("the first run's task").expect("committed");
    (pool, [first, second], runs.load(Ordering::SeqCst), took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_of_one_key_at_once_ship_once_and_the_second_waits_then_sees_it_processed() {
    let Some(url) = common::url() else { return };
    let (pool, found, runs, took) = two_at_once(&url, "p_concurrent", Isolation::ReadCommitted).await;
    assert_eq!(found, [Recorded::Fresh, Recorded::AlreadyProcessed]);
    assert_eq!(runs, 1, "READ COMMITTED: the blocked insert re-checks the committed row");
    assert!(took >= HOLD / 2, "the second run waited on the first's row lock ({took:?})");
    assert_eq!(count(&pool, "SELECT count(*) FROM shipments").await, 1);
    assert_eq!(count(&pool, "SELECT count(*) FROM retryscope_processed_jobs").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_serializable_the_blocked_run_fails_40001_and_the_helper_reruns_the_check_which_finds_the_key()
{
    let Some(url) = common::url() else { return };
    for (schema, level) in
        [("p_repeatable", Isolation::RepeatableRead), ("p_serializable", Isolation::Serializable)]
    {
        let (pool, found, runs, _) = two_at_once(&url, schema, level).await;
        assert_eq!(found, [Recorded::Fresh, Recorded::AlreadyProcessed], "{level:?}");
        assert_eq!(
            runs, 2,
            "{level:?}: one serialization failure, then the check again in a new transaction"
        );
        assert_eq!(count(&pool, "SELECT count(*) FROM shipments").await, 1, "{level:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_rolled_back_takes_its_record_with_it_and_the_next_run_ships() {
    let Some(url) = common::url() else { return };
    let (pool, db, processed) = set_up(&url, "p_rollback").await;
    let failed = db
        .transaction(Policy::interactive())
        .run(|tx| {
            let processed = processed.clone();
            Box::pin(async move {
                assert_eq!(processed.record(tx, "order-8").await?, Recorded::Fresh);
                sqlx::query("INSERT INTO shipments (job_key) VALUES ('order-8')").execute(&mut **tx).await?;
                // The handler fails after its effect, before COMMIT (a permanent error).
                sqlx::query("SELECT 1 / 0").execute(&mut **tx).await?;
                Ok(())
            })
        })
        .await;
    assert_eq!(failed.expect_err("division by zero").attempts(), 1);
    assert_eq!(count(&pool, "SELECT count(*) FROM retryscope_processed_jobs").await, 0);
    let runs = AtomicU32::new(0);
    let again = ship(&db, &processed, "order-8", Isolation::ReadCommitted, Duration::ZERO, None, &runs).await;
    assert_eq!(again.expect("committed"), Recorded::Fresh);
    assert_eq!(count(&pool, "SELECT count(*) FROM shipments").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_runs_again_and_from_two_sessions_at_once_and_the_cleanup_forgets_only_old_keys() {
    let Some(url) = common::url() else { return };
    let pool = common::pool(&url, "p_migration", 4).await;
    // A keyword as the name: quoted in every statement, it is a valid table.
    let processed = ProcessedJobs::new("order").expect("a plain identifier");
    let (a, b) = tokio::join!(processed.ensure_table(&pool), processed.ensure_table(&pool));
    a.and(b).expect("two migrations at once: one waits on the other's advisory lock");
    processed.ensure_table(&pool).await.expect("and again");
    let indexes =
        "SELECT count(*) FROM pg_indexes WHERE tablename = 'order' AND indexname = 'order_processed_at'";
    assert_eq!(count(&pool, indexes).await, 1);

    let db = Database::builder(pool.clone()).no_telemetry().build();
    for key in ["old", "new"] {
        let processed = processed.clone();
        db.transaction(Policy::interactive())
            .run(|tx| {
                let processed = processed.clone();
                Box::pin(async move { processed.record(tx, key).await.map(|_| ()) })
            })
            .await
            .expect("recorded");
    }
    pool.execute("UPDATE \"order\" SET processed_at = now() - interval '2 days' WHERE job_key = 'old'")
        .await
        .expect("age a key");
    let forgotten = processed.forget_older_than(&pool, Duration::from_secs(24 * 60 * 60)).await;
    assert_eq!(forgotten.expect("the cleanup"), 1);
    let left: Vec<String> =
        sqlx::query_scalar("SELECT job_key FROM \"order\"").fetch_all(&pool).await.expect("read");
    assert_eq!(left, ["new"]);

    // Schema-qualified.
    pool.execute("CREATE SCHEMA IF NOT EXISTS p_jobs").await.expect("a schema");
    let qualified = ProcessedJobs::new("p_jobs.done").expect("schema.table");
    qualified.ensure_table(&pool).await.expect("the migration");
    assert_eq!(count(&pool, "SELECT count(*) FROM p_jobs.done").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_are_refused_before_anything_is_sent_with_an_error_that_says_why_and_tried_once() {
    let Some(url) = common::url() else { return };
    let (pool, db, processed) = set_up(&url, "p_bad_keys").await;
    let longest = "k".repeat(ProcessedJobs::MAX_KEY_LEN);
    let too_long = "k".repeat(ProcessedJobs::MAX_KEY_LEN + 1);
    let cases = [
        ("", ProcessedJobsError::EmptyKey),
        (too_long.as_str(), ProcessedJobsError::KeyTooLong { length: 256, limit: 255 }),
        ("order\0-9", ProcessedJobsError::KeyHasNul),
    ];
    for (key, expected) in cases {
        assert_eq!(ProcessedJobs::check_key(key), Err(expected.clone()));
        let runs = AtomicU32::new(0);
        let refused = ship(&db, &processed, key, Isolation::ReadCommitted, Duration::ZERO, None, &runs).await;
        let error = refused.expect_err("a bad key");
        assert_eq!((error.attempts(), error.reason()), (1, StopReason::Permanent), "{expected}");
        let Some(Failure::Statement(sqlx::Error::Encode(source))) = error.last_error() else {
            panic!("a bad key is an encoding error: {:?}", error.last_error())
        };
        assert_eq!(source.downcast_ref::<ProcessedJobsError>(), Some(&expected));
    }
    assert_eq!(
        ProcessedJobsError::KeyTooLong { length: 256, limit: 255 }.to_string(),
        "the job key is 256 bytes long, over the processed-jobs limit of 255"
    );
    let runs = AtomicU32::new(0);
    let fits = ship(&db, &processed, &longest, Isolation::ReadCommitted, Duration::ZERO, None, &runs).await;
    assert_eq!(fits.expect("the longest key"), Recorded::Fresh);
    assert_eq!(count(&pool, "SELECT count(*) FROM retryscope_processed_jobs").await, 1);
}

#[test]
fn table_names_that_are_not_plain_lowercase_identifiers_are_refused_at_construction() {
    let invalid = [
        "",
        "Orders",
        "1jobs",
        "jobs done",
        "jobs;drop table shipments",
        "a.b.c",
        "\"jobs\"",
        ".jobs",
        "jobs.",
        "jöbs",
        "jobs-done",
    ];
    for name in invalid {
        assert_eq!(
            ProcessedJobs::new(name).map(|t| t.table_name().to_owned()),
            Err(ProcessedJobsError::InvalidTableName { name: name.to_owned() }),
            "{name:?}"
        );
    }
    let long = "j".repeat(ProcessedJobs::MAX_NAME_LEN + 1);
    assert_eq!(
        ProcessedJobs::new(&long).map(|t| t.table_name().to_owned()),
        Err(ProcessedJobsError::TableNameTooLong { name: long.clone(), limit: 50 })
    );
    let error = ProcessedJobs::new("jobs;drop table shipments").expect_err("refused");
    assert_eq!(
        error.to_string(),
        "processed-jobs table name \"jobs;drop table shipments\" is refused: use `table` or `schema.table`, \
         lowercase ASCII letters, digits and `_`, not starting with a digit"
    );
    for name in ["jobs", "_jobs2", "app.processed_jobs", &"j".repeat(ProcessedJobs::MAX_NAME_LEN)] {
        assert_eq!(ProcessedJobs::new(name).map(|t| t.table_name().to_owned()), Ok(name.to_owned()));
    }
    // `Default` skips the check: its name must pass it.
    let checked = ProcessedJobs::new(ProcessedJobs::DEFAULT_TABLE).expect("the default name is valid");
    assert_eq!(checked.schema(), ProcessedJobs::default().schema());
    assert_eq!(ProcessedJobs::default().table_name(), ProcessedJobs::DEFAULT_TABLE);
}
