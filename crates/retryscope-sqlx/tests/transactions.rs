//! Whole-transaction retries against a real PostgreSQL (`RETRYSCOPE_POSTGRES_URL`):
//! conflicts replayed until they commit, logic errors tried once, lost
//! connections retried on a new one, COMMIT never run twice.

mod common;

use retryscope::{ErrorType, Policy, StopReason};
use retryscope_otel::names;
use retryscope_sqlx::{Database, Failure, Isolation};
use retryscope_test_support::telemetry::Telemetry;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, Executor, PgConnection, PgPool};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Barrier;

/// A database on `pool` with its metrics in `telemetry`, and no budget: these
/// tests are about what is retried, not about how much.
fn database(pool: PgPool, telemetry: &Telemetry) -> Database {
    Database::builder(pool).meter(&telemetry.meter).no_budget().build()
}

async fn scalar(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect("the test's own query")
}

/// Waits until the server no longer lists backend `pid` (a terminated backend
/// goes away asynchronously).
async fn wait_until_gone(admin: &PgPool, pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
        .bind(pid)
        .fetch_one(admin)
        .await
        .expect("read pg_stat_activity")
        > 0
    {
        assert!(Instant::now() < deadline, "backend {pid} still there 10 s after pg_terminate_backend");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_transactions_locking_rows_in_opposite_order_deadlock_once_and_both_commit() {
    let Some(url) = common::url() else { return };
    let pool = common::pool(&url, "t_deadlock", 4).await;
    pool.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL); INSERT INTO accounts VALUES (1, 100), (2, 100)")
        .await
        .expect("set up");
    let telemetry = Telemetry::install();
    let db = database(pool.clone(), &telemetry);
    // Both first attempts hold their first row before either asks for its second.
    let both_hold_one = Arc::new(Barrier::new(2));
    let attempts = Arc::new(AtomicU32::new(0));
    let transfer = |first: i32, second: i32| {
        let (db, barrier, attempts) = (db.clone(), both_hold_one.clone(), attempts.clone());
        tokio::spawn(async move {
            let mine = Arc::new(AtomicU32::new(0));
            db.transaction(common::patient())
                .operation("transfer")
                .run(|tx| {
                    let (barrier, attempts, mine) = (barrier.clone(), attempts.clone(), mine.clone());
                    Box::pin(async move {
                        attempts.fetch_add(1, Ordering::SeqCst);
                        let attempt = mine.fetch_add(1, Ordering::SeqCst) + 1;
                        sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = $1")
                            .bind(first)
                            .execute(&mut **tx)
                            .await?;
                        if attempt == 1 {
                            barrier.wait().await;
                        }
                        sqlx::query("UPDATE accounts SET balance = balance + 10 WHERE id = $1")
                            .bind(second)
                            .execute(&mut **tx)
                            .await?;
                        Ok(attempt)
                    })
                })
                .await
        })
    };
    let (a, b) = (transfer(1, 2), transfer(2, 1));
    let a = a.await.expect("task").expect("the first transfer commits");
    let b = b.await.expect("task").expect("the second transfer commits");
    let mut runs = [a, b];
    runs.sort();
    assert_eq!(runs, [1, 2], "one transfer committed at once, the deadlock's victim on its replay");
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert_eq!(scalar(&pool, "SELECT sum(balance)::int8 FROM accounts").await, 200);
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM accounts WHERE balance = 100").await,
        2,
        "each moved 10 each way"
    );
    let deadlocks = [(names::ERROR_TYPE, "40P01")];
    assert_eq!(telemetry.histogram_count(names::ATTEMPT_DURATION, &deadlocks), 1);
    assert_eq!(telemetry.counter(names::RETRIES, &[(names::RETRY_REASON, "40P01")]), 1);
    assert_eq!(telemetry.histogram_count(names::REQUEST_DURATION, &[(names::OUTCOME, "success")]), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_serializable_read_modify_writes_of_one_counter_all_commit_and_the_count_is_exact() {
    let Some(url) = common::url() else { return };
    let pool = common::pool(&url, "t_serializable", 8).await;
    pool.execute(
        "CREATE TABLE counter (id int PRIMARY KEY, n int NOT NULL); INSERT INTO counter VALUES (1, 0)",
    )
    .await
    .expect("set up");
    let telemetry = Telemetry::install();
    let db = database(pool.clone(), &telemetry);
    // Every first attempt reads before any writes: all but one must fail.
    let all_read = Arc::new(Barrier::new(8));
    let attempts = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (db, barrier, attempts) = (db.clone(), all_read.clone(), attempts.clone());
            tokio::spawn(async move {
                let first = Arc::new(AtomicU32::new(1));
                db.transaction(common::patient())
                    .isolation(Isolation::Serializable)
                    .operation("increment")
                    .run(|tx| {
                        let (barrier, attempts, first) = (barrier.clone(), attempts.clone(), first.clone());
                        Box::pin(async move {
                            attempts.fetch_add(1, Ordering::SeqCst);
                            let n: i32 = sqlx::query_scalar("SELECT n FROM counter WHERE id = 1")
                                .fetch_one(&mut **tx)
                                .await?;
                            if first.swap(0, Ordering::SeqCst) == 1 {
                                barrier.wait().await;
                            }
                            sqlx::query("UPDATE counter SET n = $1 WHERE id = 1")
                                .bind(n + 1)
                                .execute(&mut **tx)
                                .await?;
                            Ok(())
                        })
                    })
                    .await
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task").expect("every increment commits in the end");
    }
    assert_eq!(scalar(&pool, "SELECT n::int8 FROM counter").await, 8);
    let attempts = attempts.load(Ordering::SeqCst);
    assert!(attempts >= 8 + 7, "seven of the first eight attempts conflict: {attempts} attempts");
    let conflicts = telemetry.histogram_count(names::ATTEMPT_DURATION, &[(names::ERROR_TYPE, "40001")]);
    assert_eq!(u64::from(attempts) - 8, conflicts, "every failed attempt was a serialization failure");
    assert_eq!(telemetry.histogram_count(names::REQUEST_DURATION, &[(names::OUTCOME, "success")]), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_violation_a_syntax_error_and_a_bad_input_value_are_each_tried_once() {
    let Some(url) = common::url() else { return };
    let pool = common::pool(&url, "t_permanent", 2).await;
    pool.execute("CREATE TABLE users (id int PRIMARY KEY); INSERT INTO users VALUES (1)")
        .await
        .expect("set up");
    let telemetry = Telemetry::install();
    let db = database(pool.clone(), &telemetry);
    for (statement, sqlstate) in
        [("INSERT INTO users VALUES (1)", "23505"), ("SELEC 1", "42601"), ("SELECT 'one'::int", "22P02")]
    {
        let runs = AtomicU32::new(0);
        let error = db
            .transaction(Policy::interactive())
            .run(|tx| {
                runs.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    sqlx::query(statement).execute(&mut **tx).await?;
                    Ok(())
                })
            })
            .await
            .expect_err(statement);
        assert_eq!((error.reason(), error.attempts()), (StopReason::Permanent, 1), "{statement}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{statement}");
        assert_eq!(error.error_type(), Some(ErrorType::Kind(sqlstate)));
        let last = error.last_error().expect("the statement's failure");
        assert!(matches!(last, Failure::Statement(_)), "{statement}: {last:?}");
        assert_eq!(last.sqlstate().as_deref(), Some(sqlstate));
        assert_eq!(
            error.to_string(),
            format!("gave up after 1 attempt(s): the failure is not retryable; last failure: {sqlstate}")
        );
        assert_eq!(telemetry.counter(names::RETRIES, &[(names::RETRY_REASON, sqlstate)]), 0);
    }
    assert_eq!(scalar(&pool, "SELECT count(*) FROM users").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closure_that_swallows_a_failed_statement_is_refused_and_nothing_is_committed() {
    let Some(url) = common::url() else { return };
    let pool = common::pool(&url, "t_swallowed", 2).await;
    pool.execute("CREATE TABLE log (line text NOT NULL)").await.expect("set up");
    let db = Database::builder(pool.clone()).no_telemetry().build();
    // Goes on after the failure: PostgreSQL answers 25P02.
    let went_on = db
        .transaction(Policy::interactive())
        .run(|tx| {
            Box::pin(async move {
                sqlx::query("INSERT INTO log VALUES ('went on')").execute(&mut **tx).await?;
                let _ignored = sqlx::query("SELECT 1 / 0").execute(&mut **tx).await;
                sqlx::query("INSERT INTO log VALUES ('after')").execute(&mut **tx).await?;
                Ok(())
            })
        })
        .await
        .expect_err("refused");
    // Returns Ok after the failure: a COMMIT would silently roll back.
    let returned_ok = db
        .transaction(Policy::interactive())
        .run(|tx| {
            Box::pin(async move {
                sqlx::query("INSERT INTO log VALUES ('returned ok')").execute(&mut **tx).await?;
                let _ignored = sqlx::query("SELECT 1 / 0").execute(&mut **tx).await;
                Ok(())
            })
        })
        .await
        .expect_err("refused");
    for error in [went_on, returned_ok] {
        assert_eq!((error.reason(), error.attempts()), (StopReason::Permanent, 1));
        assert_eq!(error.error_type(), Some(ErrorType::Kind("25P02")));
        let last = error.last_error().expect("the failure");
        assert!(matches!(last, Failure::SwallowedError(_)), "{last:?}");
        assert!(last.to_string().contains("its error was not returned"), "{last}");
    }
    assert_eq!(scalar(&pool, "SELECT count(*) FROM log").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_terminated_between_transactions_is_retried_on_a_new_connection() {
    let Some(url) = common::url() else { return };
    let pool = common::pool(&url, "t_terminated", 1).await;
    // The pool must not notice the dead connection by itself: the retry must.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with(pool.connect_options().as_ref().clone())
        .await
        .expect("connect");
    let admin = PgPool::connect(&url).await.expect("connect");
    let telemetry = Telemetry::install();
    let db = database(pool.clone(), &telemetry);
    let backend = || {
        db.transaction(Policy::interactive()).operation("whoami").run(|tx| {
            Box::pin(async move {
                sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()").fetch_one(&mut **tx).await
            })
        })
    };
    let first = backend().await.expect("the first transaction");
    // The pool pings a released connection in the background: kill it only
    // once it is idle, or the pool's own ping finds it dead.
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.num_idle() < 1 {
        assert!(Instant::now() < deadline, "the connection never went back to the pool");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sqlx::query("SELECT pg_terminate_backend($1)").bind(first).execute(&admin).await.expect("terminate");
    wait_until_gone(&admin, first).await;
    let second = backend().await.expect("the next transaction is retried on a new connection");
    assert_ne!(first, second);
    let lost = telemetry.histogram_count(names::ATTEMPT_DURATION, &[(names::OPERATION, "whoami")]);
    assert_eq!(lost, 3, "one attempt for the first transaction, two for the second");
    let failed: Vec<_> = ["57P01", "reset", "incomplete"]
        .into_iter()
        .filter(|kind| telemetry.counter(names::RETRIES, &[(names::RETRY_REASON, kind)]) == 1)
        .collect();
    assert_eq!(failed.len(), 1, "the lost connection is reported as one of them");
    println!("the lost connection was reported as {failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_out_of_connections_is_retried_within_the_deadline_then_fails_clearly() {
    let Some(url) = common::url() else { return };
    let admin = common::pool(&url, "t_limited", 1).await;
    admin
        .execute("DROP ROLE IF EXISTS t_limited; CREATE ROLE t_limited LOGIN PASSWORD 'limited' CONNECTION LIMIT 1; GRANT ALL ON SCHEMA t_limited TO t_limited")
        .await
        .expect("a role with one connection");
    // Without common::options' deadlock_timeout, which only a superuser may set.
    let options = PgConnectOptions::from_str(&url)
        .expect("a PostgreSQL URL")
        .options([("search_path", "t_limited")])
        .username("t_limited")
        .password("limited");
    let holder = PgConnection::connect_with(&options).await.expect("the role's one connection");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        // The pool retries 53300 itself until its own timeout; the policy retries that.
        .acquire_timeout(Duration::from_millis(200))
        .connect_lazy_with(options);
    let telemetry = Telemetry::install();
    let db = database(pool, &telemetry);
    // No jitter: the waits (50, 100, 200, 400, 800 ms between 200 ms attempts)
    // put the last attempt past 2.5 s, and the next wait (1.6 s) cannot fit. A
    // random draw could stop the call before 2 s, with the deadline still ahead.
    let policy = Policy::builder()
        .max_attempts(20)
        .base_delay(Duration::from_millis(50))
        .jitter(retryscope::Jitter::None)
        .deadline(Duration::from_secs(3))
        .build()
        .expect("a valid policy");
    let runs = AtomicU32::new(0);
    let started = Instant::now();
    let error = db
        .transaction(policy)
        .run(|tx| {
            runs.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move { sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&mut **tx).await })
        })
        .await
        .expect_err("no connection within the deadline");
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_secs(2) && elapsed < Duration::from_secs(6), "{elapsed:?}");
    assert_eq!(error.reason(), StopReason::DeadlineExceeded);
    assert!(error.attempts() >= 2, "retried within the deadline: {} attempts", error.attempts());
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the closure never ran");
    // The pool's timeout each time; the last attempt's may be the deadline's
    // cut instead, which the engine reports as a timeout with no error.
    match (error.error_type(), error.last_error()) {
        (Some(ErrorType::Kind("pool_timeout")), Some(Failure::Connect(sqlx::Error::PoolTimedOut))) => {}
        (Some(ErrorType::TIMEOUT), None) => {}
        other => panic!("unexpected last failure {other:?}"),
    }
    let retried = telemetry.counter(names::RETRIES, &[(names::RETRY_REASON, "pool_timeout")]);
    assert!(retried >= 1, "retried on the pool's timeout: {retried}");
    let message = error.to_string();
    assert!(message.starts_with("gave up after"), "{message}");
    assert!(message.contains("the deadline was reached; last failure: "), "{message}");

    // Once the connection is free, the same call goes through.
    holder.close().await.expect("release the role's connection");
    let one = db
        .transaction(Policy::interactive())
        .run(|tx| {
            Box::pin(async move { sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&mut **tx).await })
        })
        .await
        .expect("a free connection");
    assert_eq!(one, 1);
    drop(db);
    admin.execute("DROP OWNED BY t_limited; DROP ROLE t_limited").await.expect("clean up");
}

/// A table whose COMMIT takes `seconds`: a deferred constraint trigger sleeps
/// at commit time.
async fn slow_commits(pool: &PgPool, seconds: f64) {
    pool.execute(
        format!(
            "CREATE TABLE orders (id int PRIMARY KEY);
             CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN PERFORM pg_sleep({seconds}); RETURN NULL; END $$;
             CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON orders DEFERRABLE INITIALLY DEFERRED
               FOR EACH ROW EXECUTE FUNCTION slow_commit();"
        )
        .as_str(),
    )
    .await
    .expect("set up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_lost_during_commit_ends_the_call_with_commit_outcome_unknown() {
    let Some(url) = common::url() else { return };
    let pool = common::pool(&url, "t_commit_lost", 1).await;
    slow_commits(&pool, 3.0).await;
    let admin = PgPool::connect(&url).await.expect("connect");
    let db = Database::builder(pool.clone()).no_telemetry().no_budget().build();
    let pid = Arc::new(AtomicI32::new(0));
    // Terminates the backend once it is busy with COMMIT.
    let killer = {
        let (admin, pid) = (admin.clone(), pid.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let backend = pid.load(Ordering::SeqCst);
                let committing: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query = 'COMMIT'",
                )
                .bind(backend)
                .fetch_one(&admin)
                .await
                .expect("read pg_stat_activity");
                if committing == 1 {
                    sqlx::query("SELECT pg_terminate_backend($1)")
                        .bind(backend)
                        .execute(&admin)
                        .await
                        .expect("kill");
                    return;
                }
                assert!(Instant::now() < deadline, "COMMIT never showed up");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let runs = AtomicU32::new(0);
    let error = db
        .transaction(Policy::interactive())
        .run(|tx| {
            runs.fetch_add(1, Ordering::SeqCst);
            let pid = pid.clone();
            Box::pin(async move {
                let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut **tx).await?;
                pid.store(backend, Ordering::SeqCst);
                sqlx::query("INSERT INTO orders VALUES (1)").execute(&mut **tx).await?;
                Ok(())
            })
        })
        .await
        .expect_err("the outcome is unknown");
    killer.await.expect("the killer ran");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never run again");
    assert_eq!((error.reason(), error.attempts()), (StopReason::Unrepeatable, 1));
    assert!(retryscope_sqlx::commit_outcome_unknown(&error), "{error:?}");
    let last = error.last_error().expect("the failure");
    assert!(matches!(last, Failure::CommitOutcomeUnknown(_)), "{last:?}");
    assert!(last.to_string().contains("may or may not have been committed"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_passing_during_commit_is_an_unknown_outcome_not_a_retry() {
    let Some(url) = common::url() else { return };
    let pool = common::pool(&url, "t_commit_cut", 2).await;
    slow_commits(&pool, 2.0).await;
    let db = Database::builder(pool.clone()).no_telemetry().no_budget().build();
    // The work before COMMIT takes milliseconds, COMMIT two seconds: the cut
    // falls in COMMIT even on a loaded machine.
    let policy = Policy::builder()
        .attempt_timeout(Duration::from_secs(1))
        .deadline(Duration::from_secs(5))
        .build()
        .expect("a valid policy");
    let runs = AtomicU32::new(0);
    let error = db
        .transaction(policy)
        .run(|tx| {
            runs.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                sqlx::query("INSERT INTO orders VALUES (1)").execute(&mut **tx).await?;
                Ok(())
            })
        })
        .await
        .expect_err("cut short during COMMIT");
    // On a loaded machine an attempt may be cut before the closure runs (a
    // slow connect), which is safe to retry; the one cut in COMMIT is the last.
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never run again after COMMIT was cut");
    assert_eq!(error.reason(), StopReason::Unrepeatable);
    assert!(retryscope_sqlx::commit_outcome_unknown(&error), "{error:?}");
    assert!(error.last_error().is_none(), "the attempt was cut short: no failure to hand back");
    // The dropped COMMIT finishes on the server or not at all: either way, once.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(scalar(&pool, "SELECT count(*) FROM orders").await <= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_cut_by_a_lost_connection_is_retried_only_when_idempotent() {
    let Some(url) = common::url() else { return };
    let pool = common::pool(&url, "t_statement", 2).await;
    let admin = PgPool::connect(&url).await.expect("connect");
    let db = Database::builder(pool.clone()).no_telemetry().no_budget().build();
    for idempotent in [false, true] {
        let runs = Arc::new(AtomicU32::new(0));
        let pid = Arc::new(AtomicI32::new(0));
        let killer = {
            let (admin, pid) = (admin.clone(), pid.clone());
            tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(10);
                while pid.load(Ordering::SeqCst) == 0 {
                    assert!(Instant::now() < deadline, "the statement never started");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                let backend = pid.load(Ordering::SeqCst);
                sqlx::query("SELECT pg_terminate_backend($1)")
                    .bind(backend)
                    .execute(&admin)
                    .await
                    .expect("kill");
            })
        };
        let statement = db.statement(Policy::interactive()).operation("SELECT");
        let statement = if idempotent { statement.idempotent() } else { statement };
        let result = statement
            .run(|conn| {
                let (runs, pid) = (runs.clone(), pid.clone());
                Box::pin(async move {
                    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    if run == 1 {
                        let backend: i32 =
                            sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut *conn).await?;
                        pid.store(backend, Ordering::SeqCst);
                        sqlx::query("SELECT pg_sleep(5)").execute(&mut *conn).await?;
                    }
                    sqlx::query_scalar::<_, i32>("SELECT 7").fetch_one(&mut *conn).await
                })
            })
            .await;
        killer.await.expect("the killer ran");
        if idempotent {
            assert_eq!(result.expect("retried on a new connection"), 7);
            assert_eq!(runs.load(Ordering::SeqCst), 2);
        } else {
            let error = result.expect_err("not retried");
            assert_eq!((error.reason(), error.attempts()), (StopReason::Unrepeatable, 1), "{error:?}");
            assert_eq!(runs.load(Ordering::SeqCst), 1);
        }
    }
}
