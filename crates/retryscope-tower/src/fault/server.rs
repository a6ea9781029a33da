//! The fault layer on the server side: the same faults, the same switch and
//! the same marks, injected into the requests a service answers.

use super::{FaultLayer, Faults, Side};
use retryscope_http::fault::{FaultKind, FaultRule};
use std::error::Error as StdError;
use std::fmt;

/// A fault a server cannot inject, refused when the layer is built.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerFaultError {
    /// A server has accepted the connection it answers on: it cannot refuse
    /// it. Inject [`Reset`](FaultKind::Reset) instead (the layer fails the
    /// request, and hyper closes the connection without an answer).
    Refused(FaultRule),
}

impl fmt::Display for ServerFaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused(rule) => {
                write!(f, "fault rule {rule} refuses a connection, which a server cannot do: use reset")
            }
        }
    }
}

impl StdError for ServerFaultError {}

impl FaultLayer {
    /// Server side: wraps a service over `http::Request` (an axum `Router`,
    /// a hyper service) served by hyper (`hyper_util`'s `serve_connection`
    /// takes its `BoxError`). A call's dependency is its `Host` (the
    /// request's authority for HTTP/2); its route, its path.
    ///
    /// A [`Reset`](FaultKind::Reset) fails the request, and hyper closes the
    /// connection without answering: the caller sees the connection closed
    /// mid-response. A [`Refused`](FaultKind::Refused) rule is refused here;
    /// asked for by header, it is injected as a reset.
    pub fn server(faults: Faults) -> Result<Self, ServerFaultError> {
        if let Some(rule) = faults.rules().find(|rule| rule.kind() == FaultKind::Refused) {
            return Err(ServerFaultError::Refused(rule.clone()));
        }
        Ok(Self { faults, origin: None, side: Side::Server })
    }
}

/// The name a server-side call's dependency has: its `Host`, else its URI's
/// authority, else `unknown` (as the client spans name a URI without host).
pub(super) fn dependency<B>(request: &http::Request<B>) -> &str {
    request
        .headers()
        .get(http::header::HOST)
        .and_then(|host| host.to_str().ok())
        .or_else(|| request.uri().authority().map(http::uri::Authority::as_str))
        .unwrap_or("unknown")
}
