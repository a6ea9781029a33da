//! The incoming attempt headers (`retry-attempt`, Envoy's
//! `x-envoy-attempt-count`, gRPC's `grpc-previous-rpc-attempts`) from
//! untrusted bytes.
//!
//! The first byte says which headers are present (bits 0–2), the rest holds
//! their values separated by NUL (which no header value contains).
//!
//! Properties: parsing is total; the attempt is read from the first header
//! present in that order; it is a number only for a plain decimal count within
//! the trusted range (1–100; 0–99 previous attempts for gRPC), otherwise
//! unknown; no header at all is a first attempt; the metric bucket is one of
//! the five documented values and agrees with the number.
#![no_main]

use http::header::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use retryscope_otel::{
    ATTEMPT_HEADER, ENVOY_ATTEMPT_HEADER, GRPC_PREVIOUS_ATTEMPTS, IncomingAttempt, MAX_TRUSTED_ATTEMPT,
};

fuzz_target!(|data: &[u8]| {
    let Some((&present, rest)) = data.split_first() else { return };
    let mut values = rest.split(|&b| b == 0);
    let names = [ATTEMPT_HEADER, ENVOY_ATTEMPT_HEADER, GRPC_PREVIOUS_ATTEMPTS];
    let mut headers = HeaderMap::new();
    let mut stated: Vec<(HeaderName, Vec<u8>)> = Vec::new();
    for (bit, name) in names.iter().enumerate() {
        if present & (1 << bit) == 0 {
            continue;
        }
        let value = values.next().unwrap_or_default();
        let Ok(header) = HeaderValue::from_bytes(value) else { return };
        headers.insert(name.clone(), header);
        stated.push((name.clone(), value.to_vec()));
    }
    let attempt = IncomingAttempt::from_headers(&headers);

    let expected = match stated.first() {
        None => Some(1),
        Some((name, value)) => {
            let count = plain_count(value);
            if *name == GRPC_PREVIOUS_ATTEMPTS {
                count.filter(|&n| n < MAX_TRUSTED_ATTEMPT).map(|n| n + 1)
            } else {
                count.filter(|n| (1..=MAX_TRUSTED_ATTEMPT).contains(n))
            }
        }
    };
    assert_eq!(attempt.number(), expected, "{headers:?}");
    assert!(IncomingAttempt::BUCKETS.contains(&attempt.bucket()));
    let bucket = match attempt.number() {
        None => "unknown",
        Some(n @ 1..=3) => ["1", "2", "3"][n as usize - 1],
        Some(_) => "4+",
    };
    assert_eq!(attempt.bucket(), bucket);
    assert_eq!(attempt.is_retry(), attempt.number().is_some_and(|n| n > 1));
});

/// A plain decimal count of at most ten digits that fits `u32`.
fn plain_count(value: &[u8]) -> Option<u32> {
    if value.is_empty() || value.len() > 10 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}
