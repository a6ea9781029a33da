//! What a failed request tells us: its `error.type`, whether it is worth
//! retrying, and whether it could have reached the server.

use retryscope::ErrorType;
use retryscope::classify::{Stage, io_error};
use retryscope::outcome::Verdict;
use std::error::Error as StdError;

/// The engine's view of one transport failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    /// Retryable or permanent, with its `error.type`.
    pub(crate) verdict: Verdict,
    /// Whether any of the request may have reached the server.
    pub(crate) stage: Stage,
}

/// Classifies an error from the middleware stack.
///
/// | failure | `error.type` | verdict | reached the server? |
/// |---|---|---|---|
/// | connect (refused, unreachable, DNS, connect timeout), as reqwest reports it | `connect` | retryable | no |
/// | timeout (reqwest's own) | `timeout` | retryable | maybe |
/// | connection reset / aborted / broken pipe | `reset` | retryable | maybe |
/// | connection closed mid-response | `incomplete` | retryable | maybe |
/// | other I/O errors (even "unreachable" on an open connection) | per [`io_error`] | per [`io_error`] | maybe |
/// | other request or body errors | `_OTHER` | retryable | maybe |
/// | builder, redirect, decode errors, other middleware | `_OTHER` / named | permanent | — |
pub(crate) fn classify(error: &reqwest_middleware::Error) -> Failure {
    match error {
        reqwest_middleware::Error::Reqwest(e) => classify_reqwest(e),
        reqwest_middleware::Error::Middleware(e) => classify_chain(e.as_ref())
            .unwrap_or(Failure { verdict: Verdict::permanent(ErrorType::OTHER), stage: Stage::Sent }),
    }
}

fn classify_reqwest(error: &reqwest::Error) -> Failure {
    let sent = |verdict| Failure { verdict, stage: Stage::Sent };
    if error.is_connect() {
        // reqwest reports a connect timeout as a connect error too: either way no
        // byte of the request left the client.
        return Failure { verdict: Verdict::retryable(ErrorType::CONNECT), stage: Stage::NotSent };
    }
    if error.is_timeout() {
        return sent(Verdict::retryable(ErrorType::TIMEOUT));
    }
    if error.is_builder() || error.is_redirect() || error.is_decode() {
        return sent(Verdict::permanent(ErrorType::Kind(if error.is_redirect() {
            "redirect"
        } else {
            "request"
        })));
    }
    classify_chain(error).unwrap_or_else(|| sent(Verdict::retryable(ErrorType::OTHER)))
}

/// Looks through the source chain for an I/O or hyper error that names the cause.
fn classify_chain(error: &(dyn StdError + 'static)) -> Option<Failure> {
    let mut cause: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            // Only reqwest's own connect flag proves nothing was sent: an
            // "unreachable" error on a pooled connection may come after the body.
            return Some(Failure { verdict: io_error(io.kind()), stage: Stage::Sent });
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && h.is_incomplete_message()
        {
            return Some(Failure { verdict: Verdict::retryable(ErrorType::INCOMPLETE), stage: Stage::Sent });
        }
        cause = e.source();
    }
    None
}
