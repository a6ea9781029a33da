//! What can go wrong building a share.

use std::error::Error;
use std::fmt;

/// A share that could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum ShareError {
    /// The quota name is not one (see [`QuotaName`](crate::QuotaName)).
    QuotaName(&'static str),
    /// The deadline of a Redis operation is 0 or longer than 1 s.
    Timeout(std::time::Duration),
    /// Built outside a tokio runtime: the share's background tasks need one.
    NoRuntime,
    /// The Redis URL or client is not usable.
    Redis(redis::RedisError),
}

impl fmt::Display for ShareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShareError::QuotaName(why) => write!(f, "invalid quota name: {why}"),
            ShareError::Timeout(timeout) => {
                write!(f, "a Redis operation's deadline must be more than 0 and at most 1 s, not {timeout:?}")
            }
            ShareError::NoRuntime => f.write_str("a Redis pace share must be built inside a tokio runtime"),
            ShareError::Redis(_) => f.write_str("cannot use the Redis client"),
        }
    }
}

impl Error for ShareError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ShareError::Redis(error) => Some(error),
            _ => None,
        }
    }
}
