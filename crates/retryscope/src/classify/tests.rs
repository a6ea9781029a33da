//! The HTTP classifier.

use super::*;
use crate::Hint;
use http::HeaderValue;
use http::header::RETRY_AFTER;
use http::{HeaderMap, StatusCode};
use std::time::Duration;
use std::time::SystemTime;

const DEFAULT_RETRY: [u16; 6] = [408, 429, 500, 502, 503, 504];

fn expected(code: u16, retry: &[u16]) -> Verdict {
    if retry.contains(&code) {
        Verdict::retryable(ErrorType::Status(code))
    } else if code < 400 {
        Verdict::Success
    } else {
        Verdict::permanent(ErrorType::Status(code))
    }
}

fn sc(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap()
}

#[test]
fn every_status_default() {
    for code in 100..=599 {
        assert_eq!(status(sc(code)), expected(code, &DEFAULT_RETRY), "{code}");
        assert_eq!(HttpClassifier::new().classify_status(sc(code)), expected(code, &DEFAULT_RETRY), "{code}");
    }
    for code in [400, 401, 403, 404, 409, 422, 501, 505] {
        assert!(matches!(status(sc(code)), Verdict::Permanent { .. }), "{code}");
    }
    for code in [100, 101, 200, 201, 204, 301, 302, 304, 307, 308] {
        assert_eq!(status(sc(code)), Verdict::Success, "{code}");
    }
}

#[test]
fn nonstandard_statuses_are_permanent() {
    let c = HttpClassifier::new().retry_status(600).retry_status(999);
    for code in [600, 799, 999] {
        assert_eq!(c.classify_status(sc(code)), Verdict::permanent(ErrorType::Status(code)));
        assert!(!c.retries(code));
    }
    assert!(!c.retries(0));
    assert!(!c.retries(99));
    assert_eq!(c, HttpClassifier::new());
}

/// Was `status`'s doc example.
#[test]
fn the_default_rules_by_example() {
    assert_eq!(status(StatusCode::OK), Verdict::Success);
    assert_eq!(status(StatusCode::FOUND), Verdict::Success);
    assert_eq!(status(StatusCode::SERVICE_UNAVAILABLE), Verdict::retryable(ErrorType::Status(503)));
    assert_eq!(status(StatusCode::NOT_FOUND), Verdict::permanent(ErrorType::Status(404)));
    assert_eq!(status(StatusCode::CONFLICT), Verdict::permanent(ErrorType::Status(409)));
}

#[test]
fn conflict_switch() {
    assert_eq!(status(StatusCode::CONFLICT), Verdict::permanent(ErrorType::Status(409)));
    let on = HttpClassifier::new().retry_status(409);
    let mut retry = DEFAULT_RETRY.to_vec();
    retry.push(409);
    for code in 100..=599 {
        assert_eq!(on.classify_status(sc(code)), expected(code, &retry), "{code}");
    }
    let off = on.never_retry_status(409);
    assert_eq!(off, HttpClassifier::new());
}

#[test]
fn custom_codes() {
    const C: HttpClassifier = HttpClassifier::new()
        .retry_status(425)
        .retry_status(599)
        .retry_status(100)
        .retry_status(202)
        .never_retry_status(500)
        .never_retry_status(429);
    let retry = [408, 502, 503, 504, 425, 599, 100, 202];
    for code in 100..=599 {
        assert_eq!(C.classify_status(sc(code)), expected(code, &retry), "{code}");
    }
    // Bits at word boundaries (index 63/64, 127/128, ...).
    for code in [163, 164, 227, 228, 291, 292, 355, 356, 419, 420, 483, 484, 547, 548] {
        let c = HttpClassifier::new().retry_status(code);
        assert!(c.retries(code), "{code}");
        assert!(!c.never_retry_status(code).retries(code), "{code}");
    }
    assert_eq!(HttpClassifier::default(), HttpClassifier::DEFAULT);
}

#[test]
fn hints_only_on_retryable() {
    let mut headers = HeaderMap::new();
    headers.insert(RETRY_AFTER, HeaderValue::from_static("42"));
    let hint = Some(Hint::retry_after(Duration::from_secs(42)));
    let c = HttpClassifier::new();
    let now = SystemTime::now();
    for code in 100..=599 {
        let got = c.classify_response(sc(code), &headers, now);
        let want = match expected(code, &DEFAULT_RETRY) {
            Verdict::Retryable { error, .. } => Verdict::Retryable { error, hint },
            other => other,
        };
        assert_eq!(got, want, "{code}");
    }
    // RateLimit hints too, and no hint without headers.
    let mut headers = HeaderMap::new();
    headers.insert(crate::hints::RATELIMIT, HeaderValue::from_static(r#""default";r=0;t=9"#));
    assert_eq!(
        c.classify_response(StatusCode::TOO_MANY_REQUESTS, &headers, now),
        Verdict::Retryable {
            error: ErrorType::Status(429),
            hint: Some(Hint::rate_limit(Duration::from_secs(9))),
        }
    );
    assert_eq!(
        c.classify_response(StatusCode::BAD_GATEWAY, &HeaderMap::new(), now),
        Verdict::retryable(ErrorType::Status(502))
    );
}
