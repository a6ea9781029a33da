//! What the caller gets when the engine stops, decided once ([`Shaped`]) and
//! said in each integration's own types ([`Answers`]): the engine's result
//! ([`Answers::finish`]), or a fallback's answer ([`answer_with`]).

use crate::NotRetried;
use crate::fallback::{BoxError, Chosen, FallbackFailed, LastAnswer};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use retryscope::{ErrorType, RetryError, StopReason};
use std::error::Error as StdError;
use std::time::Duration;

/// An HTTP integration's response and error types, and what the end of a
/// call reads of them and makes in them. Each integration says it once
/// (reqwest-middleware's, tower's); what its caller gets is then decided
/// here, for both.
pub trait Answers {
    /// A response as the integration's caller gets it.
    type Response;
    /// The integration's error type.
    type Error: Into<BoxError>;

    /// A response's status and headers.
    fn head(response: &Self::Response) -> (StatusCode, &HeaderMap);

    /// An error, as a fallback is told it.
    fn error(error: &Self::Error) -> &(dyn StdError + Send + Sync + 'static);

    /// The error that says why the layer stopped, keeping the last error
    /// (reqwest-middleware's `Error::middleware`, tower's `GaveUp`).
    fn gave_up(error: RetryError<Self::Error>) -> Self::Error;

    /// The error of a retryable failure of a request whose body could not
    /// be sent again.
    fn not_retried(error: NotRetried) -> Self::Error;

    /// A fallback's answer, as the caller's response.
    fn answered(response: http::Response<Bytes>) -> Self::Response;

    /// A fallback that failed too, as the caller's error.
    fn fallback_failed(error: FallbackFailed) -> Self::Error;

    /// What the caller gets from the engine's `outcome` ([`shape`]
    /// decides): a response as it came, else the integration's error.
    #[inline]
    fn finish(
        outcome: Result<Self::Response, RetryError<Self::Error>>,
        stop: Option<(StopReason, u32)>,
        replayable: bool,
    ) -> Result<Self::Response, Self::Error> {
        let status = |response: &Self::Response| Some(Self::head(response).0.as_u16());
        finish(outcome, stop, replayable, status, Self::gave_up, Self::not_retried)
    }
}

/// Answers a call that gave up with the fallback `chosen` for it: the
/// fallback's response, marked, or — when the fallback fails too — its error
/// holding what the caller would have got without it
/// ([`Answers::finish`]; a give-up on the last response, when retries ran
/// out on one). The fallback is told the `request` (its method, URI and the
/// idempotency key its attempts carried) and the call's last answer, within
/// the call's `remaining` time.
pub async fn answer_with<A: Answers>(
    chosen: Chosen<'_>,
    dependency: &str,
    request: (&Method, &Uri, Option<&HeaderValue>),
    remaining: Option<Duration>,
    outcome: Result<A::Response, RetryError<A::Error>>,
    (stop, replayable): (Option<(StopReason, u32)>, bool),
) -> Result<A::Response, A::Error> {
    let last = match &outcome {
        Ok(response) => {
            let (status, headers) = A::head(response);
            LastAnswer::Response { status, headers }
        }
        Err(error) => {
            error.last_error().map_or(LastAnswer::Nothing, |last| LastAnswer::Error(A::error(last)))
        }
    };
    let error = match chosen.answer(dependency, request, last, remaining).await {
        Ok(response) => return Ok(A::answered(response)),
        Err(error) => error,
    };
    let original = match A::finish(outcome, stop, replayable) {
        Err(original) => original,
        // Retries ran out on a response (a 503): the error says so.
        Ok(response) => {
            let (reason, attempts) = stop.unwrap_or((StopReason::AttemptsExhausted, 0));
            let status = Some(ErrorType::Status(A::head(&response).0.as_u16()));
            A::gave_up(RetryError::new(reason, attempts, status, None))
        }
    };
    Err(A::fallback_failed(error.with_original(original.into())))
}

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
