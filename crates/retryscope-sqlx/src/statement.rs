//! Work on one pooled connection outside a transaction, retried on a conflict,
//! on a failure to connect, and — when the caller says it is safe to run
//! twice — on a lost connection.

use crate::attempt::{self, AttemptFuture, CallPolicy, Exposure, Judge, WorkFuture, failure};
use crate::database::Database;
use crate::error::Failure;
use retryscope::{ErrorType, Policy, RetryError};
use sqlx::PgConnection;
use std::sync::{Mutex, PoisonError};

/// Statements to run on a pooled connection, in autocommit mode: made by
/// [`Database::statement`].
///
/// Retried, within the policy and the database's guards: a conflict
/// (`40001`, `40P01`: PostgreSQL rolled the statement back), and a failure to
/// get a connection (nothing was sent). The closure is meant to run one
/// statement: in autocommit mode each statement commits on its own, so a
/// closure that ran others before the one that conflicted runs them again on
/// the retry, unless they are safe to run twice. A connection lost after the
/// statement was sent may or may not have applied it: retried only when
/// [`idempotent`](Self::idempotent) says running it twice is harmless (a
/// `SELECT`, an `UPDATE … SET x = 5`, an `INSERT … ON CONFLICT DO NOTHING`);
/// otherwise the call ends with the failure, as an attempt cut short by the
/// attempt timeout after it was sent does. For several statements that must
/// apply together, use a [transaction](Database::transaction).
///
/// ```no_run
/// use retryscope::Policy;
/// use retryscope_sqlx::Database;
///
/// # async fn demo(db: Database) -> Result<(), Box<dyn std::error::Error>> {
/// // Safe to run twice: retried even when the connection drops mid-statement.
/// let name: String = db
///     .statement(Policy::interactive())
///     .operation("SELECT")
///     .idempotent()
///     .run(|conn| Box::pin(async move { sqlx::query_scalar("SELECT name FROM users WHERE id = 1").fetch_one(conn).await }))
///     .await?;
/// # let _ = name;
/// # Ok(()) }
/// ```
#[must_use = "a statement does nothing until `run` is awaited"]
#[derive(Debug)]
pub struct StatementBuilder<'a> {
    db: &'a Database,
    policy: CallPolicy,
    operation: Option<&'a str>,
    idempotent: bool,
}

impl<'a> StatementBuilder<'a> {
    pub(crate) fn new(db: &'a Database, policy: Policy) -> Self {
        Self { db, policy: CallPolicy::new(policy), operation: None, idempotent: false }
    }

    /// Runs the call under `policy` whatever the configuration file says (on
    /// a database built with [`config`](crate::DatabaseBuilder::config)),
    /// except under the dependency's kill switch (`enabled = false`: one
    /// attempt). Without a file, the same as the policy the call was made with.
    pub fn override_policy(mut self, policy: Policy) -> Self {
        self.policy.own = Some(policy);
        self
    }

    /// Names the operation (`db.operation.name`, `retryscope.operation`): the
    /// statement's first keyword (`"SELECT"`, `"INSERT"`) or a name of yours.
    /// Keep it low-cardinality.
    pub fn operation(mut self, name: &'a str) -> Self {
        self.operation = Some(name);
        self
    }

    /// Says that running the work twice is harmless, so that it is retried
    /// after a connection lost mid-statement too.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// Runs `work` on a pooled connection, and again on a retryable failure:
    /// `|conn| Box::pin(async move { sqlx::query(…).execute(conn).await })`.
    pub async fn run<T, F>(self, work: F) -> Result<T, RetryError<Failure>>
    where
        F: for<'c> FnMut(&'c mut PgConnection) -> WorkFuture<'c, T> + Send,
        T: Send,
    {
        let Self { db, policy, operation, idempotent } = self;
        let (work, exposure) = (Mutex::new(work), Exposure::default());
        let judge = Judge { repeatable: idempotent, exposure: &exposure, exposed_cut: ErrorType::TIMEOUT };
        let pool = &db.inner.pool;
        let attempt = || -> AttemptFuture<'_, T> {
            Box::pin(async {
                exposure.set(false);
                let mut conn = pool.acquire().await.map_err(failure(Failure::Connect))?;
                // From here on the statement may reach the server.
                exposure.set(!idempotent);
                let future = (work.lock().unwrap_or_else(PoisonError::into_inner))(&mut conn);
                future.await.map_err(failure(Failure::Statement))
            })
        };
        attempt::run(db, policy, operation, judge, attempt).await
    }
}
