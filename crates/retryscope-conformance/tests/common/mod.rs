//! What every conformance test names: the two integrations, and what a caller
//! got from either, in terms both can be compared on.

use retryscope::{ErrorType, RetryError, StopReason};
use retryscope_tower::{BoxError, GaveUp};

/// The two integrations under test.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Integration {
    Reqwest,
    Tower,
}

pub(crate) const BOTH: [Integration; 2] = [Integration::Reqwest, Integration::Tower];

/// What a caller got.
#[derive(Debug, PartialEq)]
pub(crate) enum Answer {
    Status(u16),
    GaveUp(StopReason, Option<ErrorType>),
    Other(String),
}

impl Answer {
    /// What a reqwest-middleware caller got.
    pub(crate) fn of_reqwest(result: reqwest_middleware::Result<reqwest::Response>) -> Answer {
        match result {
            Ok(response) => Answer::Status(response.status().as_u16()),
            Err(reqwest_middleware::Error::Middleware(error)) => {
                match error.downcast_ref::<RetryError<reqwest_middleware::Error>>() {
                    Some(gave_up) => Answer::GaveUp(gave_up.reason(), gave_up.error_type()),
                    None => Answer::Other(error.to_string()),
                }
            }
            Err(error) => Answer::Other(error.to_string()),
        }
    }

    /// What a tower caller got.
    pub(crate) fn of_tower<B>(result: Result<http::Response<B>, BoxError>) -> Answer {
        match result {
            Ok(response) => Answer::Status(response.status().as_u16()),
            Err(error) => match error.downcast_ref::<GaveUp>() {
                Some(gave_up) => Answer::GaveUp(gave_up.reason(), gave_up.error_type()),
                None => Answer::Other(error.to_string()),
            },
        }
    }
}
