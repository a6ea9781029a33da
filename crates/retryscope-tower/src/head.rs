//! What a gRPC response's headers said, read once per attempt
//! (`grpc::status::read`) and kept with its body ([`ResponseBody`]) for the
//! classifier and the call's end, so that nothing reads them twice. Plain
//! data, apart from `grpc/` so that the body that carries it need not know
//! the protocol.
//!
//! [`ResponseBody`]: crate::response::ResponseBody

use std::time::Duration;

/// What the server's pushback says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushback {
    /// Wait exactly this long before the next attempt.
    Wait(Duration),
    /// Do not retry (a negative or unparseable value, per gRFC A6).
    Stop,
    /// Wait at least this long: `google.rpc.RetryInfo`'s `retry_delay` in the
    /// status details (AIP-194: "clients should wait at least"), a floor under
    /// the backoff as `Retry-After` is.
    AtLeast(Duration),
}

/// A status received with the response headers: a Trailers-Only answer, or an
/// HTTP error status that carries none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Received {
    pub(crate) code: u8,
    pub(crate) pushback: Option<Pushback>,
}

/// What the headers of a gRPC response say, read once per attempt (by
/// `grpc::status::read`) and kept with its body for the classifier and the call's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Head {
    /// A status with the headers.
    Status(Received),
    /// No status: the call is committed (A6); its status comes in the trailers.
    Committed,
}
