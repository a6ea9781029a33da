//! Retries for PostgreSQL through sqlx: transient SQLSTATEs retried, logic
//! errors never, whole transactions replayed from the start — on the
//! [`retryscope`] engine, with its budget, breaker and deadline.
//!
//! - [`Database`]: a pool with one [`RetryBudget`](retryscope::RetryBudget) and
//!   one [`CircuitBreaker`](retryscope::CircuitBreaker), and the telemetry.
//! - [`Database::transaction`]: a closure run in a transaction, and run again
//!   in a new one after a conflict (`40001`, `40P01`) or a lost connection;
//!   never after a permanent error, never after a COMMIT whose outcome is
//!   unknown ([`Failure`]).
//! - [`Database::statement`]: work on a pooled connection outside a
//!   transaction, retried on a lost connection only when marked idempotent.
//! - [`ProcessedJobs`]: a job's effect and its key, recorded as processed, in
//!   one transaction, so that a job run again after its worker crashed skips
//!   the effect it committed; the table's schema and migration.
//! - [`classify`]: the SQLSTATE table.
//! - [`DatabaseBuilder::config`]: policies and the kill switch from a
//!   `retryscope-config` file, reloaded live; a call's `override_policy`
//!   wins over the file, except over the kill switch.
//!
//! ```no_run
//! use retryscope::Policy;
//! use retryscope_sqlx::{Database, Isolation};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let db = Database::new(sqlx::PgPool::connect("postgres://app:secret@127.0.0.1:5432/shop").await?);
//! let moved = db
//!     .transaction(Policy::interactive())
//!     .isolation(Isolation::Serializable)
//!     .operation("transfer")
//!     .run(|tx| Box::pin(async move {
//!         sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 1").execute(&mut **tx).await?;
//!         sqlx::query("UPDATE accounts SET balance = balance + 10 WHERE id = 2").execute(&mut **tx).await?;
//!         Ok(10)
//!     }))
//!     .await?;
//! # let _ = moved;
//! # Ok(()) }
//! ```
//!
//! # Telemetry
//!
//! Each attempt — each run of the transaction — is a CLIENT span following the
//! OpenTelemetry database conventions: `db.system.name` = `postgresql`,
//! `db.operation.name` (the [`operation`](TransactionBuilder::operation) you
//! name), `db.namespace` (the database), `db.response.status_code` (the
//! SQLSTATE of a failure), `error.type`, `server.address`, `server.port`; the
//! query text is never recorded. Nor is it exported by way of sqlx's own log:
//! sqlx logs a statement slower than 1 s at WARN (target `sqlx::query`, the SQL
//! in `summary` and `db.statement`) while the attempt span is current, and
//! `retryscope_otel::Telemetry::layer()` never exports those events
//! (`retryscope_otel::ExportFilter`); a tracing-opentelemetry layer of your own
//! should carry that filter, or turn `sqlx::query` off. The metrics are the contract's, with
//! `error.type` the SQLSTATE and `retryscope.dependency` = `host:port/database`.
//!
//! # Further reading
//!
//! - The telemetry contract: [docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md).
//! - The runbook: [docs/runbook.md](https://github.com/retryscope/retryscope/blob/main/docs/runbook.md).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod attempt;
pub mod classify;
mod database;
mod error;
pub mod labels;
mod processed;
mod spans;
mod statement;
mod transaction;

pub use attempt::WorkFuture;
pub use database::{Database, DatabaseBuilder};
pub use error::{Failure, commit_outcome_unknown};
pub use labels::sqlstate_error_type;
pub use processed::{ProcessedJobs, ProcessedJobsError, Recorded};
/// The builder's telemetry states, to name a builder after `no_telemetry()`
/// (defined in `retryscope-otel`, one pair for every integration).
#[doc(inline)]
pub use retryscope_otel::telemetry_state;
pub use spans::DB_SYSTEM;
pub use statement::StatementBuilder;
pub use transaction::{Isolation, TransactionBuilder};
