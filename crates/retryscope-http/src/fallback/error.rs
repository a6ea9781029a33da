//! What a caller gets when a call gave up and its fallback failed too.

use super::{BoxError, FallbackReason};
use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A fallback's own failure, before the integration adds the call's.
#[derive(Debug)]
pub struct FallbackError {
    pub(super) name: Arc<str>,
    pub(super) reason: FallbackReason,
    pub(super) error: BoxError,
}

impl FallbackError {
    /// The call's failure joined to the fallback's: what the caller gets.
    pub fn with_original(self, original: BoxError) -> FallbackFailed {
        FallbackFailed {
            name: self.name,
            reason: self.reason,
            fallback: FallbackCause { error: self.error, original },
        }
    }
}

/// A fallback ran out of the call's time.
#[derive(Debug)]
pub(super) struct FallbackTimedOut(pub(super) Duration);

impl fmt::Display for FallbackTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the fallback did not answer within the call's remaining {:?}", self.0)
    }
}

impl StdError for FallbackTimedOut {}

/// The call gave up, and its fallback failed too. Its
/// [`source`](StdError::source) is the fallback's error, whose own source is
/// the call's failure (as it would have reached the caller without a
/// fallback: the integration's give-up error or the last error): a reporter
/// that walks the chain prints both.
#[derive(Debug)]
pub struct FallbackFailed {
    name: Arc<str>,
    reason: FallbackReason,
    fallback: FallbackCause,
}

impl FallbackFailed {
    /// The fallback's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Why the fallback ran.
    pub fn reason(&self) -> FallbackReason {
        self.reason
    }

    /// The fallback's own error.
    pub fn fallback_error(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.fallback.error
    }

    /// The call's failure, as it would have reached the caller without a fallback.
    pub fn original(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.fallback.original
    }
}

impl fmt::Display for FallbackFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the call gave up ({}) and its fallback `{}` failed", self.reason, self.name)
    }
}

impl StdError for FallbackFailed {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.fallback)
    }
}

/// The fallback's error as a link of [`FallbackFailed`]'s chain: it prints
/// as the fallback's error, and its source is the call's failure.
#[derive(Debug)]
struct FallbackCause {
    error: BoxError,
    original: BoxError,
}

impl fmt::Display for FallbackCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fallback: {}", self.error)
    }
}

impl StdError for FallbackCause {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.original)
    }
}
