//! What a server knows about the request it is serving, handed to the clients
//! it calls while serving it: is that request itself a retry, and did the calls
//! below already retry and give up?
//!
//! The server side (`retryscope-tower`'s server layer, or your own code) runs
//! the handler inside [`Upstream::scope`]; the client integrations read
//! [`Upstream::current`] to retry at one layer only, and report through it when
//! their own retries ran out, so the server can tell its caller not to retry.
//! It travels in the OpenTelemetry [`Context`], which follows a future through
//! [`scope`](Upstream::scope) but not into tasks it spawns.

use crate::incoming::{IncomingAttempt, exhausted_attempts};
use http::HeaderMap;
use opentelemetry::Context;
use opentelemetry::context::{FutureExt as _, WithContext};
use retryscope::StopReason;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The request a server is serving, as seen by the clients it calls.
///
/// ```
/// use retryscope_otel::{IncomingAttempt, Upstream};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let upstream = Upstream::new(IncomingAttempt::from_headers(&http::HeaderMap::new()));
/// let handled = upstream.clone().scope(async {
///     // A client called here sees the request it serves…
///     let current = Upstream::current().expect("inside the scope");
///     assert!(!current.attempt().is_retry());
///     // …and reports that its retries below ran out after 4 attempts.
///     current.retries_exhausted(4);
/// });
/// handled.await;
/// assert_eq!(upstream.exhausted_below(), Some(4));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Upstream {
    attempt: IncomingAttempt,
    /// The most attempts a client made below before giving up; 0 if none gave up.
    exhausted: Arc<AtomicU32>,
}

impl Upstream {
    /// The request being served is `attempt` of its caller.
    pub fn new(attempt: IncomingAttempt) -> Self {
        Self { attempt, exhausted: Arc::default() }
    }

    /// The request being served by the current task, if its server set one.
    pub fn current() -> Option<Upstream> {
        Context::map_current(|cx| cx.get::<Upstream>().cloned())
    }

    /// Runs `handler` with this request as [`current`](Self::current).
    pub fn scope<F: Future>(self, handler: F) -> WithContext<F> {
        handler.with_context(Context::current().with_value(self))
    }

    /// Which attempt of its caller the request is.
    pub fn attempt(&self) -> IncomingAttempt {
        self.attempt
    }

    /// A client called while serving the request retried and gave up after
    /// `attempts` attempts.
    pub fn retries_exhausted(&self, attempts: u32) {
        self.exhausted.fetch_max(attempts, Ordering::Relaxed);
    }

    /// What an integration reports when one of its operations ends: it gave up
    /// after retrying (`stopped` after more than one attempt, for any reason but
    /// a permanent error), or it passed on a response that says retries ran out
    /// further down (`response` carries [`EXHAUSTED_HEADER`](crate::EXHAUSTED_HEADER)).
    /// Either way the server's own error answer should say so too, so that no
    /// layer above retries what has already been retried: at any depth, only the
    /// layer next to the failure retries.
    pub fn client_finished(&self, stopped: Option<(StopReason, u32)>, response: Option<&HeaderMap>) {
        let own = stopped.filter(|&(reason, attempts)| attempts > 1 && reason != StopReason::Permanent);
        let below = response.and_then(exhausted_attempts);
        if let Some(attempts) = own.map(|(_, attempts)| attempts).max(below) {
            self.retries_exhausted(attempts);
        }
    }

    /// The most attempts a client made below before giving up, if one did:
    /// what the server's error response says in
    /// [`EXHAUSTED_HEADER`](crate::EXHAUSTED_HEADER).
    pub fn exhausted_below(&self) -> Option<u32> {
        Some(self.exhausted.load(Ordering::Relaxed)).filter(|&n| n > 0)
    }
}
