//! The vendors' rate-limit dialects, read from the headers their APIs send:
//! each case is a capture from the vendor's documentation or a recorded
//! response (named beside it), with the quota or wait the pacer takes from it.

use http::{HeaderMap, HeaderName, HeaderValue};
use retryscope::Hint;
use retryscope::hints::{pace_signal, quota};
use retryscope::pace::Quota;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn headers(lines: &[(&'static str, &'static str)]) -> HeaderMap {
    lines.iter().map(|(n, v)| (HeaderName::from_static(n), HeaderValue::from_static(v))).collect()
}

fn at(unix: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(unix)
}

#[test]
fn openai_reports_requests_and_tokens_with_go_durations() {
    // OpenAI's rate-limit guide, its sample values: 59 requests left for 1 s,
    // 149,984 tokens left for 6 min (tokens left: the request quota paces).
    let sample = headers(&[
        ("x-ratelimit-limit-requests", "60"),
        ("x-ratelimit-limit-tokens", "150000"),
        ("x-ratelimit-remaining-requests", "59"),
        ("x-ratelimit-remaining-tokens", "149984"),
        ("x-ratelimit-reset-requests", "1s"),
        ("x-ratelimit-reset-tokens", "6m0s"),
    ]);
    assert_eq!(
        quota(&sample, SystemTime::now()),
        Some(Quota { remaining: 59, reset: Duration::from_secs(1), policy: None })
    );

    // A response recorded on the forum (2025-05-26), with millisecond resets.
    let recorded = headers(&[
        ("x-ratelimit-limit-requests", "5000"),
        ("x-ratelimit-limit-tokens", "160000"),
        ("x-ratelimit-remaining-requests", "4999"),
        ("x-ratelimit-remaining-tokens", "159976"),
        ("x-ratelimit-reset-requests", "12ms"),
        ("x-ratelimit-reset-tokens", "9ms"),
    ]);
    assert_eq!(
        quota(&recorded, SystemTime::now()),
        Some(Quota { remaining: 4999, reset: Duration::from_millis(12), policy: None })
    );
}

#[test]
fn an_exhausted_token_quota_holds_every_request_until_its_reset() {
    // The same dialect on a 429 whose tokens ran out: requests are left, but
    // no request can be served before the token window resets.
    let exhausted = headers(&[
        ("x-ratelimit-remaining-requests", "41"),
        ("x-ratelimit-reset-requests", "1.2s"),
        ("x-ratelimit-remaining-tokens", "0"),
        ("x-ratelimit-reset-tokens", "6m0s"),
    ]);
    assert_eq!(
        quota(&exhausted, SystemTime::now()),
        Some(Quota { remaining: 0, reset: Duration::from_secs(360), policy: None })
    );
}

#[test]
fn anthropic_reports_rfc3339_resets() {
    // A response recorded from api.anthropic.com (date 2025-08-21 12:41:00 GMT).
    let recorded = headers(&[
        ("anthropic-ratelimit-input-tokens-limit", "80000"),
        ("anthropic-ratelimit-input-tokens-remaining", "80000"),
        ("anthropic-ratelimit-input-tokens-reset", "2025-08-21T12:40:59Z"),
        ("anthropic-ratelimit-output-tokens-limit", "16000"),
        ("anthropic-ratelimit-output-tokens-remaining", "16000"),
        ("anthropic-ratelimit-output-tokens-reset", "2025-08-21T12:41:00Z"),
        ("anthropic-ratelimit-requests-limit", "1000"),
        ("anthropic-ratelimit-requests-remaining", "999"),
        ("anthropic-ratelimit-requests-reset", "2025-08-21T12:40:59Z"),
        ("anthropic-ratelimit-tokens-limit", "96000"),
        ("anthropic-ratelimit-tokens-remaining", "96000"),
        ("anthropic-ratelimit-tokens-reset", "2025-08-21T12:40:59Z"),
    ]);
    // Two seconds before the requests' reset: 999 requests in 2 s.
    let before = at(1_755_780_057);
    assert_eq!(
        quota(&recorded, before),
        Some(Quota { remaining: 999, reset: Duration::from_secs(2), policy: None })
    );
    // At the response's own Date the reset has passed: nothing to pace.
    assert_eq!(quota(&recorded, at(1_755_780_060)), None);

    // Output tokens spent: every request waits for their reset.
    let spent = headers(&[
        ("anthropic-ratelimit-requests-remaining", "999"),
        ("anthropic-ratelimit-requests-reset", "2025-08-21T12:40:59Z"),
        ("anthropic-ratelimit-output-tokens-remaining", "0"),
        ("anthropic-ratelimit-output-tokens-reset", "2025-08-21T12:41:00Z"),
    ]);
    assert_eq!(
        quota(&spent, before),
        Some(Quota { remaining: 0, reset: Duration::from_secs(3), policy: None })
    );
}

#[test]
fn github_reports_a_unix_reset_and_its_secondary_limits_answer_403_with_retry_after() {
    // GitHub's REST docs ("Checking the status of your rate limit"), at 13 s
    // before the reset.
    let primary = headers(&[
        ("x-ratelimit-limit", "60"),
        ("x-ratelimit-remaining", "56"),
        ("x-ratelimit-used", "4"),
        ("x-ratelimit-reset", "1372700873"),
        ("x-ratelimit-resource", "core"),
    ]);
    assert_eq!(
        quota(&primary, at(1_372_700_860)),
        Some(Quota { remaining: 56, reset: Duration::from_secs(13), policy: None })
    );

    // A secondary rate limit: 403 with retry-after. The dependency is held.
    let secondary = headers(&[("retry-after", "60"), ("x-ratelimit-resource", "core")]);
    let signal = pace_signal(403, &secondary, at(1_372_700_860));
    assert_eq!(signal.not_before, Some(Hint::retry_after(Duration::from_secs(60))));
    // A 403 from anyone else is not a rate limit: its Retry-After is that call's.
    let other = headers(&[("retry-after", "60")]);
    assert_eq!(pace_signal(403, &other, at(1_372_700_860)).not_before, None);
}

#[test]
fn millisecond_waits_are_read_before_retry_after() {
    // Azure OpenAI's 429: both headers, the millisecond one the more precise.
    let azure = headers(&[("retry-after", "2"), ("retry-after-ms", "1750")]);
    let signal = pace_signal(429, &azure, SystemTime::now());
    assert_eq!(signal.not_before, Some(Hint::retry_after(Duration::from_millis(1750))));
    // Other Azure services.
    let ms = headers(&[("x-ms-retry-after-ms", "300")]);
    assert_eq!(
        pace_signal(503, &ms, SystemTime::now()).not_before,
        Some(Hint::retry_after(Duration::from_millis(300)))
    );
    // AWS (smithy's retry tests send 500 ms).
    let aws = headers(&[("x-amz-retry-after", "500")]);
    assert_eq!(
        retryscope::hints::from_headers(&aws, SystemTime::now()),
        Some(Hint::retry_after(Duration::from_millis(500)))
    );
    // Malformed millisecond values are ignored: the seconds header still counts.
    let bad = headers(&[("retry-after-ms", "1.5e3"), ("retry-after", "4")]);
    assert_eq!(
        pace_signal(429, &bad, SystemTime::now()).not_before,
        Some(Hint::retry_after(Duration::from_secs(4)))
    );
}

#[test]
fn malformed_dialect_values_are_ignored_and_the_other_headers_still_count() {
    let now = at(1_755_780_057);
    let mixed = headers(&[
        ("x-ratelimit-remaining-requests", "ten"),
        ("x-ratelimit-reset-requests", "1s"),
        ("anthropic-ratelimit-requests-remaining", "5"),
        ("anthropic-ratelimit-requests-reset", "2025-08-21 12:40:59"),
        ("x-ratelimit-remaining", "3"),
        ("x-ratelimit-reset", "30"),
    ]);
    assert_eq!(
        quota(&mixed, now),
        Some(Quota { remaining: 3, reset: Duration::from_secs(30), policy: None })
    );
}
