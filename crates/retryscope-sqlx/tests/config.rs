//! A database configured from a `retryscope-config` file (issue 35), against a
//! real PostgreSQL (`RETRYSCOPE_POSTGRES_URL`): every query fails with a
//! conflict (`40001`, raised by the server) so that each call runs all the
//! attempts its policy allows. A reload of the file changes the attempts of
//! the next query; a per-call `override_policy` wins over the file; the kill
//! switch (`enabled = false`) gives one attempt, whatever the call says; the
//! attempts' spans carry the hash of the configuration each call started with.

mod common;

use retryscope::{Jitter, Policy};
use retryscope_config::{ConfigHandle, KnownNames};
use retryscope_otel::names;
use retryscope_sqlx::{Database, Failure};
use retryscope_test_support::telemetry::{Telemetry, attr};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A conflict PostgreSQL reports as it reports a serialization failure.
const CONFLICT: &str = "DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$";

/// The file: the database (`host:port`) with `attempts` and the kill switch
/// as given, quick backoff so that the test takes milliseconds; an HTTP
/// dependency beside it, which the database must not match.
fn file(host: &str, port: u16, attempts: u32, enabled: bool) -> String {
    format!(
        r#"
[defaults]
attempts = 6
deadline = "10s"

[dependencies.orders-db]
host = "{host}:{port}"
attempts = {attempts}
enabled = {enabled}
backoff = {{ initial = "1ms", max = "5ms" }}
jitter = "none"

[dependencies.search]
host = "{host}"
path_prefix = "/search"
attempts = 9
"#
    )
}

fn policy(attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .base_delay(Duration::from_millis(1))
        .jitter(Jitter::None)
        .deadline(Duration::from_secs(10))
        .build()
        .expect("a valid policy")
}

#[tokio::test]
async fn the_file_sets_each_querys_attempts_and_a_reload_reaches_the_next_query() {
    let Some(url) = common::url() else { return };
    let pool = common::pool(&url, "t_config", 2).await;
    let (host, port) = (pool.connect_options().get_host().to_owned(), pool.connect_options().get_port());
    let path = std::env::temp_dir().join(format!("retryscope-sqlx-config-{}.toml", std::process::id()));
    std::fs::write(&path, file(&host, port, 3, true)).expect("write the config file");
    let handle = ConfigHandle::builder(KnownNames::new()).file(&path).build().expect("the file loads");
    let telemetry = Telemetry::install();
    let db = Database::builder(pool)
        .meter(&telemetry.meter)
        .no_budget()
        .no_breaker()
        .config(handle.clone())
        .build();

    // Counts the runs of the work: the attempts that reached the server.
    let runs = AtomicU32::new(0);
    let statement = |own: Option<Policy>| {
        runs.store(0, Ordering::Relaxed);
        // The call is made with 7 attempts: the file's replace them.
        let mut call = db.statement(policy(7)).operation("conflict");
        if let Some(own) = own {
            call = call.override_policy(own);
        }
        let runs = &runs;
        async move {
            let error = call
                .run(|conn| {
                    runs.fetch_add(1, Ordering::Relaxed);
                    Box::pin(async move { sqlx::query(CONFLICT).execute(conn).await.map(|_| ()) })
                })
                .await
                .expect_err("every attempt is a conflict");
            assert!(matches!(error.last_error(), Some(Failure::Statement(_))), "{error}");
            assert_eq!(error.attempts(), runs.load(Ordering::Relaxed), "{error}");
            error.attempts()
        }
    };

    let first_hash = handle.snapshot().hash_str().clone();
    assert_eq!(statement(None).await, 3, "the file's attempts, not the call's 7");
    assert_eq!(statement(Some(policy(2))).await, 2, "a call's own policy wins over the file");

    std::fs::write(&path, file(&host, port, 5, true)).expect("rewrite the config file");
    handle.reload().expect("the rewritten file loads");
    let second_hash = handle.snapshot().hash_str().clone();
    assert_ne!(first_hash, second_hash);
    assert_eq!(statement(None).await, 5, "the reloaded file's attempts reach the next query");

    // The kill switch: one attempt, for the file's policy and a call's own.
    std::fs::write(&path, file(&host, port, 5, false)).expect("rewrite the config file");
    handle.reload().expect("the rewritten file loads");
    let third_hash = handle.snapshot().hash_str().clone();
    assert_eq!(statement(None).await, 1, "the kill switch: first attempts only");
    assert_eq!(statement(Some(policy(4))).await, 1, "the kill switch wins over a call's own policy");
    // A transaction too.
    runs.store(0, Ordering::Relaxed);
    let error = db
        .transaction(policy(7))
        .operation("conflict_tx")
        .run(|tx| {
            runs.fetch_add(1, Ordering::Relaxed);
            Box::pin(async move { sqlx::query(CONFLICT).execute(&mut **tx).await.map(|_| ()) })
        })
        .await
        .expect_err("the transaction's one attempt is a conflict");
    assert_eq!((error.attempts(), runs.load(Ordering::Relaxed)), (1, 1), "{error}");

    // Every attempt's span names the configuration its call started with:
    // 3 + 2 attempts under the first, 5 under the second, 1 + 1 + 1 under the third.
    let spans = telemetry.attempt_spans(db.dependency());
    let hashes: Vec<String> =
        spans.iter().map(|s| attr(s, names::CONFIG_HASH).expect("a configured call's hash")).collect();
    let count = |hash: &str| hashes.iter().filter(|h| h.as_str() == hash).count();
    assert_eq!(hashes.len(), 13, "{hashes:?}");
    assert_eq!((count(&first_hash), count(&second_hash), count(&third_hash)), (5, 5, 3), "{hashes:?}");
    assert_eq!(hashes.iter().collect::<BTreeSet<_>>().len(), 3);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn without_a_matching_dependency_the_files_defaults_apply() {
    let Some(url) = common::url() else { return };
    let pool = common::pool(&url, "t_config_defaults", 1).await;
    let host = pool.connect_options().get_host().to_owned();
    // Only rules that cannot match a database: another port, a path prefix.
    let text = format!(
        r#"
[defaults]
attempts = 2
backoff = {{ initial = "1ms" }}
jitter = "none"

[dependencies.other-port]
host = "{host}:1"
attempts = 9

[dependencies.search]
host = "{host}"
path_prefix = "/search"
attempts = 9
"#
    );
    let config = retryscope_config::Config::parse(
        &text,
        retryscope_config::Format::Toml,
        "defaults.toml",
        &KnownNames::new(),
    )
    .expect("the file loads");
    let handle = ConfigHandle::builder(KnownNames::new()).config(config).build().expect("a handle");
    let db = Database::builder(pool).no_telemetry().no_budget().no_breaker().config(handle).build();
    let error = db
        .statement(policy(7))
        .run(|conn| Box::pin(async move { sqlx::query(CONFLICT).execute(conn).await.map(|_| ()) }))
        .await
        .expect_err("every attempt is a conflict");
    assert_eq!(error.attempts(), 2, "the defaults' attempts: {error}");
}

/// Collects the `keys` of every warning that the database does not apply
/// a file's guard keys, on the thread it is set as the default on.
#[derive(Clone, Default)]
struct Unapplied(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Unapplied {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Keys(Option<String>, bool);
        impl tracing::field::Visit for Keys {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                match field.name() {
                    "keys" => self.0 = Some(format!("{value:?}")),
                    "message" => self.1 = format!("{value:?}").contains("not applied"),
                    _ => {}
                }
            }
        }
        let mut keys = Keys(None, false);
        event.record(&mut keys);
        if let (Some(keys), true, &tracing::Level::WARN) = (keys.0, keys.1, event.metadata().level()) {
            self.0.lock().expect("not poisoned").push(keys);
        }
    }
}

/// The database keeps its builder's guards: guard keys written on the
/// dependency it matches are not applied, and it says so, once for each
/// version of the file; the defaults' guard keys (the HTTP clients') it
/// does not report.
#[tokio::test]
async fn guard_keys_on_the_databases_dependency_are_reported_once_per_file_version() {
    use tracing_subscriber::layer::SubscriberExt as _;
    let Some(url) = common::url() else { return };
    let pool = common::pool(&url, "t_config_guards", 1).await;
    let (host, port) = (pool.connect_options().get_host().to_owned(), pool.connect_options().get_port());
    let path = std::env::temp_dir().join(format!("retryscope-sqlx-guards-{}.toml", std::process::id()));
    let file = |dependency_keys: &str| {
        format!(
            "[defaults]\nbudget = {{ ratio = 0.2 }}\n\n[dependencies.orders-db]\nhost = \"{host}:{port}\"\n{dependency_keys}\n"
        )
    };
    std::fs::write(&path, file("attempts = 1")).expect("write the config file");
    let handle = ConfigHandle::builder(KnownNames::new()).file(&path).build().expect("the file loads");
    let db = Database::builder(pool).no_telemetry().no_retry_log().config(handle.clone()).build();
    let unapplied = Unapplied::default();
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(unapplied.clone()));
    let select = || async {
        db.statement(policy(1))
            .run(|conn| Box::pin(async move { sqlx::query("SELECT 1").execute(conn).await.map(|_| ()) }))
            .await
            .expect("SELECT 1")
    };

    select().await;
    assert!(
        unapplied.0.lock().expect("not poisoned").is_empty(),
        "the defaults' budget is the HTTP clients'"
    );

    std::fs::write(&path, file("budget = { ratio = 0.1 }\nin_flight_budget = {}")).expect("rewrite");
    handle.reload().expect("the rewritten file loads");
    select().await;
    select().await;
    assert_eq!(
        *unapplied.0.lock().expect("not poisoned"),
        ["budget, in_flight_budget"],
        "once for this version"
    );

    std::fs::write(&path, file("breaker = { min_calls = 5 }")).expect("rewrite");
    handle.reload().expect("the rewritten file loads");
    select().await;
    assert_eq!(
        *unapplied.0.lock().expect("not poisoned"),
        ["budget, in_flight_budget", "breaker"],
        "again for the next version"
    );
    let _ = std::fs::remove_file(&path);
}
