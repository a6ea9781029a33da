//! What a gRPC response says: its status (from the headers of a Trailers-Only
//! response, or from the trailers), the server's pushback, and whether the call
//! is committed (A6: at the response headers).

use super::code::{CodeSet, name};
use super::headers::{self, Pushback};
pub(crate) use crate::head::{Head, Received};
use crate::response::ResponseBody;
use http::{HeaderMap, Response, StatusCode};
use http_body::Body;
use retryscope::{ErrorType, Hint, Verdict};
use tracing::Span;

/// The status `response` carries in its headers, if any: a Trailers-Only
/// answer (`grpc-status` in the headers), or an HTTP status other than 200
/// mapped as gRPC maps it. `None` for response headers without a status: the
/// call is committed there (A6) and handed to the caller at once; its status
/// comes later, in the trailers.
pub(crate) fn received<B: Body>(response: &Response<ResponseBody<B>>) -> Option<Received> {
    match response.body().grpc_head() {
        Some(Head::Status(received)) => Some(received),
        Some(Head::Committed) => None,
        None => from_headers(response),
    }
}

/// [`received`], read from the headers and kept with the body, so that
/// nothing reads them again.
pub(crate) fn read<B: Body>(response: &mut Response<ResponseBody<B>>) -> Option<Received> {
    let received = from_headers(response);
    let head = received.map_or(Head::Committed, Head::Status);
    response.body_mut().set_grpc_head(head);
    received
}

fn from_headers<B: Body>(response: &Response<ResponseBody<B>>) -> Option<Received> {
    let metadata = response.headers();
    if let Some(code) = headers::status(metadata) {
        return Some(Received { code, pushback: headers::pushback(metadata) });
    }
    if response.status() != StatusCode::OK {
        return Some(Received { code: headers::status_of_http(response.status()), pushback: None });
    }
    None
}

/// The engine's verdict on a status received with the response headers.
pub(crate) fn verdict(status: Received, retryable: CodeSet) -> Verdict {
    if status.code == 0 {
        return Verdict::Success;
    }
    let error = ErrorType::Kind(name(status.code));
    let hint = match status.pushback {
        // The server asked not to retry: a failure all the same, whatever its
        // code, so it counts against the throttle (A6: "or that receive a
        // pushback response indicating not to retry") and the breaker.
        Some(Pushback::Stop) => return Verdict::unrepeatable(error),
        Some(Pushback::Wait(delay)) => Some(Hint::grpc_pushback(delay)),
        Some(Pushback::AtLeast(delay)) => Some(Hint::retry_after(delay)),
        None => None,
    };
    if !retryable.contains_number(status.code) {
        return Verdict::permanent(error);
    }
    Verdict::Retryable { error, hint }
}

/// Records `rpc.grpc.status_code` on an attempt span. For a status received
/// with the headers the engine's verdict records `error.type` and the span's
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
