//! What a failed reqwest request tells us; the source-chain walk is shared
//! (retryscope-http's `Judge::cause`).

use retryscope::Verdict;
use retryscope::{ErrorType, Transient};
use retryscope_http::__private::{Judge, Stage};

/// Classifies an error from the middleware stack.
///
/// | failure | `error.type` | verdict | reached the server? |
/// |---|---|---|---|
/// | connect (refused, unreachable, DNS, connect timeout), as reqwest reports it | `connect` | retryable | no |
/// | timeout (reqwest's own) | `timeout` | retryable | maybe |
/// | connection reset / aborted / broken pipe | `reset` | retryable | maybe |
/// | connection closed mid-response | `incomplete` | retryable | maybe |
/// | other I/O errors (even "unreachable" on an open connection) | per `io_error` | per `io_error` | maybe |
/// | other request or body errors | `_OTHER` | retryable | maybe |
/// | builder, redirect, decode errors, other middleware | `_OTHER` / named | permanent | — |
pub(crate) fn classify(error: &reqwest_middleware::Error) -> (Verdict, Stage) {
    match error {
        reqwest_middleware::Error::Reqwest(e) => classify_reqwest(e),
        reqwest_middleware::Error::Middleware(e) => {
            Judge::cause(e.as_ref(), Verdict::permanent(ErrorType::OTHER))
        }
    }
}

fn classify_reqwest(error: &reqwest::Error) -> (Verdict, Stage) {
    if error.is_connect() {
        return (Verdict::retryable(ErrorType::CONNECT), Stage::NotSent);
    }
    // reqwest's own flags say it all: the engine's `Transient` judges them.
    if error.is_timeout() || error.is_builder() || error.is_redirect() || error.is_decode() {
        return (error.verdict(), Stage::Sent);
    }
    Judge::cause(error, Verdict::retryable(ErrorType::OTHER))
}
