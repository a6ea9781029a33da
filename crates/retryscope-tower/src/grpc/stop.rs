//! What a gRPC caller gets when the layer stops: a `tonic::Status` a tonic
//! client decodes as it decodes a server's, never an opaque error that it
//! would turn into `UNKNOWN`.
//!
//! - the call's deadline passed → `DEADLINE_EXCEEDED`, whichever timer fired
//!   first (the layer's, or the server's answering `CANCELLED` or
//!   `DEADLINE_EXCEEDED` to the `grpc-timeout` it was sent);
//! - retries throttled (token bucket, retry budget) or the circuit breaker
//!   open → the last attempt's status when it left one (its message saying
//!   that a retry was refused, and why), else `UNAVAILABLE` saying which;
//! - not retried because the request body could not be sent again → the
//!   server's status, its message saying so;
//! - otherwise the last attempt's status, unchanged.
//!
//! Each status that a retry was held back from carries [`NOT_RETRIED`] in its
//! metadata, saying why: [`NOT_RETRIED_BODY`], [`NOT_RETRIED_THROTTLED`] or
//! [`NOT_RETRIED_CIRCUIT_OPEN`].

use super::code::{CodeSet, name};
use super::headers::Pushback;
use super::status;
use crate::error::{BoxError, GaveUp};
use crate::response::ResponseBody;
use http::{HeaderValue, Response};
use http_body::Body;
use retryscope::{RetryError, StopReason};
use std::sync::Arc;
use tokio::time::Instant;
use tonic::Status;

/// The metadata key on a status whose failure would have been retried, but
/// was not for a reason of the layer's own: its value says which.
pub const NOT_RETRIED: &str = "retryscope-not-retried";
/// [`NOT_RETRIED`]: the request body was streamed or larger than the replay
/// limit, so it could not be sent again.
pub const NOT_RETRIED_BODY: &str = "body-not-replayable";
/// [`NOT_RETRIED`]: the retry throttling (token bucket) or the retry budget
/// refused the retry.
pub const NOT_RETRIED_THROTTLED: &str = "throttled";
/// [`NOT_RETRIED`]: the circuit breaker is open.
pub const NOT_RETRIED_CIRCUIT_OPEN: &str = "circuit-open";
/// [`NOT_RETRIED`]: the dependency's pacer (opt-in in gRPC mode) holds every
/// call for longer than the call's deadline allows.
pub const NOT_RETRIED_RATE_LIMITED: &str = "rate-limited";
/// [`NOT_RETRIED`]: the dependency's adaptive throttle (opt-in) rejected the
/// attempt locally: the dependency accepts too few of this client's requests.
pub const NOT_RETRIED_REJECTED_LOCALLY: &str = "rejected-locally";

/// Why a retryable failure was not retried.
#[derive(Debug, Clone, Copy)]
enum Held {
    Body,
    Throttled(&'static str),
    CircuitOpen,
    RateLimited,
    RejectedLocally,
}

impl Held {
    /// The value of [`NOT_RETRIED`].
    fn value(self) -> &'static str {
        match self {
            Held::Body => NOT_RETRIED_BODY,
            Held::Throttled(_) => NOT_RETRIED_THROTTLED,
            Held::CircuitOpen => NOT_RETRIED_CIRCUIT_OPEN,
            Held::RateLimited => NOT_RETRIED_RATE_LIMITED,
            Held::RejectedLocally => NOT_RETRIED_REJECTED_LOCALLY,
        }
    }

    /// What the status's message gains. Printable ASCII without `%`: the same
    /// text raw and percent-encoded, as `grpc-message` carries it.
    fn message(self, attempts: u32) -> String {
        match self {
            Held::Body => "(not retried: the request body was streamed or larger than the replay limit, so it was sent once)".to_owned(),
            Held::Throttled(guard) => format!("(not retried: the {guard} refused a retry after {attempts} attempt(s))"),
            Held::CircuitOpen => format!("(not retried: the circuit breaker opened after {attempts} attempt(s))"),
            Held::RateLimited => format!(
                "(not sent again: the server's pushback holds every call past this call's deadline, after {attempts} attempt(s))"
            ),
            Held::RejectedLocally => format!(
                "(not sent again: rejected locally, the dependency accepts too few of this client's requests, after {attempts} attempt(s))"
            ),
        }
    }

    /// `status` saying it was not retried, and why.
    fn mark(self, status: &Status, attempts: u32) -> Status {
        let mut metadata = status.metadata().clone();
        metadata.insert(NOT_RETRIED, tonic::metadata::MetadataValue::from_static(self.value()));
        let message = match status.message() {
            "" => self.message(attempts),
            said => format!("{said} {}", self.message(attempts)),
        };
        Status::with_details_and_metadata(status.code(), message, status.details().to_vec().into(), metadata)
    }
}

/// What the ending of one call depends on besides the engine's result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ending {
    /// Whether the request body could be sent again.
    pub(crate) replayable: bool,
    /// When the call's deadline passes, if it has one: read only by a call
    /// that did not end OK ([`expired`](Self::expired)), so that only such a
    /// call reads the clock.
    pub(crate) deadline_at: Option<Instant>,
    /// The codes the call retries.
    pub(crate) codes: CodeSet,
    /// The dependency's retry guard, as the throttled message names it.
    pub(crate) guard: Option<&'static str>,
}

impl Ending {
    /// Whether the call's deadline has passed: asked as the call ends.
    fn expired(&self) -> bool {
        self.deadline_at.is_some_and(|at| Instant::now() >= at)
    }
}

/// The engine's result as a gRPC caller gets it.
#[inline(always)]
pub(crate) fn finish<B: Body>(
    outcome: Result<Response<ResponseBody<B>>, RetryError<BoxError>>,
    stop: Option<(StopReason, u32)>,
    ending: Ending,
) -> Result<Response<ResponseBody<B>>, BoxError> {
    match outcome {
        Ok(response) => answered(response, stop, ending),
        Err(error) => Err(stopped(error, ending)),
    }
}

/// The engine returned a response: an OK or committed call, or the status of
/// the last attempt the layer will make.
#[inline(always)]
fn answered<B: Body>(
    mut response: Response<ResponseBody<B>>,
    stop: Option<(StopReason, u32)>,
    ending: Ending,
) -> Result<Response<ResponseBody<B>>, BoxError> {
    let Some(received) = status::received(&response).filter(|r| r.code != 0) else {
        return Ok(response);
    };
    let attempts = stop.map_or(1, |(_, attempts)| attempts);
    if ending.expired() {
        let message = format!(
            "retryscope: the call's deadline passed after {attempts} attempt(s); the last answer was {}",
            name(received.code)
        );
        return Err(Status::deadline_exceeded(message).into());
    }
    let held = match stop {
        Some((StopReason::Unrepeatable, _))
            if !ending.replayable
                && ending.codes.contains_number(received.code)
                && received.pushback != Some(Pushback::Stop) =>
        {
            Some(Held::Body)
        }
        Some((StopReason::BudgetExhausted, _)) => {
            Some(Held::Throttled(ending.guard.unwrap_or("retry guard")))
        }
        Some((StopReason::CircuitOpen, _)) => Some(Held::CircuitOpen),
        Some((StopReason::RateLimited { .. }, _)) => Some(Held::RateLimited),
        Some((StopReason::RejectedLocally, _)) => Some(Held::RejectedLocally),
        _ => None,
    };
    if let Some(held) = held {
        mark(&mut response, held, attempts);
    }
    Ok(response)
}

/// `grpc-message`: the status's message, percent-encoded.
const MESSAGE: &str = "grpc-message";

/// Says in the answer's message and metadata why it was not retried.
fn mark<B: Body>(response: &mut Response<ResponseBody<B>>, held: Held, attempts: u32) {
    let headers = response.headers_mut();
    let added = held.message(attempts);
    let message = match headers.get(MESSAGE).map(HeaderValue::as_bytes) {
        Some(said) if !said.is_empty() => [said, b" ", added.as_bytes()].concat(),
        _ => added.into_bytes(),
    };
    if let Ok(value) = HeaderValue::from_bytes(&message) {
        headers.insert(MESSAGE, value);
    }
    headers.insert(NOT_RETRIED, HeaderValue::from_static(held.value()));
}

/// The engine stopped with an error: a transport failure, or no attempt at all.
fn stopped(error: RetryError<BoxError>, ending: Ending) -> BoxError {
    let (reason, attempts, error_type) = (error.reason(), error.attempts(), error.error_type());
    let passes_through = match reason {
        StopReason::Permanent => true,
        StopReason::Unrepeatable => ending.replayable,
        _ => false,
    };
    let expired = ending.expired();
    let last = match error.into_last_error().map(super::reset::status) {
        // An HTTP/2 reset or GOAWAY: the status gRPC maps it to.
        Some(Ok(status)) if passes_through && !expired => return Box::new(status),
        // The engine decided nothing but not to retry: the error as it came.
        Some(Err(last)) if passes_through && !expired => return last,
        Some(Ok(status)) => Some(status),
        Some(Err(last)) => Some(Status::from_error(last)),
        None => None,
    };
    let mut status = if expired || last.is_none() && reason == StopReason::DeadlineExceeded {
        Status::deadline_exceeded(format!(
            "retryscope: the call's deadline passed after {attempts} attempt(s)"
        ))
    } else {
        match (reason, &last) {
            (StopReason::CircuitOpen, None) => Held::CircuitOpen.mark(
                &Status::unavailable("retryscope: the circuit breaker is open: the call was not sent"),
                attempts,
            ),
            (StopReason::CircuitOpen, Some(last)) => {
                Held::CircuitOpen.mark(&Status::unavailable(last.message()), attempts)
            }
            (StopReason::RateLimited { .. }, None) => Held::RateLimited.mark(
                &Status::unavailable(
                    "retryscope: the server's pushback holds every call past this call's deadline: it was not sent",
                ),
                attempts,
            ),
            (StopReason::RateLimited { .. }, Some(last)) => {
                Held::RateLimited.mark(&Status::unavailable(last.message()), attempts)
            }
            (StopReason::RejectedLocally, None) => Held::RejectedLocally.mark(
                &Status::unavailable(
                    "retryscope: rejected locally: the dependency accepts too few of this client's requests: it was not sent",
                ),
                attempts,
            ),
            (StopReason::RejectedLocally, Some(last)) => {
                Held::RejectedLocally.mark(&Status::unavailable(last.message()), attempts)
            }
            (StopReason::BudgetExhausted, last) => {
                let said = last.as_ref().map_or("", |l| l.message());
                Held::Throttled(ending.guard.unwrap_or("retry guard"))
                    .mark(&Status::unavailable(said), attempts)
            }
            (StopReason::Unrepeatable, Some(last)) => Held::Body.mark(last, attempts),
            // The last attempt's failure, as tonic reads it.
            (_, Some(last)) => Status::with_details_and_metadata(
                last.code(),
                last.message(),
                last.details().to_vec().into(),
                last.metadata().clone(),
            ),
            // A per-attempt time limit (gRPC has none of its own) cut the last one.
            (_, None) => Status::deadline_exceeded(format!(
                "retryscope: the last of {attempts} attempt(s) ran out of its time limit ({reason})"
            )),
        }
    };
    // What the layer decided stays the status's source, for a tower caller (a
    // tonic client drops a status's source): a `GaveUp` whose own source is
    // the last attempt's status, and that status's the original error.
    let decided = RetryError::new(reason, attempts, error_type, last.map(|l| Box::new(l) as BoxError));
    status.set_source(Arc::new(GaveUp::new(decided)));
    Box::new(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Empty;

    fn ending(expired: bool) -> Ending {
        Ending {
            replayable: true,
            deadline_at: expired.then(Instant::now),
            codes: CodeSet::UNAVAILABLE,
            guard: None,
        }
    }

    /// A Trailers-Only answer with `grpc-status: code`.
    fn answer(code: u8) -> Response<ResponseBody<Empty<bytes::Bytes>>> {
        let mut response = Response::new(ResponseBody::new(Empty::new()));
        response.headers_mut().insert("grpc-status", HeaderValue::from(u16::from(code)));
        response
    }

    fn code_of(error: &BoxError) -> Option<tonic::Code> {
        error.downcast_ref::<Status>().map(Status::code)
    }

    #[test]
    fn the_servers_answer_to_a_spent_deadline_is_deadline_exceeded_when_its_timer_won() {
        // tonic servers answer an expired `grpc-timeout` with CANCELLED.
        let stop = Some((StopReason::Permanent, 1));
        let error = finish(Ok(answer(1)), stop, ending(true)).expect_err("the deadline passed");
        assert_eq!(code_of(&error), Some(tonic::Code::DeadlineExceeded));
        let unchanged = finish(Ok(answer(1)), stop, ending(false)).expect("before the deadline");
        assert_eq!(unchanged.headers()["grpc-status"], "1");
        // An OK answer is an OK answer, whenever it came.
        assert!(finish(Ok(answer(0)), None, ending(true)).is_ok());
    }

    #[test]
    fn a_breaker_refusing_the_first_attempt_is_unavailable_saying_so() {
        let refused = RetryError::new(StopReason::CircuitOpen, 0, None, None);
        let error = finish::<Empty<bytes::Bytes>>(Err(refused), None, ending(false)).expect_err("refused");
        let status = error.downcast_ref::<Status>().expect("a status");
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(status.message().contains("circuit breaker is open"), "{status:?}");
        let why = status.metadata().get(NOT_RETRIED).and_then(|v| v.to_str().ok());
        assert_eq!(why, Some(NOT_RETRIED_CIRCUIT_OPEN));
        let gave_up = std::error::Error::source(status).and_then(|s| s.downcast_ref::<GaveUp>());
        assert_eq!(gave_up.map(GaveUp::reason), Some(StopReason::CircuitOpen));
    }

    #[test]
    fn the_not_retried_messages_need_no_percent_encoding() {
        let guards = [
            "retry budget",
            "retry throttling (token bucket)",
            "retry budget or retry throttling (token bucket)",
            "retry guard",
        ];
        let held = [Held::Body, Held::CircuitOpen, Held::RateLimited, Held::RejectedLocally]
            .into_iter()
            .chain(guards.map(Held::Throttled));
        for held in held {
            let message = held.message(12);
            assert!(message.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'%'), "{message}");
        }
    }
}
