//! Whole transactions, replayed from the start on a conflict or a lost
//! connection.

use crate::attempt::{self, AttemptFuture, CallPolicy, Exposure, Judge, WorkFuture, failure};
use crate::database::Database;
use crate::error::{Failure, IN_FAILED_SQL_TRANSACTION};
use crate::labels::COMMIT_OUTCOME_UNKNOWN;
use retryscope::{Policy, RetryError};
use sqlx::{Executor, PgPool, Postgres, Transaction};
use std::sync::{Mutex, PoisonError};

/// The transaction isolation level (`BEGIN ISOLATION LEVEL …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Isolation {
    /// `READ COMMITTED`, PostgreSQL's default.
    ReadCommitted,
    /// `REPEATABLE READ`: may fail with `40001`, which is retried.
    RepeatableRead,
    /// `SERIALIZABLE`: may fail with `40001`, which is retried; PostgreSQL
    /// asks applications to retry such transactions.
    Serializable,
}

impl Isolation {
    fn begin_statement(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "BEGIN ISOLATION LEVEL READ COMMITTED",
            Isolation::RepeatableRead => "BEGIN ISOLATION LEVEL REPEATABLE READ",
            Isolation::Serializable => "BEGIN ISOLATION LEVEL SERIALIZABLE",
        }
    }
}

/// A transaction to run, and run again from the start when PostgreSQL says a
/// retry can succeed: made by [`Database::transaction`].
///
/// Each attempt takes a connection from the pool, begins a transaction, runs
/// the closure on it and commits. When a statement fails, the closure returns
/// its error with `?`; the helper rolls the transaction back before anything
/// else runs on it, and — for a conflict (`40001`, `40P01`) or a lost
/// connection, within the policy's attempts and deadline, and the database's
/// budget and breaker — runs the closure again from the start, in a new
/// transaction. A single statement is never retried inside a failed
/// transaction. A permanent error (`23505`, `42601`, `22P02`, …) ends the call
/// after one attempt.
///
/// - **Swallowed errors.** A closure that ignores a failed statement's error
///   and goes on gets `25P02` (in_failed_sql_transaction) from what follows,
///   and a COMMIT of such a transaction silently rolls back. Neither is run
///   again: the error that aborted the transaction is lost, and a unique
///   violation must not be retried like a deadlock. The call ends with
///   [`Failure::SwallowedError`]. To see this before COMMIT, the helper sends
///   one `SELECT 1` after the closure returns: one round trip per attempt.
/// - **COMMIT.** A connection that fails during COMMIT leaves the outcome
///   unknown: the call ends with [`Failure::CommitOutcomeUnknown`] and the
///   transaction is not run again (so it is never applied twice). The same
///   holds when the policy's deadline or attempt timeout cuts an attempt
///   short during COMMIT ([`commit_outcome_unknown`](crate::commit_outcome_unknown)
///   says so for both).
/// - **Side effects.** The closure runs once per attempt: keep what it does
///   outside the database (sending mail, say) out of it.
///
/// ```no_run
/// use retryscope::{Policy, StopReason};
/// use retryscope_sqlx::{Database, Failure, Isolation};
///
/// # async fn demo(db: Database) -> Result<(), Box<dyn std::error::Error>> {
/// let placed = db
///     .transaction(Policy::interactive())
///     .isolation(Isolation::Serializable)
///     .operation("place_order")
///     .run(|tx| Box::pin(async move {
///         let stock: i32 = sqlx::query_scalar("SELECT stock FROM items WHERE id = 7 FOR UPDATE")
///             .fetch_one(&mut **tx)
///             .await?;
///         sqlx::query("UPDATE items SET stock = $1 WHERE id = 7").bind(stock - 1).execute(&mut **tx).await?;
///         Ok(stock - 1)
///     }))
///     .await;
/// match placed {
///     Ok(left) => println!("{left} left"),
///     // Not run again: look before placing it twice.
///     Err(error) if retryscope_sqlx::commit_outcome_unknown(&error) => eprintln!("{error}: check the order"),
///     Err(error) if matches!(error.last_error(), Some(Failure::Statement(_))) => {
///         eprintln!("{error}, after {} attempt(s)", error.attempts())
///     }
///     Err(error) => return Err(error.into()),
/// }
/// # Ok(()) }
/// ```
#[must_use = "a transaction does nothing until `run` is awaited"]
#[derive(Debug)]
pub struct TransactionBuilder<'a> {
    db: &'a Database,
    policy: CallPolicy,
    isolation: Option<Isolation>,
    operation: Option<&'a str>,
}

impl<'a> TransactionBuilder<'a> {
    pub(crate) fn new(db: &'a Database, policy: Policy) -> Self {
        Self { db, policy: CallPolicy::new(policy), isolation: None, operation: None }
    }

    /// Begins each attempt's transaction at `level` (default: the server's,
    /// `READ COMMITTED` unless configured otherwise).
    pub fn isolation(mut self, level: Isolation) -> Self {
        self.isolation = Some(level);
        self
    }

    /// Runs the call under `policy` whatever the configuration file says (on
    /// a database built with [`config`](crate::DatabaseBuilder::config)),
    /// except under the dependency's kill switch (`enabled = false`: one
    /// attempt). Without a file, the same as the policy the call was made with.
    pub fn override_policy(mut self, policy: Policy) -> Self {
        self.policy.own = Some(policy);
        self
    }

    /// Names the transaction (`db.operation.name`, `retryscope.operation`,
    /// and the span's name), e.g. `"transfer"`. Keep it low-cardinality.
    pub fn operation(mut self, name: &'a str) -> Self {
        self.operation = Some(name);
        self
    }

    /// Runs `work` in a transaction, and again in a new one after each
    /// retryable failure, and commits: the value of the attempt that
    /// committed, or why the engine gave up with the last attempt's
    /// [`Failure`].
    ///
    /// `work` gets the transaction (`&mut **tx` is the connection to run
    /// statements on) and returns a boxed future:
    /// `|tx| Box::pin(async move { …; Ok(value) })`.
    pub async fn run<T, F>(self, work: F) -> Result<T, RetryError<Failure>>
    where
        F: for<'t> FnMut(&'t mut Transaction<'static, Postgres>) -> WorkFuture<'t, T> + Send,
        T: Send,
    {
        let Self { db, policy, isolation, operation } = self;
        let begin = isolation.map(Isolation::begin_statement);
        let (work, exposure) = (Mutex::new(work), Exposure::default());
        let judge = Judge { repeatable: true, exposure: &exposure, exposed_cut: COMMIT_OUTCOME_UNKNOWN };
        let pool = &db.inner.pool;
        let attempt = || once(pool, begin, &work, &exposure);
        attempt::run(db, policy, operation, judge, attempt).await
    }
}

/// One attempt: begin, the work, the check that no error was swallowed, commit.
fn once<'a, T, F>(
    pool: &'a PgPool,
    begin: Option<&'static str>,
    work: &'a Mutex<F>,
    exposure: &'a Exposure,
) -> AttemptFuture<'a, T>
where
    F: for<'t> FnMut(&'t mut Transaction<'static, Postgres>) -> WorkFuture<'t, T> + Send,
    T: Send + 'a,
{
    Box::pin(async move {
        exposure.set(false);
        let tx = match begin {
            Some(statement) => pool.begin_with(statement).await,
            None => pool.begin().await,
        };
        let mut tx = tx.map_err(failure(Failure::Connect))?;
        // The lock is held only while the closure makes its future: attempts
        // never overlap, and the future borrows the transaction, not the closure.
        let future = (work.lock().unwrap_or_else(PoisonError::into_inner))(&mut tx);
        let result = match future.await {
            // A transaction a failed statement aborted answers 25P02 to anything
            // but ROLLBACK; a COMMIT would roll it back without an error.
            Ok(value) => tx.execute("SELECT 1").await.map(|_| value),
            Err(error) => Err(error),
        };
        let value = match result {
            Ok(value) => value,
            Err(error) => {
                // Before anything else runs on the connection. A failed rollback
                // means a broken connection, which the pool discards.
                let _ = tx.rollback().await;
                let swallowed =
                    crate::classify::sqlstate(&error).is_some_and(|c| c == IN_FAILED_SQL_TRANSACTION);
                return Err(failure(if swallowed { Failure::SwallowedError } else { Failure::Statement })(
                    error,
                ));
            }
        };
        exposure.set(true);
        let committed = tx.commit().await;
        exposure.set(false);
        match committed {
            Ok(()) => Ok(value),
            Err(error) if crate::classify::commit_outcome_unknown(&error) => {
                Err(failure(Failure::CommitOutcomeUnknown)(error))
            }
            Err(error) => Err(failure(Failure::Commit)(error)),
        }
    })
}
