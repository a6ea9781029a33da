//! What the caller gets when the engine stops, decided once ([`Shaped`]) and
//! said in each integration's own error type ([`finish`]).

use crate::NotRetried;
use retryscope::{ErrorType, RetryError, StopReason};
use std::error::Error as StdError;

/// What the caller gets, in the library's error type `E`: the engine's result
/// as [`shape`] decides, a give-up said by `gave_up` (reqwest-middleware's
/// `Error::middleware`, tower's `GaveUp`) and a request that was not retried
/// by `not_retried`; any other error as it came. `status` reads a
/// response's status, for one the layer will not wait out.
pub fn finish<T, E>(
    outcome: Result<T, RetryError<E>>,
    stop: Option<(StopReason, u32)>,
    replayable: bool,
    status: impl FnOnce(&T) -> Option<u16>,
    gave_up: impl FnOnce(RetryError<E>) -> E,
    not_retried: impl FnOnce(NotRetried) -> E,
) -> Result<T, E>
where
    E: Into<Box<dyn StdError + Send + Sync>>,
{
    shape(outcome, stop, replayable, status).map_err(|shaped| match shaped {
        Shaped::GaveUp(error) => gave_up(error),
        Shaped::NotRetried(last) => not_retried(NotRetried::new(last)),
        Shaped::AsItCame(last) => last,
    })
}

/// The engine's result, decided but not yet in the library's error type.
#[derive(Debug)]
pub enum Shaped<E> {
    /// The layer stopped for a reason of its own (attempts, deadline, budget,
    /// breaker, an over-long server hint): say why, keeping the last error.
    GaveUp(RetryError<E>),
    /// A retryable failure of a request whose body could not be sent again.
    NotRetried(E),
    /// An error the engine chose not to retry, to pass through as it came: the
    /// engine added nothing but that decision, which the telemetry records.
    AsItCame(E),
}

/// Turns the engine's result into what the caller gets.
///
/// A response is returned as it came, also when retries ran out on it (a 503):
/// it is the server's answer. A response whose server asked for a wait the
/// layer will not make ([`StopReason::HintTooLong`]) becomes [`Shaped::GaveUp`]
/// with its status as the `error.type`, when `status` gives one (gRPC, whose
/// statuses are not HTTP's, gives none and keeps the response).
pub fn shape<T, E>(
    outcome: Result<T, RetryError<E>>,
    stop: Option<(StopReason, u32)>,
    replayable: bool,
    status: impl FnOnce(&T) -> Option<u16>,
) -> Result<T, Shaped<E>> {
    let error = match outcome {
        // The server asked for a wait we will not make: say so rather than hand
        // back a 429 as if nothing had been decided.
        Ok(response) => {
            return match stop {
                Some((reason @ StopReason::HintTooLong { .. }, attempts)) => match status(&response) {
                    Some(code) => Err(Shaped::GaveUp(RetryError::new(
                        reason,
                        attempts,
                        Some(ErrorType::Status(code)),
                        None,
                    ))),
                    None => Ok(response),
                },
                _ => Ok(response),
            };
        }
        Err(error) => error,
    };
    let reason = error.reason();
    if !matches!(reason, StopReason::Permanent | StopReason::Unrepeatable) {
        return Err(Shaped::GaveUp(error));
    }
    let (attempts, error_type) = (error.attempts(), error.error_type());
    match error.into_last_error() {
        Some(last) if !replayable && reason == StopReason::Unrepeatable => Err(Shaped::NotRetried(last)),
        Some(last) => Err(Shaped::AsItCame(last)),
        // A timeout on a request that may have reached the server.
        None => Err(Shaped::GaveUp(RetryError::new(reason, attempts, error_type, None))),
    }
}
