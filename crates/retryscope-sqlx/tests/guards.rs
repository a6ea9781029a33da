//! The database's retry budget and circuit breaker in one run, against a real
//! PostgreSQL (`RETRYSCOPE_POSTGRES_URL`) that refuses every connection of
//! the test's role: the budget caps the retries while the breaker counts the
//! failures, opens, and refuses the rest without touching the server; once
//! the database takes connections again, the first call after the cool-down
//! goes through.

mod common;

use retryscope::{CircuitBreaker, Jitter, Policy, RetryBudget, StopReason};
use retryscope_otel::names;
use retryscope_sqlx::Database;
use retryscope_test_support::telemetry::Telemetry;
use sqlx::Executor;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, Instant};

const COOL_DOWN: Duration = Duration::from_millis(500);
const RATIO: f64 = 0.2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_database_trips_the_breaker_while_the_budget_caps_the_retries() {
    let Some(url) = common::url() else { return };
    let admin = common::pool(&url, "t_dead", 1).await;
    // A role allowed no connection: to it, the database is dead (53300 on
    // every connect, which the pool turns into its timeout).
    admin
        .execute("DROP ROLE IF EXISTS t_dead; CREATE ROLE t_dead LOGIN PASSWORD 'dead' CONNECTION LIMIT 0; GRANT ALL ON SCHEMA t_dead TO t_dead")
        .await
        .expect("a role without connections");
    let options = PgConnectOptions::from_str(&url)
        .expect("a PostgreSQL URL")
        .options([("search_path", "t_dead")])
        .username("t_dead")
        .password("dead");
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_millis(100))
        .connect_lazy_with(options);
    let telemetry = Telemetry::install();
    let db = Database::builder(pool)
        .meter(&telemetry.meter)
        // A fifth of the requests, no reserve: the share is all there is.
        .budget_per_dependency(|| {
            RetryBudget::builder().ratio(RATIO).min_per_second(0).build().expect("budget")
        })
        .breaker_per_dependency(|| {
            let breaker = CircuitBreaker::builder().min_calls(10).failure_ratio(0.5).cool_down(COOL_DOWN);
            breaker.build().expect("breaker")
        })
        .build();
    let policy = Policy::builder()
        .max_attempts(4)
        .base_delay(Duration::from_millis(10))
        .jitter(Jitter::None)
        .deadline(Duration::from_secs(5))
        .build()
        .expect("a valid policy");
    let select_one = || {
        db.statement(policy).operation("SELECT").idempotent().run(|conn| {
            Box::pin(async move { sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(conn).await })
        })
    };

    let calls = 30;
    let started = Instant::now();
    let (mut attempts, mut reasons) = (Vec::new(), BTreeMap::<String, usize>::new());
    for _ in 0..calls {
        let error = select_one().await.expect_err("the database is dead");
        attempts.push(error.attempts());
        *reasons.entry(format!("{:?}", error.reason())).or_default() += 1;
    }
    let took = started.elapsed();
    let sent: u32 = attempts.iter().sum();
    let with_attempts = attempts.iter().filter(|a| **a > 0).count();
    let retries = sent as usize - with_attempts;
    let refused = attempts.iter().filter(|a| **a == 0).count();
    eprintln!(
        "{calls} calls to a dead database in {took:?}: {sent} attempts ({retries} retries), \
         {refused} refused before any attempt; stop reasons {reasons:?}; attempts {attempts:?}"
    );
    // Without the budget, every call that ran would have made 4 attempts.
    let cap = (RATIO * f64::from(calls)).ceil() as usize;
    assert!(retries <= cap, "{retries} retries over the budget's {cap}");
    assert!(reasons.contains_key(&format!("{:?}", StopReason::BudgetExhausted)), "{reasons:?}");
    // The breaker opened after its 10 calls and refused the rest untried.
    assert!(sent <= 12, "the breaker let {sent} attempts through");
    assert!(refused >= 15, "{refused} calls refused by the breaker");
    let circuit_open = reasons.get(&format!("{:?}", StopReason::CircuitOpen)).copied().unwrap_or(0);
    assert!(circuit_open >= refused, "{reasons:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let refused_metric = telemetry.counter(
        names::REFUSED,
        &[(names::OUTCOME, "throttled"), (names::THROTTLE_REASON, names::THROTTLED_BY_BREAKER)],
    );
    assert_eq!(refused_metric, refused as u64);
    let by_budget =
        telemetry.counter(names::THROTTLED, &[(names::THROTTLE_REASON, names::THROTTLED_BY_BUDGET)]);
    assert!(by_budget >= 1, "{by_budget}");

    // The database takes connections again: after the cool-down, the
    // breaker's probe goes through and closes it.
    admin.execute("ALTER ROLE t_dead CONNECTION LIMIT -1").await.expect("revive the role");
    tokio::time::sleep(COOL_DOWN + Duration::from_millis(100)).await;
    assert_eq!(select_one().await.expect("the database is back"), 1);
    assert_eq!(select_one().await.expect("and stays so"), 1);
    drop(db);
    admin.execute("DROP OWNED BY t_dead; DROP ROLE t_dead").await.expect("clean up");
}
