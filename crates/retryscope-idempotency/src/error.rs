//! A store's failure.

use std::error::Error;
use std::fmt;

/// A store could not answer: the layer runs nothing it cannot record, and
/// answers 503 with `Retry-After: 1`.
#[derive(Debug)]
pub struct StoreError {
    operation: &'static str,
    source: Option<Box<dyn Error + Send + Sync>>,
}

impl StoreError {
    /// A failure of `operation` (`claim`, `complete`, `release`, `renew`, `raise_mark`), caused by `source`.
    pub fn new(operation: &'static str, source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        Self { operation, source: Some(source.into()) }
    }

    /// `operation` did not answer within the layer's store timeout.
    pub(crate) const fn timeout(operation: &'static str) -> Self {
        Self { operation, source: None }
    }

    /// What failed: `claim`, `complete`, `release` or `renew`.
    pub const fn operation(&self) -> &'static str {
        self.operation
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source {
            Some(_) => write!(f, "the idempotency store failed to {}", self.operation),
            None => write!(f, "the idempotency store did not {} in time", self.operation),
        }
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.source.as_deref().map(|source| source as &(dyn Error + 'static))
    }
}
