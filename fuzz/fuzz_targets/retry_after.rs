//! `Retry-After` (RFC 9110 §10.2.3) from untrusted bytes.
//!
//! Properties: parsing is total; a hint is given exactly for the two forms the
//! RFC defines and never exceeds what the header says (the number of seconds,
//! saturating; the time until the date, zero once it has passed); the hint
//! `from_headers` derives from the field replaces the computed delay with that
//! same value.
#![no_main]

use http::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use libfuzzer_sys::fuzz_target;
use retryscope::hints::{from_headers, retry_after};
use retryscope::Hint;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fuzz_target!(|data: &[u8]| {
    // The first four bytes choose "now" (1970 to 2106), the rest is the field.
    let (now, field) = match data.split_first_chunk::<4>() {
        Some((secs, rest)) => (UNIX_EPOCH + Duration::from_secs(u32::from_le_bytes(*secs).into()), rest),
        None => (UNIX_EPOCH, data),
    };
    // Bytes `http` refuses never reach a parser.
    let Ok(value) = HeaderValue::from_bytes(field) else { return };
    let hint = retry_after(&value, now);
    assert_eq!(hint, expected(&value, now), "{value:?} at {now:?}");

    let mut headers = HeaderMap::new();
    headers.insert(RETRY_AFTER, value);
    assert_eq!(from_headers(&headers, now), hint.map(Hint::retry_after));
});

/// What the header says, computed independently of the parser under test.
fn expected(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let text = value.to_str().ok()?.trim_matches([' ', '\t']);
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // All digits: an overflow is the only way `parse` can fail.
        return Some(Duration::from_secs(text.parse::<u64>().unwrap_or(u64::MAX)));
    }
    let date: SystemTime = httpdate::parse_http_date(text).ok()?;
    Some(date.duration_since(now).unwrap_or_default())
}
