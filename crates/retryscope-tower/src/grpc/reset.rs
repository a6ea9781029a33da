//! What an HTTP/2 reset or GOAWAY means to a gRPC call: the status it stands
//! for, and whether the server never processed the stream (A6's transparent
//! retry).

use crate::error::BoxError;
use h2::Reason;
use tonic::Code;

/// The HTTP/2 error in `error`'s source chain (tonic's channel wraps hyper's
/// error, which wraps h2's), if there is one.
fn h2_error(error: &BoxError) -> Option<&h2::Error> {
    let top: &(dyn std::error::Error + 'static) = &**error;
    std::iter::successors(Some(top), |&e| e.source()).find_map(|e| e.downcast_ref::<h2::Error>())
}

/// The gRPC status a failure at the HTTP/2 level stands for, as grpc-go maps it
/// (`internal/transport/http_util.go`, `http2ErrConvTab`): an `RST_STREAM` by
/// its reason, a reason the table does not name as `UNKNOWN`, and a `GOAWAY` as
/// `UNAVAILABLE` (grpc-go closes the streams a closing connection takes with
/// it as unavailable, whatever the frame's reason). `None` when no HTTP/2
/// error is in the chain, or one without a reason (an I/O failure).
pub(crate) fn code(error: &BoxError) -> Option<u8> {
    let h2 = h2_error(error)?;
    let reason = h2.reason()?;
    if h2.is_go_away() {
        return Some(Code::Unavailable as u8);
    }
    let code = match reason {
        Reason::NO_ERROR
        | Reason::PROTOCOL_ERROR
        | Reason::INTERNAL_ERROR
        | Reason::SETTINGS_TIMEOUT
        | Reason::STREAM_CLOSED
        | Reason::FRAME_SIZE_ERROR
        | Reason::COMPRESSION_ERROR
        | Reason::CONNECT_ERROR
        | Reason::HTTP_1_1_REQUIRED => Code::Internal,
        Reason::FLOW_CONTROL_ERROR | Reason::ENHANCE_YOUR_CALM => Code::ResourceExhausted,
        Reason::REFUSED_STREAM => Code::Unavailable,
        Reason::CANCEL => Code::Cancelled,
        Reason::INADEQUATE_SECURITY => Code::PermissionDenied,
        _ => Code::Unknown,
    };
    Some(code as u8)
}

/// `error` as the status a gRPC client reads from it, when an HTTP/2 error
/// caused it: [`code`]'s mapping (grpc-go's), which tonic's own differs from
/// for a `GOAWAY` (tonic maps it by its reason, `NO_ERROR` to `INTERNAL`) and
/// for `HTTP_1_1_REQUIRED` (`UNKNOWN`). The error stays the status's source.
pub(crate) fn status(error: BoxError) -> Result<tonic::Status, BoxError> {
    let Some(code) = code(&error) else { return Err(error) };
    let message = match h2_error(&error) {
        Some(h2) => format!("h2 protocol error: {h2}"),
        None => format!("h2 protocol error: {error}"),
    };
    let mut status = tonic::Status::new(Code::from(i32::from(code)), message);
    status.set_source(std::sync::Arc::from(error));
    Ok(status)
}

/// Why the server never processed a stream, when it says so: what makes a
/// first attempt eligible for A6's transparent retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unprocessed {
    /// The server reset the stream with `REFUSED_STREAM` (RFC 9113 §8.7: no
    /// application processing happened).
    Refused,
    /// The server's graceful `GOAWAY` named a last stream below this one.
    /// (h2 reports such streams with the GOAWAY's reason; a GOAWAY that
    /// carries an error reason also ends streams the server did process, so
    /// only `NO_ERROR` proves the stream was left unprocessed.)
    GoAway,
}

impl Unprocessed {
    /// What the attempt span's event says.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Unprocessed::Refused => "the server refused the stream (REFUSED_STREAM) before processing it",
            Unprocessed::GoAway => "the server's GOAWAY left the stream unprocessed",
        }
    }
}

/// Whether `error` says the server never processed the stream.
pub(crate) fn unprocessed(error: &BoxError) -> Option<Unprocessed> {
    let h2 = h2_error(error)?;
    if !h2.is_remote() {
        return None;
    }
    match h2.reason()? {
        Reason::REFUSED_STREAM if h2.is_reset() => Some(Unprocessed::Refused),
        Reason::NO_ERROR if h2.is_go_away() => Some(Unprocessed::GoAway),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(reason: Reason) -> BoxError {
        Box::new(h2::Error::from(reason))
    }

    #[test]
    fn resets_map_as_grpc_go_maps_them() {
        let cases = [
            (Reason::INTERNAL_ERROR, Code::Internal),
            (Reason::PROTOCOL_ERROR, Code::Internal),
            (Reason::NO_ERROR, Code::Internal),
            (Reason::HTTP_1_1_REQUIRED, Code::Internal),
            (Reason::FLOW_CONTROL_ERROR, Code::ResourceExhausted),
            (Reason::ENHANCE_YOUR_CALM, Code::ResourceExhausted),
            (Reason::REFUSED_STREAM, Code::Unavailable),
            (Reason::CANCEL, Code::Cancelled),
            (Reason::INADEQUATE_SECURITY, Code::PermissionDenied),
            (Reason::from(0xff), Code::Unknown),
        ];
        for (reason, expected) in cases {
            assert_eq!(code(&boxed(reason)), Some(expected as u8), "{reason:?}");
        }
        let io: BoxError = Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(code(&io), None);
    }

    #[test]
    fn a_reset_of_our_own_is_not_the_server_refusing() {
        // `From<Reason>` makes a library-side error: not the server's word.
        assert_eq!(unprocessed(&boxed(Reason::REFUSED_STREAM)), None);
    }
}
