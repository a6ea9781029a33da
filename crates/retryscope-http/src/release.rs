//! A failed response is not allowed to hold its connection through the backoff
//! wait that follows it.
//!
//! The engine keeps the last failed response through the wait, so that it can
//! hand it back if no further attempt is made. Its unread body would pin a
//! pooled connection for the whole wait, which a `Retry-After` can make long,
//! and under load the pool then opens new connections for everyone else. So
//! before the wait the body is read to the end in the background, at most
//! [`DRAIN_LIMIT`] within [`DRAIN_TIMEOUT`], which hands the connection back to
//! the pool; a longer or slower body is dropped, which closes it.

use bytes::Buf;
use http_body::Body;
use http_body_util::BodyExt;
use std::time::Duration;

/// The most of a failed response's body read to save its connection.
pub const DRAIN_LIMIT: usize = 64 * 1024;
/// How long reading a failed response's body to save its connection may take.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Reads `body` to its end on the current tokio runtime, within the limits
/// above, then drops it; outside a runtime it is dropped at once.
pub fn drain_in_background<B>(body: B)
where
    B: Body + Send + 'static,
    B::Data: Send,
{
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(drain(body));
    }
}

async fn drain<B: Body>(body: B) {
    let read = tokio::time::timeout(DRAIN_TIMEOUT, read_to_end(body)).await;
    let bytes = read.ok().flatten();
    tracing::debug!(
        drained = bytes.is_some(),
        bytes,
        "released the body of a response kept through a backoff wait"
    );
}

/// The body's length, if it ends within [`DRAIN_LIMIT`] without an error.
async fn read_to_end<B: Body>(body: B) -> Option<usize> {
    let mut body = std::pin::pin!(body);
    let mut read = 0_usize;
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame.ok()?.data_ref() {
            read += data.remaining();
            if read > DRAIN_LIMIT {
                return None;
            }
        }
    }
    Some(read)
}
