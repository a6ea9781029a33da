//! The errors of hyper-util's client and tonic's `Status` are `Transient`: a
//! plain `.retry(policy)` around a call retries what may pass.

use retryscope::{ErrorType, Verdict};
use retryscope::{Retryable, Transient};
use retryscope_test_support::net::closed_port;
use retryscope_test_support::quick_policy as policy;
use std::cell::Cell;

#[tokio::test]
async fn a_hyper_util_client_retries_a_refused_connection() {
    let closed = format!("127.0.0.1:{}", closed_port().await);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let uri: http::Uri = format!("http://{closed}/").parse().expect("uri");
    let attempts = Cell::new(0);
    let error = (|| {
        attempts.set(attempts.get() + 1);
        client.get(uri.clone())
    })
    .retry(policy())
    .await
    .expect_err("nothing listens");
    assert_eq!((attempts.get(), error.attempts()), (3, 3));
    assert_eq!(error.error_type(), Some(ErrorType::CONNECT));
}

#[test]
fn grpc_statuses_retry_unavailable_only() {
    assert_eq!(
        tonic::Status::unavailable("down").verdict(),
        Verdict::retryable(ErrorType::Kind("UNAVAILABLE"))
    );
    for (status, name) in [
        (tonic::Status::invalid_argument("bad"), "INVALID_ARGUMENT"),
        (tonic::Status::already_exists("dup"), "ALREADY_EXISTS"),
        (tonic::Status::resource_exhausted("quota"), "RESOURCE_EXHAUSTED"),
        (tonic::Status::deadline_exceeded("late"), "DEADLINE_EXCEEDED"),
    ] {
        assert_eq!(status.verdict(), Verdict::permanent(ErrorType::Kind(name)));
    }
}

#[tokio::test]
async fn a_tonic_call_that_fails_unavailable_is_retried() {
    let attempts = Cell::new(0);
    let error = (|| {
        attempts.set(attempts.get() + 1);
        std::future::ready(Err::<(), _>(tonic::Status::unavailable("restarting")))
    })
    .retry(policy())
    .await
    .expect_err("always unavailable");
    assert_eq!((attempts.get(), error.error_type()), (3, Some(ErrorType::Kind("UNAVAILABLE"))));
}
