//! What a failed request tells us: its `error.type`, whether it is worth
//! retrying, and whether it could have reached the server.

use crate::error::NotReplayable;
use crate::fault::InjectedFault;
use retryscope::ErrorType;
use retryscope::Verdict;
use std::error::Error as StdError;

/// How far a failed request got before it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Nothing of the request can have reached the server (e.g. the connection
    /// was refused), so a retry cannot duplicate a side effect.
    NotSent,
    /// Some or all of the request may have reached the server (e.g. a reset or
    /// timeout after the connection was established, or any response).
    Sent,
}

/// The engine's view of one transport failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Failure {
    /// Retryable or permanent, with its `error.type`.
    pub(crate) verdict: Verdict,
    /// Whether any of the request may have reached the server.
    pub(crate) stage: Stage,
}

impl Failure {
    /// A failure after which the request may have reached the server.
    pub(crate) const fn sent(verdict: Verdict) -> Self {
        Self { verdict, stage: Stage::Sent }
    }
}

/// What a refused connection (`io::ErrorKind::ConnectionRefused`) found in the
/// source chain proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Nothing was sent: the connection was never made (tower: its connectors
    /// report refusal only as an I/O error).
    NotSent,
    /// Nothing can be concluded: the library has its own "connect" flag, and an
    /// I/O error without it may come from a pooled connection after the body
    /// (reqwest).
    MaybeSent,
}

/// Looks through `error`'s source chain for what names the cause:
///
/// | in the chain | `error.type` | verdict | reached the server? |
/// |---|---|---|---|
/// | [`NotReplayable`] | `_OTHER` | permanent | — |
/// | an injected refusal ([`InjectedFault`]) | `connect` | retryable | no |
/// | a connect cut at its share of the attempt ([`ConnectTimedOut`](crate::ConnectTimedOut)) | `connect` | retryable | no |
/// | connection refused, with [`Refused::NotSent`] | `connect` | retryable | no |
/// | other I/O errors (even "unreachable" on an open connection) | per [`io_error`](retryscope::classify::io_error) | per [`io_error`](retryscope::classify::io_error) | maybe |
/// | connection closed mid-response (hyper) | `incomplete` | retryable | maybe |
///
/// `None` when nothing in the chain says: each integration decides.
pub(crate) fn walk(error: &(dyn StdError + 'static), refused: Refused) -> Option<Failure> {
    // One pass down the chain: the first cause that says anything decides.
    std::iter::successors(Some(error), |&e| e.source()).find_map(|cause| {
        if cause.is::<NotReplayable>() {
            return Some(Failure::sent(Verdict::permanent(ErrorType::OTHER)));
        }
        // A connect cut at its share of the attempt sent nothing.
        if cause.is::<crate::connect::ConnectTimedOut>() {
            return Some(Failure { verdict: Verdict::retryable(ErrorType::CONNECT), stage: Stage::NotSent });
        }
        // An injected refusal sent nothing, whatever the library could tell
        // of a real one: judged as the library's own connect failure is.
        if cause.downcast_ref::<InjectedFault>().is_some_and(InjectedFault::refused) {
            return Some(Failure { verdict: Verdict::retryable(ErrorType::CONNECT), stage: Stage::NotSent });
        }
        let verdict = retryscope::classify::cause_verdict(cause)?;
        // Which failure it was is the engine's rule; where it happened is ours.
        let not_sent = refused == Refused::NotSent
            && cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
        Some(if not_sent { Failure { verdict, stage: Stage::NotSent } } else { Failure::sent(verdict) })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn a_refused_connection_proves_nothing_was_sent_only_where_the_library_says_so() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let failure = walk(&refused, Refused::NotSent).map(|f| f.stage);
        assert_eq!(failure, Some(Stage::NotSent));
        let failure = walk(&refused, Refused::MaybeSent).map(|f| f.stage);
        assert_eq!(failure, Some(Stage::Sent));
    }

    #[test]
    fn a_reset_may_have_reached_the_server() {
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        let failure = walk(&reset, Refused::NotSent);
        assert_eq!(failure, Some(Failure::sent(Verdict::retryable(ErrorType::RESET))));
    }

    #[test]
    fn an_error_naming_nothing_is_left_to_the_integration() {
        assert_eq!(walk(&std::fmt::Error, Refused::NotSent), None);
    }
}
