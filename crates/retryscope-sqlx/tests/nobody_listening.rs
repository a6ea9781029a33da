//! A database built while no meter provider is installed skips its telemetry
//! on every statement that no `tracing` subscriber could hear, and takes it
//! up with the first statement after one is set, against a real PostgreSQL
//! (`RETRYSCOPE_POSTGRES_URL`). Its own process: nothing here installs a
//! provider or a global subscriber.

mod common;

use retryscope::Policy;
use retryscope_sqlx::{Database, WorkFuture};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::span::{Attributes, Id};
use tracing_subscriber::Registry;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The names of the spans opened while it is the subscriber's layer.
#[derive(Clone, Default)]
struct SpanNames(Arc<Mutex<Vec<&'static str>>>);

impl<S: tracing::Subscriber> Layer<S> for SpanNames {
    fn on_new_span(&self, attributes: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        if let Ok(mut names) = self.0.lock() {
            names.push(attributes.metadata().name());
        }
    }
}

impl SpanNames {
    /// The database attempt spans (`tracing` name `postgresql`).
    fn attempts(&self) -> usize {
        self.0.lock().map(|names| names.iter().filter(|n| **n == "postgresql").count()).unwrap_or(0)
    }
}

/// The statement both calls run.
fn select(conn: &mut sqlx::PgConnection) -> WorkFuture<'_, i32> {
    Box::pin(async move { sqlx::query_scalar::<_, i32>("SELECT 7").fetch_one(conn).await })
}

#[tokio::test]
async fn a_statement_nobody_hears_skips_its_telemetry_and_the_first_after_a_subscriber_has_its_span() {
    let Some(url) = common::url() else { return };
    assert!(!tracing::dispatcher::has_been_set(), "this test's process sets no subscriber before it");
    let pool = common::pool(&url, "t_nobody_listening", 1).await;
    let db = Database::builder(pool).build();
    let policy =
        || Policy::builder().max_attempts(2).deadline(Duration::from_secs(10)).build().expect("valid");

    // Nobody listening: the statement runs as ever, its telemetry skipped.
    assert_eq!(db.statement(policy()).operation("SELECT").run(select).await.expect("runs"), 7);

    // A subscriber set after the database was built hears the next statement.
    let names = SpanNames::default();
    let _subscriber = tracing::subscriber::set_default(Registry::default().with(names.clone()));
    assert_eq!(db.statement(policy()).operation("SELECT").run(select).await.expect("runs"), 7);
    assert_eq!(names.attempts(), 1, "{:?}", names.0.lock().map(|n| n.clone()));
}
