//! Letting go of a failed response's connection before a backoff wait.
//!
//! The engine keeps the last failed response through the wait, in case the next
//! attempt is refused and the response is all the caller gets. A response whose
//! body has not been read holds its pooled connection, for as long as the wait
//! lasts (up to the policy's `max_server_delay` under a `Retry-After`), and a
//! storm of such waits pins a connection per request. So before a wait the
//! body is taken off the response: status, headers and URL stay.
//!
//! The body is drained in the background by the integrations' one rule
//! ([`retryscope_http::release`]): a short error page read to the end gives its connection
//! back to the pool, ready for the retry. A longer or slower body is dropped,
//! which closes its connection.

use reqwest::{Body, Response};

/// `response` without its body; the body is drained or dropped (see the
/// module docs).
pub(crate) fn release_body(response: Response) -> Response {
    let url = response.url().clone();
    let (parts, body) = http::Response::from(response).into_parts();
    // Without a runtime to drain on (not the case under reqwest's async
    // client), dropping closes the connection, which releases it too.
    retryscope_http::__private::release::drain_in_background(body);
    // `Response::url` should still say where the answer came from.
    crate::read_ahead::rebuilt(parts, url, Body::from(Vec::new()))
}
