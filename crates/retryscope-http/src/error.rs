//! The error both integrations return when a bug would otherwise resend a
//! request that can only be sent once.

use std::error::Error as StdError;
use std::fmt;

/// The engine asked for a second attempt of a request that can only be sent
/// once. The classifiers prevent this; the error exists so that a bug cannot
/// turn into a panic or a silently duplicated request. [`transport::walk`]
/// classifies it as permanent.
///
/// [`transport::walk`]: crate::transport::walk
#[derive(Debug)]
pub struct NotReplayable;

impl fmt::Display for NotReplayable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request body cannot be sent again")
    }
}

impl StdError for NotReplayable {}
