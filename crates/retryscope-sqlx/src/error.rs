//! What one attempt's failure was, and what the engine makes of it.

use crate::classify::{Class, classify};
use crate::labels::{self, sqlstate_error_type};
use retryscope::{ErrorType, RetryError, Verdict};
use std::error::Error;
use std::fmt;

/// The failure of one attempt: where it happened, and sqlx's error as its
/// [`source`](Error::source).
///
/// The engine hands the last one back inside a [`RetryError`], which says why
/// it stopped and after how many attempts:
///
/// ```
/// use retryscope::{RetryError, StopReason};
/// use retryscope_sqlx::Failure;
///
/// let lost = Failure::CommitOutcomeUnknown(sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into()));
/// assert_eq!(
///     lost.to_string(),
///     "the connection failed during COMMIT: the transaction may or may not have been committed, so it was not run again"
/// );
/// let error = RetryError::new(StopReason::Unrepeatable, 1, Some(lost.error_type()), Some(lost));
/// assert!(retryscope_sqlx::commit_outcome_unknown(&error));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Failure {
    /// No connection, or no `BEGIN`: nothing of the attempt ran.
    Connect(sqlx::Error),
    /// A statement failed (the closure's error, returned with `?`); the
    /// transaction was rolled back.
    Statement(sqlx::Error),
    /// The closure went on after a failed statement without returning its
    /// error, and PostgreSQL refused what followed (`25P02`
    /// in_failed_sql_transaction): the transaction was rolled back and is not
    /// run again, since the error that aborted it is unknown.
    SwallowedError(sqlx::Error),
    /// The server answered COMMIT with an error (`40001` at commit, a deferred
    /// constraint): the transaction was rolled back.
    Commit(sqlx::Error),
    /// The connection failed during COMMIT: the transaction may or may not
    /// have been committed, so it is never run again. Check the data, or make
    /// the transaction idempotent (an idempotency key in a unique column) and
    /// run it again yourself.
    CommitOutcomeUnknown(sqlx::Error),
}

impl Failure {
    /// sqlx's error.
    pub fn sqlx_error(&self) -> &sqlx::Error {
        match self {
            Failure::Connect(e)
            | Failure::Statement(e)
            | Failure::SwallowedError(e)
            | Failure::Commit(e)
            | Failure::CommitOutcomeUnknown(e) => e,
        }
    }

    /// The SQLSTATE the server sent, if it sent one.
    pub fn sqlstate(&self) -> Option<std::borrow::Cow<'_, str>> {
        crate::classify::sqlstate(self.sqlx_error())
    }

    /// The `error.type` this failure is reported as.
    pub fn error_type(&self) -> ErrorType {
        match self {
            Failure::CommitOutcomeUnknown(_) => labels::COMMIT_OUTCOME_UNKNOWN,
            Failure::SwallowedError(_) => sqlstate_error_type(IN_FAILED_SQL_TRANSACTION),
            _ => classify(self.sqlx_error()).error_type,
        }
    }

    /// What the engine does next. `repeatable`: whether running the work
    /// again after a lost connection is safe (a transaction that did not
    /// commit is; a statement is when the caller says it is idempotent).
    pub(crate) fn verdict(&self, repeatable: bool) -> Verdict {
        let error_type = self.error_type();
        match self {
            // Unrepeatable, not permanent: the dependency failed, and its
            // breaker should hear of it.
            Failure::CommitOutcomeUnknown(_) => Verdict::unrepeatable(error_type),
            Failure::SwallowedError(_) => Verdict::permanent(error_type),
            // Nothing ran: safe whatever the work is.
            Failure::Connect(e) => match classify(e).class {
                Class::Conflict | Class::Connection => Verdict::retryable(error_type),
                Class::Permanent => Verdict::permanent(error_type),
            },
            Failure::Statement(e) | Failure::Commit(e) => match classify(e).class {
                Class::Conflict => Verdict::retryable(error_type),
                Class::Connection if repeatable => Verdict::retryable(error_type),
                Class::Connection => Verdict::unrepeatable(error_type),
                Class::Permanent => Verdict::permanent(error_type),
            },
        }
    }
}

/// `25P02`: what PostgreSQL answers in a transaction a failed statement aborted.
pub(crate) const IN_FAILED_SQL_TRANSACTION: &str = "25P02";

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Failure::Connect(_) => "could not get a connection or begin the transaction",
            Failure::Statement(_) => "a statement failed",
            Failure::SwallowedError(_) => {
                "a statement failed earlier in the transaction and its error was not returned (use `?`): \
                 PostgreSQL refused the rest of the transaction, which was rolled back and not run again"
            }
            Failure::Commit(_) => "COMMIT failed: the transaction was rolled back",
            Failure::CommitOutcomeUnknown(_) => {
                "the connection failed during COMMIT: the transaction may or may not have been committed, \
                 so it was not run again"
            }
        })
    }
}

impl Error for Failure {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(self.sqlx_error())
    }
}

/// Whether the engine stopped because the outcome of a COMMIT is unknown: the
/// connection failed during COMMIT ([`Failure::CommitOutcomeUnknown`]), or the
/// deadline or the attempt timeout cut the attempt short while COMMIT was in
/// flight (then the error holds no last failure, only its `error.type`,
/// `commit_outcome_unknown`).
pub fn commit_outcome_unknown(error: &RetryError<Failure>) -> bool {
    error.error_type() == Some(labels::COMMIT_OUTCOME_UNKNOWN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    fn io(kind: ErrorKind) -> sqlx::Error {
        sqlx::Error::Io(kind.into())
    }

    #[test]
    fn nothing_sent_is_retried_whatever_the_work_and_a_lost_statement_only_when_repeatable() {
        let no_connection = Failure::Connect(sqlx::Error::PoolTimedOut);
        assert_eq!(no_connection.verdict(false), Verdict::retryable(labels::POOL_TIMEOUT));
        let lost = Failure::Statement(io(ErrorKind::ConnectionReset));
        assert_eq!(lost.verdict(true), Verdict::retryable(ErrorType::RESET));
        assert_eq!(lost.verdict(false), Verdict::unrepeatable(ErrorType::RESET));
        assert_eq!(
            Failure::Statement(sqlx::Error::RowNotFound).verdict(true),
            Verdict::permanent(ErrorType::OTHER)
        );
        assert_eq!(
            Failure::Connect(sqlx::Error::PoolClosed).verdict(true),
            Verdict::permanent(labels::POOL_CLOSED)
        );
    }

    #[test]
    fn a_lost_commit_is_never_retried_and_says_why() {
        let lost = Failure::CommitOutcomeUnknown(io(ErrorKind::UnexpectedEof));
        assert_eq!(lost.verdict(true), Verdict::unrepeatable(labels::COMMIT_OUTCOME_UNKNOWN));
        assert_eq!(lost.source().map(ToString::to_string), Some(io(ErrorKind::UnexpectedEof).to_string()));
        assert!(
            !lost.to_string().contains(&io(ErrorKind::UnexpectedEof).to_string()),
            "Display never repeats the source"
        );
    }
}
