//! No query text leaves the process: a statement slow enough for sqlx to log
//! it (a WARN under `sqlx::query`, holding the SQL) runs inside an attempt
//! span, on a real PostgreSQL (`RETRYSCOPE_POSTGRES_URL`), with the service's
//! subscriber built on `Telemetry::layer()`; what a real collector (rotel,
//! `RETRYSCOPE_ROTEL`) receives holds the attempt span and not the SQL.

mod common;

use retryscope::Policy;
use retryscope_otel::{OtlpConfig, Protocol};
use retryscope_sqlx::Database;
use retryscope_test_support::rotel::{self, Collector};
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt as _;

#[test]
fn a_statement_slower_than_sqlx_s_threshold_exports_its_span_and_none_of_its_text() {
    let Some(binary) = rotel::binary() else { return };
    let Some(url) = common::url() else { return };
    let collector = Collector::start(&binary, "sqlx-query-text");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let telemetry = OtlpConfig::default()
        .protocol(Protocol::HttpProtobuf)
        .endpoint(format!("http://{}", collector.http))
        .service_name("retryscope-sqlx-test")
        .build()
        .expect("the telemetry builds");
    // As a service composes it: retryscope's layer on the registry, and a log
    // of its own (which may print what it likes: it stays in the process).
    let subscriber = tracing_subscriber::registry()
        .with(telemetry.layer())
        .with(tracing_subscriber::fmt::layer().with_test_writer());
    // Unique to this run, in the statement's text, so that finding it anywhere
    // in what the collector printed means the text left the process.
    let marker = format!("retryscope-marker-{}-{}", std::process::id(), rand_suffix());
    let sql = format!("SELECT pg_sleep(1.1), '{marker}'::text AS marker");

    tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
            let pool = common::pool(&url, "t_query_text", 1).await;
            let db = Database::builder(pool).meter(&telemetry.meter()).no_budget().build();
            let policy = Policy::builder()
                .max_attempts(1)
                .deadline(Duration::from_secs(10))
                .build()
                .expect("a valid policy");
            db.statement(policy)
                .operation("SELECT")
                .run(|conn| {
                    let sql = sql.clone();
                    Box::pin(async move { sqlx::query(&sql).execute(conn).await.map(|_| ()) })
                })
                .await
                .expect("the slow statement succeeds");
        });
    });

    telemetry.shutdown().expect("the collector is up: everything is flushed");
    collector
        .wait_for(&[
            // The attempt span of the slow statement reached the collector.
            "Kind           : SPAN_KIND_CLIENT",
            "-> db.system.name: Str(postgresql)",
            "-> db.operation.name: Str(SELECT)",
            "-> retryscope.operation: Str(SELECT)",
        ])
        .unwrap_or_else(|missing| panic!("{missing}"));
    // The span's events are printed with it; give a partial write time to end.
    std::thread::sleep(Duration::from_millis(500));
    let printed = collector.printed();
    assert!(
        !printed.contains(&marker),
        "the statement's text left the process; the collector printed:\n{printed}"
    );
    assert!(!printed.contains("pg_sleep"), "the statement's text left the process:\n{printed}");
}

/// A few random-enough digits without a dependency: the clock's nanoseconds.
fn rand_suffix() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
}
