//! A service config the layer refused: the field it names, and what is wrong.

use std::fmt;
use std::sync::Arc;

/// A service config the layer refused, naming the field. A JSON syntax error
/// keeps serde_json's error (with its line and column) as its
/// [`source`](std::error::Error::source).
#[derive(Debug, Clone)]
pub struct ServiceConfigError {
    field: String,
    problem: String,
    // Shared so that the error stays `Clone`; serde_json's error is not.
    syntax: Option<Arc<serde_json::Error>>,
}

/// Equal when they name the same field and problem; the syntax error's source is
/// not compared (serde_json's error has no equality).
impl PartialEq for ServiceConfigError {
    fn eq(&self, other: &Self) -> bool {
        self.field == other.field && self.problem == other.problem
    }
}

impl Eq for ServiceConfigError {}

impl ServiceConfigError {
    pub(super) fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self { field: field.into(), problem: problem.into(), syntax: None }
    }

    pub(super) fn syntax(error: serde_json::Error) -> Self {
        Self { field: String::new(), problem: "not valid JSON".to_owned(), syntax: Some(Arc::new(error)) }
    }

    /// The JSON path of the bad field (`methodConfig[0].retryPolicy.maxAttempts`),
    /// or empty for a syntax error.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong with it.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for ServiceConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "invalid gRPC service config: {}", self.problem)
        } else {
            write!(f, "invalid gRPC service config: {}: {}", self.field, self.problem)
        }
    }
}

impl std::error::Error for ServiceConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.syntax.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

pub(super) type Result<T> = std::result::Result<T, ServiceConfigError>;
