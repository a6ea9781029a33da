//! The README's quickstart, literally, against a real PostgreSQL and a real
//! collector: `init_otlp()` with the standard environment, `Database::new`, the
//! transfer; then a transaction replayed after a `40001` and one refused on a
//! `23505`. It proves that the collector receives one CLIENT span per attempt
//! with the database conventions' attributes and the SQLSTATE, and never the
//! query text. A test binary of its own with a plain `main`: it sets the
//! process environment (as a user's shell would) before any thread starts.

mod common;

use retryscope::Policy;
use retryscope_sqlx::{Database, Isolation};
use retryscope_test_support::rotel;
use sqlx::Executor;

fn main() {
    let Some(url) = common::url() else { return };
    let Some(binary) = rotel::binary() else { return };
    let collector = rotel::Collector::start(&binary, "sqlx-readme");
    // SAFETY: no other thread of this process exists yet, so nothing reads the
    // environment while it changes.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{}", collector.http));
        std::env::set_var("OTEL_SERVICE_NAME", "sqlx-readme-test");
    }
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let url = runtime.block_on(prepare(&url));
    runtime.block_on(readme(&url)).expect("the README's transaction");

    let printed = collector
        .wait_for(&["Str(23505)", "Str(40001)", "Str(transfer"])
        .unwrap_or_else(|missing| panic!("{missing}"));
    let spans: Vec<_> = rotel::spans(&printed).into_iter().filter(|s| s.kind == "SPAN_KIND_CLIENT").collect();
    let by_operation = |operation: &str| -> Vec<&rotel::PrintedSpan> {
        let value = format!("Str({operation})");
        spans.iter().filter(|s| s.attribute("db.operation.name") == Some(value.as_str())).collect()
    };
    let common = [
        ("db.system.name", "Str(postgresql)"),
        ("db.namespace", "Str(retryscope)"),
        ("server.address", "Str(127.0.0.1)"),
    ];
    for span in &spans {
        for (key, value) in common {
            assert_eq!(span.attribute(key), Some(value), "{key} on {span:#?}");
        }
        assert!(span.attribute("server.port").is_some_and(|p| p.starts_with("Int(")), "{span:#?}");
        let text = span.attributes.join("\n");
        assert!(!text.contains("UPDATE") && !text.contains("INSERT"), "the query text leaked: {text}");
    }
    let transfer = by_operation("transfer");
    assert_eq!(transfer.len(), 1, "{spans:#?}");
    assert_eq!(transfer[0].name, "transfer retryscope");
    assert_eq!(transfer[0].attribute("db.response.status_code"), None, "it committed");

    let replayed = by_operation("replayed");
    assert_eq!(replayed.len(), 2, "{spans:#?}");
    let (first, second) = if replayed[0].attribute("retryscope.attempt") == Some("Int(1)") {
        (replayed[0], replayed[1])
    } else {
        (replayed[1], replayed[0])
    };
    assert_eq!(first.attribute("db.response.status_code"), Some("Str(40001)"));
    assert_eq!(first.attribute("error.type"), Some("Str(40001)"));
    assert_eq!(second.attribute("retryscope.attempt"), Some("Int(2)"));
    assert_eq!(second.attribute("error.type"), None);

    let refused = by_operation("refused");
    assert_eq!(refused.len(), 1, "a unique violation is tried once: {spans:#?}");
    assert_eq!(refused[0].attribute("db.response.status_code"), Some("Str(23505)"));
    assert_eq!(refused[0].attribute("error.type"), Some("Str(23505)"));
    println!("readme_otlp: 1 passed, 0 failed");
}

/// The tables the README's transfer moves money between, in a schema of the
/// test's own; the URL that works in it.
async fn prepare(url: &str) -> String {
    let pool = common::pool(url, "t_readme", 1).await;
    pool.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL); INSERT INTO accounts VALUES (1, 100), (2, 100)")
        .await
        .expect("set up");
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3Dt_readme")
}

async fn readme(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let telemetry = retryscope_otel::init_otlp()?; // before building the database

    // The README, line for line (with the test server's URL).
    let db = Database::new(sqlx::PgPool::connect(url).await?);
    let moved = db
        .transaction(Policy::interactive())
        .isolation(Isolation::Serializable)
        .operation("transfer")
        .run(|tx| {
            Box::pin(async move {
                sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 1")
                    .execute(&mut **tx)
                    .await?;
                sqlx::query("UPDATE accounts SET balance = balance + 10 WHERE id = 2")
                    .execute(&mut **tx)
                    .await?;
                Ok(10)
            })
        })
        .await?;
    assert_eq!(moved, 10);
    let balances: Vec<i32> =
        sqlx::query_scalar("SELECT balance FROM accounts ORDER BY id").fetch_all(db.pool()).await?;
    assert_eq!(balances, [90, 110]);

    // A serialization failure on the first attempt only: replayed.
    let mut attempt = 0;
    db.transaction(Policy::interactive())
        .operation("replayed")
        .run(|tx| {
            attempt += 1;
            let conflict = attempt == 1;
            Box::pin(async move {
                if conflict {
                    tx.execute("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = 'serialization_failure'; END $$")
                        .await?;
                }
                Ok(())
            })
        })
        .await?;
    // A unique violation: refused after one attempt.
    let refused = db
        .transaction(Policy::interactive())
        .operation("refused")
        .run(|tx| Box::pin(async move { tx.execute("INSERT INTO accounts VALUES (1, 0)").await.map(drop) }))
        .await;
    assert_eq!(refused.expect_err("a duplicate key").attempts(), 1);

    telemetry.shutdown()?;
    Ok(())
}
