//! I/O errors: an [`ErrorKind`] to a verdict.

use std::io::ErrorKind;

use crate::verdict::{ErrorType, Verdict};

/// Classifies an I/O error kind (see the table in the [module docs](super)).
///
/// Connection-level failures (`connect`, `reset`, `timeout`, `incomplete`) and
/// the transient `Interrupted` / `WouldBlock` (`io`) are retryable; everything
/// else is permanent. Whether a retry is *safe* also depends on the request,
/// which is the integration's business (`retryscope-http` decides it for HTTP).
///
/// # Examples
///
/// ```
/// use std::io::ErrorKind;
/// use retryscope::classify::io_error;
/// use retryscope::{ErrorType, Verdict};
///
/// assert_eq!(
///     io_error(ErrorKind::ConnectionRefused),
///     Verdict::retryable(ErrorType::Kind("connect"))
/// );
/// assert_eq!(io_error(ErrorKind::TimedOut), Verdict::retryable(ErrorType::TIMEOUT));
/// assert_eq!(
///     io_error(ErrorKind::PermissionDenied),
///     Verdict::permanent(ErrorType::Kind("permission_denied"))
/// );
/// ```
pub fn io_error(kind: ErrorKind) -> Verdict {
    use ErrorKind as K;
    match kind {
        K::ConnectionRefused
        | K::NotConnected
        | K::AddrNotAvailable
        | K::HostUnreachable
        | K::NetworkUnreachable
        | K::NetworkDown => Verdict::retryable(ErrorType::CONNECT),
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => Verdict::retryable(ErrorType::RESET),
        K::TimedOut => Verdict::retryable(ErrorType::TIMEOUT),
        K::UnexpectedEof => Verdict::retryable(ErrorType::INCOMPLETE),
        K::Interrupted | K::WouldBlock => Verdict::retryable(ErrorType::IO),
        K::InvalidInput => Verdict::permanent(ErrorType::INVALID_INPUT),
        K::InvalidData => Verdict::permanent(ErrorType::INVALID_DATA),
        K::PermissionDenied => Verdict::permanent(ErrorType::PERMISSION_DENIED),
        K::NotFound => Verdict::permanent(ErrorType::NOT_FOUND),
        K::Unsupported => Verdict::permanent(ErrorType::UNSUPPORTED),
        _ => Verdict::permanent(ErrorType::OTHER),
    }
}

#[cfg(test)]
mod io_tests {
    use super::*;

    #[test]
    fn io_kinds() {
        use ErrorKind as K;
        let retry = |k| Verdict::retryable(ErrorType::Kind(k));
        let perm = |k| Verdict::permanent(ErrorType::Kind(k));
        let table = [
            (K::ConnectionRefused, retry("connect")),
            (K::NotConnected, retry("connect")),
            (K::AddrNotAvailable, retry("connect")),
            (K::HostUnreachable, retry("connect")),
            (K::NetworkUnreachable, retry("connect")),
            (K::NetworkDown, retry("connect")),
            (K::ConnectionReset, retry("reset")),
            (K::ConnectionAborted, retry("reset")),
            (K::BrokenPipe, retry("reset")),
            (K::TimedOut, retry("timeout")),
            (K::UnexpectedEof, retry("incomplete")),
            (K::Interrupted, retry("io")),
            (K::WouldBlock, retry("io")),
            (K::InvalidInput, perm("invalid_input")),
            (K::InvalidData, perm("invalid_data")),
            (K::PermissionDenied, perm("permission_denied")),
            (K::NotFound, perm("not_found")),
            (K::Unsupported, perm("unsupported")),
            (K::Other, Verdict::permanent(ErrorType::OTHER)),
            (K::AlreadyExists, Verdict::permanent(ErrorType::OTHER)),
            (K::AddrInUse, Verdict::permanent(ErrorType::OTHER)),
            (K::WriteZero, Verdict::permanent(ErrorType::OTHER)),
            (K::OutOfMemory, Verdict::permanent(ErrorType::OTHER)),
        ];
        for (kind, want) in table {
            assert_eq!(io_error(kind), want, "{kind:?}");
        }
        assert_eq!(io_error(K::TimedOut), Verdict::retryable(ErrorType::TIMEOUT));
    }

    #[test]
    fn io_kind_names_are_bounded_snake_case() {
        use ErrorKind as K;
        let kinds = [
            K::ConnectionRefused,
            K::ConnectionReset,
            K::TimedOut,
            K::UnexpectedEof,
            K::Interrupted,
            K::InvalidInput,
            K::InvalidData,
            K::PermissionDenied,
            K::NotFound,
            K::Unsupported,
        ];
        for kind in kinds {
            let Some(ErrorType::Kind(name)) = io_error(kind).error_type() else {
                panic!("{kind:?} has no named kind");
            };
            assert!(name.len() <= 32);
            assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{name}");
        }
    }
}
