//! The error the middleware adds: why a failure was not retried.

use std::error::Error as StdError;
use std::fmt;

/// A request failed in a way that would have been retried, but its body is a
/// stream that cannot be sent again.
#[derive(Debug)]
pub struct NotRetried {
    pub(crate) source: reqwest_middleware::Error,
}

impl fmt::Display for NotRetried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not retried: the request body is a stream and cannot be sent again")
    }
}

impl StdError for NotRetried {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.source)
    }
}
