//! Transient-only by default: `op.retry(policy)` retries what the error's type
//! says may pass, and returns the rest at once. Real failures on loopback.

use retryscope::{ErrorType, Verdict};
use retryscope::{Jitter, Policy, Retryable, Transient};
use std::cell::Cell;
use std::io;
use std::time::Duration;

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(1))
        .max_delay(Duration::from_millis(2))
        .jitter(Jitter::None)
        .build()
        .expect("valid policy")
}

/// A loopback port nothing listens on.
fn closed_port() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address")
}

#[tokio::test]
async fn a_refused_connection_is_retried_without_a_classifier() {
    let address = closed_port();
    let attempts = Cell::new(0);
    let error = (|| {
        attempts.set(attempts.get() + 1);
        std::future::ready(std::net::TcpStream::connect(address))
    })
    .retry(policy())
    .await
    .expect_err("nothing listens");
    assert_eq!((attempts.get(), error.attempts()), (3, 3));
    assert_eq!(error.last_error().map(io::Error::kind), Some(io::ErrorKind::ConnectionRefused));
}

#[tokio::test]
async fn an_error_that_retrying_cannot_fix_is_returned_at_once() {
    for kind in [io::ErrorKind::PermissionDenied, io::ErrorKind::InvalidInput, io::ErrorKind::NotFound] {
        let attempts = Cell::new(0);
        let error = (|| {
            attempts.set(attempts.get() + 1);
            std::future::ready(Err::<(), _>(io::Error::from(kind)))
        })
        .retry(policy())
        .await
        .expect_err("fails");
        assert_eq!((kind, attempts.get(), error.attempts()), (kind, 1, 1));
    }
}

#[test]
fn io_errors_are_judged_by_their_kind() {
    let cases = [
        (io::ErrorKind::ConnectionRefused, Verdict::retryable(ErrorType::CONNECT)),
        (io::ErrorKind::ConnectionReset, Verdict::retryable(ErrorType::RESET)),
        (io::ErrorKind::TimedOut, Verdict::retryable(ErrorType::TIMEOUT)),
        (io::ErrorKind::UnexpectedEof, Verdict::retryable(ErrorType::INCOMPLETE)),
    ];
    for (kind, verdict) in cases {
        assert_eq!(io::Error::from(kind).verdict(), verdict, "{kind:?}");
    }
    assert!(matches!(io::Error::from(io::ErrorKind::PermissionDenied).verdict(), Verdict::Permanent { .. }));
}

#[test]
fn statuses_follow_the_default_status_rules() {
    use http::StatusCode;
    for code in [408, 429, 500, 502, 503, 504] {
        let status = StatusCode::from_u16(code).expect("valid");
        assert_eq!(status.verdict(), Verdict::retryable(ErrorType::Status(code)), "{code}");
    }
    // A success status given as an error is not a success.
    for code in [200, 400, 404, 409, 501] {
        let status = StatusCode::from_u16(code).expect("valid");
        assert_eq!(status.verdict(), Verdict::permanent(ErrorType::Status(code)), "{code}");
    }
}

#[tokio::test]
async fn a_status_error_is_retried_only_when_transient() {
    let replies = [http::StatusCode::SERVICE_UNAVAILABLE, http::StatusCode::CONFLICT];
    let attempts = Cell::new(0);
    let error = (|| {
        let reply = replies[attempts.get().min(1)];
        attempts.set(attempts.get() + 1);
        std::future::ready(Err::<(), _>(reply))
    })
    .retry(policy())
    .await
    .expect_err("503 then 409");
    // The 503 was retried, the 409 returned.
    assert_eq!((attempts.get(), error.last_error().copied()), (2, Some(http::StatusCode::CONFLICT)));
}
