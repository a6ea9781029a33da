//! PostgreSQL failures by SQLSTATE (and sqlx's own errors) → what a retry may do.
//!
//! | SQLSTATE / sqlx error | meaning | [`Class`] | retried by [`transaction`](crate::Database::transaction) | retried by [`statement`](crate::Database::statement) |
//! |---|---|---|---|---|
//! | `40001` serialization_failure, `40P01` deadlock_detected | the server rolled the transaction back over a conflict | [`Conflict`](Class::Conflict) | yes, the whole transaction | yes (the statement was rolled back) |
//! | class `08` (connection exceptions), `53300` too_many_connections, `57P01` admin_shutdown, `57P02` crash_shutdown, `57P03` cannot_connect_now | the connection or the server went away, or would not take one more | [`Connection`](Class::Connection) | yes (nothing was committed) | only if marked [`idempotent`](crate::StatementBuilder::idempotent), or when it happened while connecting |
//! | `Io` (any I/O error), `PoolTimedOut` | the same, seen by the driver or the pool | [`Connection`](Class::Connection) | yes | as above |
//! | the above *during COMMIT* (an I/O error, a closed connection, class `08`, `57P0x`), or an attempt cut short by the deadline or attempt timeout during COMMIT | the commit may or may not have happened | — | **never**: [`Failure::CommitOutcomeUnknown`](crate::Failure::CommitOutcomeUnknown) | — |
//! | `25P02` in_failed_sql_transaction | the closure swallowed a failed statement's error and went on | — | never: [`Failure::SwallowedError`](crate::Failure::SwallowedError) | never |
//! | `23xxx` (integrity: `23505` unique_violation, `23503` foreign_key_violation, …), `42xxx` (syntax and access: `42601` syntax_error, `42P01` undefined_table, `42501` insufficient_privilege, …), `22xxx` (data: `22P02` invalid_text_representation, `22012` division_by_zero, …), every other SQLSTATE | a logic or data error: running it again gives the same answer | [`Permanent`](Class::Permanent) | no | no |
//! | `PoolClosed`, `Protocol`, `Configuration`, `Tls`, decoding and encoding errors, `RowNotFound`, … | the program's or the setup's mistake | [`Permanent`](Class::Permanent) | no | no |
//!
//! Every failure is reported with `error.type` = its SQLSTATE (see
//! [`sqlstate_error_type`]), or, without one, one of
//! [`labels::KINDS`] or the engine's `connect`, `reset`,
//! `timeout`, `incomplete`, `_OTHER` for I/O errors.

use crate::labels::{self, sqlstate_error_type};
use retryscope::ErrorType;
use retryscope::classify::io_error;

/// What a failure allows a retry to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Class {
    /// The server rolled the transaction back because it conflicted with
    /// another (`40001` serialization_failure, `40P01` deadlock_detected):
    /// running the whole transaction again is what PostgreSQL asks for.
    Conflict,
    /// The connection or the server is unavailable (class `08`, `53300`,
    /// `57P01`–`57P03`, an I/O error, the pool's timeout): retryable when
    /// nothing was committed or the operation is idempotent.
    Connection,
    /// A logic, data or setup error: retrying gives the same answer.
    Permanent,
}

/// A failure's [`Class`] and the `error.type` it is reported as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Classification {
    /// What a retry may do.
    pub class: Class,
    /// `error.type`: the SQLSTATE, or a named kind.
    pub error_type: ErrorType,
}

/// The [`Class`] of a SQLSTATE.
///
/// ```
/// use retryscope_sqlx::classify::{Class, sqlstate_class};
///
/// assert_eq!(sqlstate_class("40001"), Class::Conflict);
/// assert_eq!(sqlstate_class("08006"), Class::Connection);
/// assert_eq!(sqlstate_class("23505"), Class::Permanent);
/// ```
pub fn sqlstate_class(code: &str) -> Class {
    match code {
        "40001" | "40P01" => Class::Conflict,
        "53300" | "57P01" | "57P02" | "57P03" => Class::Connection,
        _ if code.starts_with("08") => Class::Connection,
        _ => Class::Permanent,
    }
}

/// Classifies an error from sqlx: a database error by its SQLSTATE, the
/// driver's and the pool's own errors by their kind (see the [module
/// docs](self) for the table).
///
/// ```
/// use retryscope::ErrorType;
/// use retryscope_sqlx::classify::{Class, classify};
///
/// let timed_out = classify(&sqlx::Error::PoolTimedOut);
/// assert_eq!((timed_out.class, timed_out.error_type), (Class::Connection, ErrorType::Kind("pool_timeout")));
/// let reset = classify(&sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into()));
/// assert_eq!((reset.class, reset.error_type), (Class::Connection, ErrorType::RESET));
/// assert_eq!(classify(&sqlx::Error::RowNotFound).class, Class::Permanent);
/// ```
pub fn classify(error: &sqlx::Error) -> Classification {
    let permanent = |error_type| Classification { class: Class::Permanent, error_type };
    match error {
        sqlx::Error::Database(database) => match database.code() {
            Some(code) => {
                Classification { class: sqlstate_class(&code), error_type: sqlstate_error_type(&code) }
            }
            None => permanent(ErrorType::OTHER),
        },
        // On a database connection any I/O error loses the connection: what
        // was sent may or may not have run, which the caller's stage decides.
        sqlx::Error::Io(io) => Classification {
            class: Class::Connection,
            error_type: io_error(io.kind()).error_type().unwrap_or(ErrorType::OTHER),
        },
        sqlx::Error::PoolTimedOut => {
            Classification { class: Class::Connection, error_type: labels::POOL_TIMEOUT }
        }
        // The background worker of a connection died: the connection is gone.
        sqlx::Error::WorkerCrashed => {
            Classification { class: Class::Connection, error_type: ErrorType::RESET }
        }
        sqlx::Error::PoolClosed => permanent(labels::POOL_CLOSED),
        sqlx::Error::Protocol(_) => permanent(labels::PROTOCOL),
        sqlx::Error::Configuration(_) | sqlx::Error::Tls(_) => permanent(labels::CONFIGURATION),
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) | sqlx::Error::Encode(_) => {
            permanent(labels::CODEC)
        }
        _ => permanent(ErrorType::OTHER),
    }
}

/// The SQLSTATE of a database error, if it is one.
pub fn sqlstate(error: &sqlx::Error) -> Option<std::borrow::Cow<'_, str>> {
    match error {
        sqlx::Error::Database(database) => database.code(),
        _ => None,
    }
}

/// Whether a failure of COMMIT leaves the outcome unknown: the server did not
/// answer (an I/O error, a closed connection, a dead worker), or answered that
/// it is going away (class `08`, `57P0x`), which it may do after the commit.
/// An ordinary error answer (`40001` at commit, a deferred `23505`) means the
/// transaction was rolled back.
pub(crate) fn commit_outcome_unknown(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(_) => sqlstate(error)
            .is_some_and(|code| code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03")),
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sqlstate_table_gives_each_class_its_verdict() {
        for code in ["40001", "40P01"] {
            assert_eq!(sqlstate_class(code), Class::Conflict, "{code}");
        }
        for code in ["08000", "08003", "08006", "08001", "08004", "08P01", "53300", "57P01", "57P02", "57P03"]
        {
            assert_eq!(sqlstate_class(code), Class::Connection, "{code}");
        }
        for code in [
            "23505", "23503", "23502", "42601", "42P01", "42501", "22P02", "22012", "25P02", "53100",
            "57014", "XX000",
        ] {
            assert_eq!(sqlstate_class(code), Class::Permanent, "{code}");
        }
    }

    #[test]
    fn an_io_error_or_a_closed_connection_at_commit_leaves_the_outcome_unknown() {
        assert!(commit_outcome_unknown(&sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into())));
        assert!(commit_outcome_unknown(&sqlx::Error::Io(std::io::ErrorKind::UnexpectedEof.into())));
        assert!(commit_outcome_unknown(&sqlx::Error::WorkerCrashed));
        assert!(!commit_outcome_unknown(&sqlx::Error::PoolTimedOut));
        assert!(!commit_outcome_unknown(&sqlx::Error::RowNotFound));
    }
}
