//! `grpc-retry-pushback-ms`, `grpc-timeout` and `grpc-status-details-bin`
//! from untrusted bytes.
//!
//! The first byte chooses the header, the rest is its value.
//!
//! Properties: parsing is total; a pushback is a wait exactly when the value
//! is what grpc-go's `strconv.Atoi` reads as a number that is not negative (an
//! optional sign, then ASCII digits, within 64 bits; gRFC A6 calls it a signed
//! 32-bit integer, grpc-go takes any), and the wait is exactly that many
//! milliseconds; anything else means "do not retry". A `grpc-timeout` is
//! honoured only in its grammar (1 to 8 digits and one of `H M S m u n`) and
//! is exactly that long. Status details are total too (tonic's own
//! `Status::from_header_map` panics on a value that is not base64): without
//! A6's header they give no pushback or a `RetryInfo` wait above zero.
#![no_main]

use http::header::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use retryscope_tower::grpc::fuzzing::{pushback, timeout};
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let Some((&which, value)) = data.split_first() else { return };
    let Ok(value) = HeaderValue::from_bytes(value) else { return };
    let mut metadata = HeaderMap::new();
    if which % 3 == 2 {
        metadata.insert("grpc-status", HeaderValue::from_static("14"));
        metadata.insert("grpc-status-details-bin", value);
        match pushback(&metadata) {
            None => {}
            Some(Some(wait)) => assert!(!wait.is_zero()),
            Some(None) => panic!("status details never say \"do not retry\""),
        }
    } else if which % 3 == 0 {
        metadata.insert("grpc-retry-pushback-ms", value.clone());
        let parsed = pushback(&metadata);
        let expected = expected_pushback(value.as_bytes()).map(Duration::from_millis);
        assert_eq!(parsed, Some(expected), "{value:?}");
    } else {
        metadata.insert("grpc-timeout", value.clone());
        assert_eq!(timeout(&metadata), expected_timeout(value.as_bytes()), "{value:?}");
    }
});

/// `grpc-retry-pushback-ms` as `strconv.Atoi` reads it, computed
/// independently: `[+-]?[0-9]+` within `i64`; `None` for anything else or a
/// negative number.
fn expected_pushback(value: &[u8]) -> Option<u64> {
    let (negative, digits) = match value.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, value),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let magnitude = digits.iter().try_fold(0_i128, |n, d| {
        let n = n * 10 + i128::from(d - b'0');
        (n <= i128::from(i64::MAX) + 1).then_some(n)
    })?;
    let signed = if negative { -magnitude } else { magnitude };
    let ms = i64::try_from(signed).ok()?;
    u64::try_from(ms).ok()
}

/// `grpc-timeout` by its grammar, computed independently.
fn expected_timeout(value: &[u8]) -> Option<Duration> {
    let (&unit, digits) = value.split_last()?;
    if !(1..=8).contains(&digits.len()) || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits.iter().fold(0_u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3_600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}
