//! Why a storm could not run, with what it was doing and what failed underneath.

use std::fmt;

/// Why a storm could not run: a setting out of range, or what it was doing when
/// something failed, with that failure as its [`source`](std::error::Error::source).
#[derive(Debug)]
pub struct StormError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl StormError {
    /// A refusal with nothing underneath (a setting out of range).
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), source: None }
    }
}

impl fmt::Display for StormError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for StormError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// What the storm was doing (`context`) when `e` happened; `e` stays the source.
pub(crate) fn error(context: &str, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StormError {
    StormError { message: context.to_owned(), source: Some(e.into()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_failure_is_the_source_of_the_storm_error_and_printed_once() {
        let cause = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "read-only file system");
        let e = error("creating --out", cause);
        assert_eq!(e.to_string(), "creating --out");
        assert_eq!(e.source().map(ToString::to_string).as_deref(), Some("read-only file system"));
        assert!(StormError::new("--queue must be between 1 and 100000").source().is_none());
    }
}
