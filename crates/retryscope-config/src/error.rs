//! The one error of this crate: a configuration refused, with where.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// What kind of refusal a [`ConfigError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The file could not be read.
    Io,
    /// The text is not TOML/JSON, has an unknown key, or a value of the wrong
    /// type or shape (a duration that is not `"250ms"`-like).
    Syntax,
    /// A value is outside what it accepts; the message says the allowed range.
    OutOfRange,
    /// Two dependencies can match one call with the same specificity, or one
    /// names no host, path prefix or service.
    Match,
    /// A `body_rule` or `fallback` names nothing registered in code.
    UnknownName,
    /// A key the schema knows that no client applies where it is written (on
    /// a gRPC dependency: `retry_statuses`, `hedging`, `body_rule`,
    /// `idempotency_keys`): refused rather than accepted and ignored; the
    /// message says where it is set instead.
    NotApplied,
    /// A reload found the file empty: a writer caught between truncating
    /// and writing it leaves it so, and an empty file would put every
    /// default back in force (the kill switch off). Only a reload refuses
    /// it; to go back to the defaults, write a file with a comment.
    Empty,
    /// `RETRYSCOPE_CONFIG` is unset, the file has no `.toml`/`.json`
    /// extension, or a reload from the file was asked of a handle without one.
    NoFile,
}

/// Where in the text a refused value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

/// A configuration refused: the file (or `<string>`), the line and column
/// where the text lets us name them (TOML always; JSON for syntax errors), the
/// path of the setting (`dependencies.payments.backoff.initial`), and why.
/// Displays without its source; [`source`](Error::source) keeps it (a
/// [`PolicyError`](retryscope::PolicyError), an `io::Error`, a parser's error).
#[derive(Debug)]
pub struct ConfigError {
    kind: ConfigErrorKind,
    origin: Arc<str>,
    location: Option<Location>,
    path: String,
    message: String,
    source: Option<Box<dyn Error + Send + Sync>>,
}

impl ConfigError {
    pub(crate) fn new(kind: ConfigErrorKind, path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind,
            origin: Arc::from("<string>"),
            location: None,
            path: path.into(),
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with_source(mut self, source: impl Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    pub(crate) fn at(mut self, origin: &Arc<str>, location: Option<Location>) -> Self {
        self.origin = origin.clone();
        if location.is_some() {
            self.location = location;
        }
        self
    }

    pub(crate) fn set_path(&mut self, path: String) {
        self.path = path;
    }

    /// What kind of refusal this is.
    pub fn kind(&self) -> ConfigErrorKind {
        self.kind
    }

    /// The file named, or `<string>` for text given by an API call.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The line and column of the refused value, when known.
    pub fn location(&self) -> Option<Location> {
        self.location
    }

    /// The dotted path of the refused setting (empty when the parser could
    /// not name one: its line and column then say where).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Why, with the allowed range where there is one.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)?;
        if let Some(Location { line, column }) = self.location {
            write!(f, ":{line}:{column}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl Error for ConfigError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn Error + 'static))
    }
}
