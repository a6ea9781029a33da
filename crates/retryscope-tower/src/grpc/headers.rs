//! gRPC's metadata: the status, the server's pushback, the call's timeout and
//! the previous-attempts count.

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use retryscope::Hint;
use retryscope::pace::PaceSignal;
use std::time::Duration;

pub(crate) use crate::head::Pushback;

// Header names, not strings: a map looked up by a string parses it into a
// name first, on every call.

/// `grpc-status`, in the headers of a Trailers-Only response or in the trailers.
pub(crate) const STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-retry-pushback-ms`: how long the server asks the client to wait.
pub(crate) const PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");
/// `grpc-previous-rpc-attempts`: sent on every retry.
pub(crate) const PREVIOUS_ATTEMPTS: HeaderName = HeaderName::from_static("grpc-previous-rpc-attempts");
/// `grpc-timeout`: the call's deadline, relative.
pub(crate) const TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
/// `grpc-status-details-bin`: the status's details, a serialized
/// `google.rpc.Status` (gRPC's richer error model).
pub(crate) const STATUS_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");

/// The status code in `metadata`, if it carries one, read exactly as tonic
/// reads it (`Code::from_bytes`): one or two ASCII digits naming a code, and
/// anything else (`" 14"`, `"14 "`, `"+14"`, `"014"`, `"17"`) `UNKNOWN`, so the
/// layer never retries a status the caller's client will not see as retryable.
pub(crate) fn status(metadata: &HeaderMap) -> Option<u8> {
    let value = metadata.get(&STATUS)?;
    Some(tonic::Code::from_bytes(value.as_bytes()) as u8)
}

/// The gRPC status of an HTTP response that carries none, per gRPC's
/// "HTTP to gRPC status code mapping".
pub(crate) fn status_of_http(status: StatusCode) -> u8 {
    match status.as_u16() {
        400 => 13,                   // INTERNAL
        401 => 16,                   // UNAUTHENTICATED
        403 => 7,                    // PERMISSION_DENIED
        404 => 12,                   // UNIMPLEMENTED
        429 | 502 | 503 | 504 => 14, // UNAVAILABLE
        _ => 2,                      // UNKNOWN
    }
}

/// `grpc-retry-pushback-ms` in `metadata`, if present, read as grpc-go reads
/// it (`strconv.Atoi`): a decimal integer with an optional sign, no spaces.
/// A negative or unparseable value, or more than one value, means "do not
/// retry" (A6: "If the value for pushback is negative or unparseble, then it
/// will be seen as the server asking the client not to retry at all").
///
/// A6 calls the value a signed 32-bit integer; grpc-go accepts any 64-bit one,
/// and so does this. A wait above the policy's `max_server_delay` or the
/// deadline stops the retries in the engine.
///
/// Without that header, a `google.rpc.RetryInfo` in the status details is the
/// server's pushback ([`Pushback::AtLeast`]); A6's header, when present,
/// decides alone.
pub(crate) fn pushback(metadata: &HeaderMap) -> Option<Pushback> {
    let mut values = metadata.get_all(&PUSHBACK).iter();
    let Some(value) = values.next() else {
        return retry_info(metadata).map(Pushback::AtLeast);
    };
    if values.next().is_some() {
        return Some(Pushback::Stop);
    }
    // `i64::from_str` takes what `strconv.Atoi` takes: digits after an
    // optional `+` or `-`, nothing else.
    let parsed = value.to_str().ok().and_then(|v| v.parse::<i64>().ok());
    Some(match parsed.and_then(|ms| u64::try_from(ms).ok()) {
        Some(ms) => Pushback::Wait(Duration::from_millis(ms)),
        None => Pushback::Stop,
    })
}

/// `google.rpc.RetryInfo`'s `retry_delay` in `grpc-status-details-bin`, if
/// the details decode (as tonic-types decodes them: a negative delay is zero)
/// and the delay is not zero; anything malformed is ignored, as a malformed
/// `Retry-After` is. An answer without details costs one lookup.
pub(crate) fn retry_info(metadata: &HeaderMap) -> Option<Duration> {
    use base64::Engine as _;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use tonic_types::StatusExt;
    // gRPC's `-bin` values: standard base64, padded or not ("implementations
    // MUST accept padded and un-padded values"). Decoded here rather than by
    // tonic's `Status::from_header_map`, which panics on a value that is not
    // base64: a server must not be able to crash its client.
    const BIN: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let value = metadata.get(&STATUS_DETAILS)?;
    let details = BIN.decode(value.as_bytes()).ok()?;
    let status = tonic::Status::with_details(tonic::Code::Unknown, "", details.into());
    status.get_details_retry_info()?.retry_delay.filter(|delay| !delay.is_zero())
}

/// What an answer's headers say about pace, for the dependency's pacer (see
/// `retryscope::pace`): a Trailers-Only `RESOURCE_EXHAUSTED` or `UNAVAILABLE`
/// with a pushback closes the dependency for that long, to every call; a
/// `RESOURCE_EXHAUSTED` is a throttling answer. Headers without a status (a
/// call that goes on) say nothing but that the call was answered, which the
/// adaptive limiter counts. A status that comes only in the trailers, after
/// the call was committed, is not read.
pub(crate) fn pace_signal(metadata: &HeaderMap) -> PaceSignal {
    const RESOURCE_EXHAUSTED: u8 = 8;
    const UNAVAILABLE: u8 = 14;
    let Some(code) = status(metadata) else { return PaceSignal::none() };
    let not_before = match pushback(metadata) {
        Some(Pushback::Wait(wait)) if matches!(code, RESOURCE_EXHAUSTED | UNAVAILABLE) && !wait.is_zero() => {
            Some(Hint::grpc_pushback(wait))
        }
        Some(Pushback::AtLeast(wait)) if matches!(code, RESOURCE_EXHAUSTED | UNAVAILABLE) => {
            Some(Hint::retry_after(wait))
        }
        _ => None,
    };
    PaceSignal { not_before, throttled: code == RESOURCE_EXHAUSTED, ..PaceSignal::none() }
}

/// `grpc-timeout` (`TimeoutValue TimeoutUnit`: up to 8 digits and one of `H M S m
/// u n`) as a duration. A malformed value is ignored, as gRPC servers do.
pub(crate) fn timeout(metadata: &HeaderMap) -> Option<Duration> {
    let value = metadata.get(&TIMEOUT)?.to_str().ok()?;
    let (digits, unit) = value.split_at_checked(value.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3_600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// `remaining` as a `grpc-timeout` value in the finest unit that fits eight
/// digits, rounded down so the server never sees more time than is left.
pub(crate) fn timeout_value(remaining: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let nanos = remaining.as_nanos();
    let units: [(u128, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    let (value, unit) =
        units.iter().map(|(per, unit)| (nanos / per, *unit)).find(|(v, _)| *v <= MAX).unwrap_or((MAX, 'H'));
    // Digits and an ASCII letter always make a valid header value.
    HeaderValue::from_str(&format!("{value}{unit}")).unwrap_or(HeaderValue::from_static("99999999H"))
}

/// The `grpc-previous-rpc-attempts` value for the attempt after `previous`.
pub(crate) fn previous_attempts(previous: u32) -> HeaderValue {
    HeaderValue::from(previous)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_retry_info_in_the_status_details_is_a_pushback_of_at_least_its_delay() {
        use tonic_types::{ErrorDetails, StatusExt};
        let status = |details: ErrorDetails| {
            let status = tonic::Status::with_error_details(tonic::Code::Unavailable, "busy", details);
            let mut metadata = HeaderMap::new();
            status.add_header(&mut metadata).expect("a valid status");
            metadata
        };
        let told = status(ErrorDetails::with_retry_info(Some(Duration::from_millis(1_250))));
        assert_eq!(pushback(&told), Some(Pushback::AtLeast(Duration::from_millis(1_250))));
        assert_eq!(pushback(&status(ErrorDetails::with_retry_info(Some(Duration::ZERO)))), None);
        assert_eq!(pushback(&status(ErrorDetails::with_retry_info(None))), None);
        assert_eq!(pushback(&status(ErrorDetails::with_quota_failure(vec![]))), None);
        // Padded base64 as well as tonic's unpadded.
        use base64::Engine as _;
        let raw = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(told[&STATUS_DETAILS].as_bytes())
            .expect("tonic writes unpadded base64");
        let mut padded = told.clone();
        let padded_value = base64::engine::general_purpose::STANDARD.encode(raw);
        padded
            .insert(STATUS_DETAILS, HeaderValue::from_str(&padded_value).expect("base64 is a header value"));
        assert_eq!(pushback(&padded), Some(Pushback::AtLeast(Duration::from_millis(1_250))));
        // A6's own header decides alone.
        let mut both = told.clone();
        both.insert(PUSHBACK, HeaderValue::from_static("-1"));
        assert_eq!(pushback(&both), Some(Pushback::Stop));
        // Details that are not base64, or not a `google.rpc.Status`: ignored.
        for garbage in ["%%%", "AAAA", "CAESBGJ1c3kaBgoAEgIIAQ"] {
            let mut broken = HeaderMap::new();
            broken.insert(STATUS, HeaderValue::from_static("14"));
            broken.insert(STATUS_DETAILS, HeaderValue::from_static(garbage));
            assert_eq!(pushback(&broken), None, "{garbage}");
        }
    }

    use super::*;

    fn with(name: HeaderName, value: &'static str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(name, HeaderValue::from_static(value));
        map
    }

    #[test]
    fn pushback_values() {
        assert_eq!(pushback(&with(PUSHBACK, "250")), Some(Pushback::Wait(Duration::from_millis(250))));
        assert_eq!(pushback(&with(PUSHBACK, "0")), Some(Pushback::Wait(Duration::ZERO)));
        assert_eq!(
            pushback(&with(PUSHBACK, "2147483647")),
            Some(Pushback::Wait(Duration::from_millis(2_147_483_647)))
        );
        // What grpc-go's strconv.Atoi accepts beyond A6's 32 bits and plain digits.
        for (value, ms) in [("+250", 250), ("0250", 250), ("-0", 0), ("2147483648", 2_147_483_648)] {
            assert_eq!(
                pushback(&with(PUSHBACK, value)),
                Some(Pushback::Wait(Duration::from_millis(ms))),
                "{value:?}"
            );
        }
        for stop in [
            "-1",
            "-2147483648",
            "abc",
            "",
            "1.5",
            " 250",
            "250 ",
            "2_50",
            "0x10",
            "1e3",
            "99999999999999999999999",
        ] {
            assert_eq!(pushback(&with(PUSHBACK, stop)), Some(Pushback::Stop), "{stop:?}");
        }
        assert_eq!(pushback(&HeaderMap::new()), None);
        // Two values: grpc-go does not retry.
        let mut twice = with(PUSHBACK, "10");
        twice.append(PUSHBACK, HeaderValue::from_static("20"));
        assert_eq!(pushback(&twice), Some(Pushback::Stop));
    }

    #[test]
    fn timeouts_parse_and_format() {
        assert_eq!(timeout(&with(TIMEOUT, "100m")), Some(Duration::from_millis(100)));
        assert_eq!(timeout(&with(TIMEOUT, "5S")), Some(Duration::from_secs(5)));
        assert_eq!(timeout(&with(TIMEOUT, "1H")), Some(Duration::from_secs(3_600)));
        for bad in ["", "m", "123456789m", "10x", "-1S", "1.5S"] {
            assert_eq!(timeout(&with(TIMEOUT, bad)), None, "{bad:?}");
        }
        assert_eq!(timeout_value(Duration::from_millis(1_500)), "1500000u");
        assert_eq!(timeout_value(Duration::from_secs(1_000)), "1000000m");
        assert_eq!(timeout_value(Duration::from_secs(86_400 * 365 * 1_000)), "8760000H");
        for d in [Duration::from_nanos(7), Duration::from_millis(250), Duration::from_secs(90_000)] {
            let back = timeout(&with_value(timeout_value(d))).expect("parses");
            assert!(back <= d && d - back < Duration::from_secs(1), "{d:?} → {back:?}");
        }
    }

    fn with_value(value: HeaderValue) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(TIMEOUT, value);
        map
    }

    #[test]
    fn statuses() {
        assert_eq!(status(&with(STATUS, "14")), Some(14));
        assert_eq!(status(&with(STATUS, "0")), Some(0));
        assert_eq!(status(&with(STATUS, "x")), Some(2));
        assert_eq!(status(&with(STATUS, "77")), Some(2));
        assert_eq!(status(&with(STATUS, "16")), Some(16));
        // tonic's Code::from_bytes: anything but the exact digits is UNKNOWN.
        for unknown in [" 14", "14 ", "+14", "014", "1 4", "17", "-1", ""] {
            assert_eq!(status(&with(STATUS, unknown)), Some(2), "{unknown:?}");
        }
        assert_eq!(status(&HeaderMap::new()), None);
        assert_eq!(status_of_http(StatusCode::SERVICE_UNAVAILABLE), 14);
        assert_eq!(status_of_http(StatusCode::NOT_FOUND), 12);
    }
}
