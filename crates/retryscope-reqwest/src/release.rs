//! Letting go of a failed response's connection before a backoff wait.
//!
//! The engine keeps the last failed response through the wait, in case the next
//! attempt is refused and the response is all the caller gets. A response whose
//! body has not been read holds its pooled connection, for as long as the wait
//! lasts (up to the policy's `max_server_delay` under a `Retry-After`), and a
//! storm of such waits pins a connection per request. So before a wait the
//! body is taken off the response: status, headers and URL stay.
//!
//! The body is drained in the background, within [`DRAIN_LIMIT`] bytes and
//! [`DRAIN_TIMEOUT`]: a short error page read to the end gives its connection
//! back to the pool, ready for the retry. A longer or slower body is dropped,
//! which closes its connection.

use http_body_util::BodyExt;
use reqwest::{Body, Response, ResponseBuilderExt};
use std::time::Duration;

/// The most bytes of a body read to give its connection back to the pool.
pub(crate) const DRAIN_LIMIT: usize = 64 * 1024;
/// The longest a body is read for before its connection is closed instead.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// `response` without its body; the body is drained or dropped (see the
/// module docs).
pub(crate) fn release_body(response: Response) -> Response {
    let url = response.url().clone();
    let (mut parts, body) = http::Response::from(response).into_parts();
    // Without a runtime to drain on (not the case under reqwest's async
    // client), dropping closes the connection, which releases it too.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(drain(body));
    }
    // The conversion drops the URL; `Response::url` should still say where the
    // answer came from.
    if let Ok(carrier) = http::Response::builder().url(url).body(()) {
        parts.extensions.extend(carrier.into_parts().0.extensions);
    }
    Response::from(http::Response::from_parts(parts, Body::from(Vec::new())))
}

/// Reads `body` to its end within the bounds, then drops it.
async fn drain(body: Body) {
    let read = tokio::time::timeout(DRAIN_TIMEOUT, read_to_end(body)).await;
    let bytes = read.ok().flatten();
    tracing::debug!(
        drained = bytes.is_some(),
        bytes,
        "released the body of a response kept through a backoff wait"
    );
}

/// The length of `body` once read to its end; `None` past [`DRAIN_LIMIT`]
/// bytes or on a read error.
async fn read_to_end(mut body: Body) -> Option<usize> {
    let mut read = 0_usize;
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame.ok()?.data_ref() {
            read += data.len();
            if read > DRAIN_LIMIT {
                return None;
            }
        }
    }
    Some(read)
}
