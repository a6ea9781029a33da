//! The real PostgreSQL the tests run against, and a schema of its own per test
//! so that the tests run in parallel.
#![allow(dead_code)]

use retryscope::{Jitter, Policy};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgPool};
use std::str::FromStr;
use std::time::Duration;

/// The server's URL from `RETRYSCOPE_POSTGRES_URL`, or `None` (skipped) outside CI.
pub(crate) fn url() -> Option<String> {
    retryscope_test_support::external::required(
        "RETRYSCOPE_POSTGRES_URL",
        "a PostgreSQL superuser's URL; `bash scripts/postgres.sh start` prints one",
    )
}

/// Connect options for `url` whose connections work in `schema` and detect
/// deadlocks after 100 ms (PostgreSQL's default is 1 s).
pub(crate) fn options(url: &str, schema: &str) -> PgConnectOptions {
    PgConnectOptions::from_str(url)
        .expect("RETRYSCOPE_POSTGRES_URL is a PostgreSQL URL")
        .options([("search_path", schema), ("deadlock_timeout", "100ms")])
}

/// A fresh schema named `schema` (dropped first if a previous run left it),
/// and a pool of `size` connections working in it.
pub(crate) async fn pool(url: &str, schema: &str, size: u32) -> PgPool {
    let admin = PgPool::connect(url).await.expect("connect to RETRYSCOPE_POSTGRES_URL");
    admin
        .execute(format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}").as_str())
        .await
        .expect("create the test's schema");
    admin.close().await;
    PgPoolOptions::new()
        .max_connections(size)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options(url, schema))
        .await
        .expect("connect the test's pool")
}

/// Many quick attempts, within a generous deadline: contention, not outages.
pub(crate) fn patient() -> Policy {
    Policy::builder()
        .max_attempts(40)
        .base_delay(Duration::from_millis(5))
        .max_delay(Duration::from_millis(100))
        .jitter(Jitter::Full)
        .deadline(Duration::from_secs(30))
        .build()
        .expect("a valid policy")
}
