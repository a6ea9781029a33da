//! The `error.type` values this crate reports: a failure's SQLSTATE, or one of
//! a few named kinds for failures without one.

use retryscope::ErrorType;
use std::sync::{Mutex, PoisonError};

/// sqlx's pool gave no connection within its `acquire_timeout`.
pub const POOL_TIMEOUT: ErrorType = ErrorType::Kind("pool_timeout");
/// The pool was closed: no connection will ever come.
pub const POOL_CLOSED: ErrorType = ErrorType::Kind("pool_closed");
/// The connection failed during COMMIT: whether the transaction was committed
/// is unknown, so it is never run again.
pub const COMMIT_OUTCOME_UNKNOWN: ErrorType = ErrorType::Kind("commit_outcome_unknown");
/// The driver and the server did not understand each other (sqlx's
/// `Protocol` error).
pub const PROTOCOL: ErrorType = ErrorType::Kind("protocol");
/// The pool's or the connection's settings are wrong, TLS included.
pub const CONFIGURATION: ErrorType = ErrorType::Kind("configuration");
/// A row or column could not be decoded, or an argument encoded.
pub const CODEC: ErrorType = ErrorType::Kind("codec");

/// The named kinds this crate reports besides SQLSTATEs (and besides the
/// engine's own `connect`, `reset`, `timeout` and `_OTHER`).
pub const KINDS: [ErrorType; 6] =
    [POOL_TIMEOUT, POOL_CLOSED, COMMIT_OUTCOME_UNKNOWN, PROTOCOL, CONFIGURATION, CODEC];

/// How many distinct SQLSTATEs one process reports; further codes are
/// reported as `_OTHER` (the span's `db.response.status_code` still says which).
/// PostgreSQL defines about 250 codes, and an application rarely meets more
/// than a dozen.
pub const MAX_SQLSTATES: usize = 256;

/// A SQLSTATE as an `error.type`: the code itself, from a process-wide table
/// of at most [`MAX_SQLSTATES`] codes. Anything that is not five ASCII digits or
/// upper-case letters is `_OTHER`.
///
/// ```
/// use retryscope::ErrorType;
///
/// assert_eq!(retryscope_sqlx::sqlstate_error_type("40001"), ErrorType::Kind("40001"));
/// assert_eq!(retryscope_sqlx::sqlstate_error_type("not a code"), ErrorType::OTHER);
/// ```
pub fn sqlstate_error_type(code: &str) -> ErrorType {
    // `ErrorType` holds a `&'static str`: each code is leaked once (five bytes,
    // at most MAX_SQLSTATES of them) and found again on every later failure.
    static CODES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let valid = code.len() == 5 && code.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_uppercase());
    if !valid {
        return ErrorType::OTHER;
    }
    let mut codes = CODES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = codes.iter().find(|known| **known == code) {
        return ErrorType::Kind(known);
    }
    if codes.len() >= MAX_SQLSTATES {
        return ErrorType::OTHER;
    }
    let leaked: &'static str = Box::leak(code.to_owned().into_boxed_str());
    codes.push(leaked);
    ErrorType::Kind(leaked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_seen_twice_is_the_same_label_and_lower_case_is_not_a_code() {
        assert_eq!(sqlstate_error_type("23505"), sqlstate_error_type("23505"));
        assert_eq!(sqlstate_error_type("23505").to_string(), "23505");
        assert_eq!(sqlstate_error_type("2350"), ErrorType::OTHER);
        assert_eq!(sqlstate_error_type("40p01"), ErrorType::OTHER);
    }
}
