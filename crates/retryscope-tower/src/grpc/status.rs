//! What a gRPC response says: its status (from the headers of a Trailers-Only
//! response, or from the trailers), the server's pushback, and whether the call
//! is committed.

use super::code::{CodeSet, name};
use super::headers::{self, Pushback};
use crate::body::ResponseBody;
use http::{HeaderMap, Response, StatusCode};
use http_body::Body;
use retryscope::outcome::{ErrorType, Hint, Verdict};
use tracing::Span;

/// INTERNAL: a response that ended without any status.
const INTERNAL: u8 = 13;

/// A status received before any response message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Received {
    pub(crate) code: u8,
    pub(crate) pushback: Option<Pushback>,
}

/// The status of `response` if it came before any message; `None` once the first
/// message arrived (the call is committed: A6 never retries it, and its status
/// comes later, in the trailers).
pub(crate) fn received<B: Body>(response: &Response<ResponseBody<B>>) -> Option<Received> {
    let from = |metadata: &HeaderMap| {
        headers::status(metadata).map(|code| Received { code, pushback: headers::pushback(metadata) })
    };
    if let Some(status) = from(response.headers()) {
        return Some(status);
    }
    if let Some(status) = response.body().peeked_trailers().and_then(from) {
        return Some(status);
    }
    if response.status() != StatusCode::OK {
        return Some(Received { code: headers::status_of_http(response.status()), pushback: None });
    }
    if response.body().peeked_message() {
        return None;
    }
    Some(Received { code: INTERNAL, pushback: None })
}

/// The engine's verdict on a status received before any message.
pub(crate) fn verdict(status: Received, retryable: CodeSet) -> Verdict {
    if status.code == 0 {
        return Verdict::Success;
    }
    let error = ErrorType::Kind(name(status.code));
    if !retryable.contains_number(status.code) {
        return Verdict::permanent(error);
    }
    match status.pushback {
        None => Verdict::retryable(error),
        Some(Pushback::Wait(delay)) => Verdict::Retryable { error, hint: Some(Hint::grpc_pushback(delay)) },
        // The server asked not to retry: a failure all the same, so it still
        // counts against the throttle and the breaker.
        Some(Pushback::Stop) => Verdict::unrepeatable(error),
    }
}

/// Records `rpc.grpc.status_code` on an attempt span. For a status received
/// before any message the engine's verdict records `error.type` and the span's
/// status itself.
pub(crate) fn record_code(span: &Span, code: u8) {
    span.record("rpc.grpc.status_code", i64::from(code));
}

/// The trailers hook of a committed call, which the engine saw succeed: records
/// the final status, with `error.type` and status Error when it is not OK.
pub(crate) fn record_trailers(span: &Span, trailers: &HeaderMap) {
    if let Some(code) = headers::status(trailers) {
        record_code(span, code);
        if code != 0 {
            span.record("error.type", name(code));
            span.record("otel.status_code", "ERROR");
        }
    }
}
