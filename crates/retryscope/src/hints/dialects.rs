//! The vendors' own rate-limit headers: the dialects of the APIs where users
//! meet a 429 most, read into the same [`Quota`] and delays as the draft's
//! `RateLimit` and RFC 9110's `Retry-After`.
//!
//! | vendor | headers | format |
//! |---|---|---|
//! | OpenAI, Azure OpenAI | `x-ratelimit-remaining-{requests,tokens}` + `x-ratelimit-reset-{requests,tokens}` | a count; a Go duration (`1s`, `6m0s`, `12ms`) |
//! | OpenAI's and Azure's SDKs | `retry-after-ms`, `x-ms-retry-after-ms` | milliseconds |
//! | Anthropic | `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,reset}` | a count; an RFC 3339 time (`2025-08-21T12:40:59Z`) |
//! | AWS | `x-amz-retry-after` | milliseconds |
//! | GitHub, Stripe, gateways | `x-ratelimit-remaining` + `x-ratelimit-reset` | read by [`quota`](super::quota) itself (Unix seconds or a delay) |
//!
//! **Requests and tokens.** A vendor that meters tokens reports a token
//! quota beside the request quota. A token count says nothing of how many
//! *requests* are left — that depends on each request's size, which the
//! client does not know in advance — so a token quota paces only once it is
//! exhausted (`remaining` 0: no call before its reset, the strictest quota of
//! all); while tokens remain, the request quota paces alone.
//!
//! Every reader is total: a malformed value is ignored (the other headers
//! still count), never an error and never a panic.

use super::quota::single;
use crate::pace::Quota;
use http::header::{HeaderMap, HeaderName};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `retry-after-ms`: the wait in milliseconds (OpenAI's and Azure OpenAI's
/// services; their SDKs prefer it to `Retry-After`).
const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");
/// `x-ms-retry-after-ms`: the same, as other Azure services send it.
const X_MS_RETRY_AFTER_MS: HeaderName = HeaderName::from_static("x-ms-retry-after-ms");
/// `x-amz-retry-after`: the wait in milliseconds (AWS services).
const X_AMZ_RETRY_AFTER: HeaderName = HeaderName::from_static("x-amz-retry-after");

/// The longest millisecond wait read (one day, the engine's
/// [`MAX_DURATION`](crate::MAX_DURATION)): beyond it the number is saturated
/// to a day, which is still "too long" for every deadline.
const MAX_MILLIS: u64 = 86_400_000;

/// What a dialect calls the two halves of one quota.
struct Pair {
    remaining: HeaderName,
    reset: HeaderName,
    reset_format: ResetFormat,
    meters: Meters,
}

#[derive(Clone, Copy)]
enum ResetFormat {
    /// A Go `time.Duration` string from now (OpenAI).
    GoDuration,
    /// An RFC 3339 date-time (Anthropic).
    Rfc3339,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Meters {
    Requests,
    Tokens,
}

/// Every vendor pair, in no particular order: the strictest quota wins.
fn pairs() -> [Pair; 6] {
    let pair = |remaining, reset, reset_format, meters| Pair {
        remaining: HeaderName::from_static(remaining),
        reset: HeaderName::from_static(reset),
        reset_format,
        meters,
    };
    use Meters::{Requests, Tokens};
    use ResetFormat::{GoDuration, Rfc3339};
    [
        pair("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", GoDuration, Requests),
        pair("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens", GoDuration, Tokens),
        pair(
            "anthropic-ratelimit-requests-remaining",
            "anthropic-ratelimit-requests-reset",
            Rfc3339,
            Requests,
        ),
        pair("anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset", Rfc3339, Tokens),
        pair(
            "anthropic-ratelimit-input-tokens-remaining",
            "anthropic-ratelimit-input-tokens-reset",
            Rfc3339,
            Tokens,
        ),
        pair(
            "anthropic-ratelimit-output-tokens-remaining",
            "anthropic-ratelimit-output-tokens-reset",
            Rfc3339,
            Tokens,
        ),
    ]
}

/// Whether `name` starts a vendor dialect's quota: a quick test that spares
/// responses without one the lookups below.
pub(super) fn names_a_vendor_quota(name: &HeaderName) -> bool {
    let name = name.as_str();
    name.starts_with("x-ratelimit-remaining-") || name.starts_with("anthropic-ratelimit-")
}

/// The quotas of the vendor dialects in `headers` (see the module's table);
/// token quotas only when exhausted.
pub(super) fn vendor_quotas(headers: &HeaderMap, now: SystemTime) -> impl Iterator<Item = Quota> + '_ {
    pairs().into_iter().filter_map(move |pair| {
        let remaining = count(single(headers, &pair.remaining)?)?;
        if pair.meters == Meters::Tokens && remaining != 0 {
            return None;
        }
        let reset = single(headers, &pair.reset)?;
        let reset = match pair.reset_format {
            ResetFormat::GoDuration => go_duration(reset)?,
            ResetFormat::Rfc3339 => {
                let at = rfc3339(reset)?;
                // A reset in the past: the window is over, nothing to pace.
                at.duration_since(now).ok()?
            }
        };
        Some(Quota::new(remaining, reset))
    })
}

/// The wait a vendor's millisecond header asks for: the first valid one of
/// `retry-after-ms`, `x-ms-retry-after-ms` and `x-amz-retry-after`.
pub(super) fn retry_after_millis(headers: &HeaderMap) -> Option<Duration> {
    [RETRY_AFTER_MS, X_MS_RETRY_AFTER_MS, X_AMZ_RETRY_AFTER]
        .iter()
        .find_map(|name| headers.get_all(name).iter().find_map(|v| millis(v.to_str().ok()?)))
}

/// A non-negative decimal count of milliseconds, saturated to [`MAX_MILLIS`].
fn millis(text: &str) -> Option<Duration> {
    let text = text.trim_matches([' ', '\t']);
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms = text.parse::<u64>().unwrap_or(u64::MAX).min(MAX_MILLIS);
    Some(Duration::from_millis(ms))
}

/// A remaining count: `1*DIGIT`.
fn count(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A Go `time.Duration` as its `String` method writes it: one or more
/// `<decimal><unit>` with units `h`, `m`, `s`, `ms`, `us`/`µs`, `ns`
/// (`6m0s`, `1.5s`, `12ms`, `1h2m3s`, `0s`). No sign (a reset is never in the
/// past), no spaces; at most a day ([`MAX_MILLIS`]) or `None`.
pub(super) fn go_duration(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = 0.0_f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(|b| b.is_ascii_digit() || *b == b'.').count();
        let (number, tail) = rest.split_at(digits);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, "0"));
        if whole.is_empty() || fraction.is_empty() || fraction.contains('.') {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        // `ms` before `m`: the longer unit first.
        let units =
            [("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("ns", 1e-9), ("h", 3600.0), ("m", 60.0), ("s", 1.0)];
        let (seconds, tail) =
            units.iter().find_map(|(unit, scale)| tail.strip_prefix(unit).map(|t| (value * scale, t)))?;
        total += seconds;
        rest = tail;
    }
    (total.is_finite() && total <= MAX_MILLIS as f64 / 1e3).then(|| Duration::from_secs_f64(total))
}

/// An RFC 3339 `date-time` (§5.6): `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`, `T`
/// or `t` or a space between date and time, `Z` or `z`. A leap second
/// (`:60`) is read as the second after `:59`.
pub(super) fn rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' || b[16] != b':'
    {
        return None;
    }
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut nanos = 0_u32;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        // Nanoseconds are the finest a `SystemTime` is read to here; more
        // digits are allowed by the RFC and cut.
        let kept = &fraction[..digits.min(9)];
        nanos = kept.parse::<u32>().ok()? * 10_u32.pow(9 - kept.len() as u32);
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let zone = rest.get(1..)?;
            let zb = zone.as_bytes();
            if zb.len() != 5 || zb[2] != b':' {
                return None;
            }
            let (h, m) = (zone[..2].parse::<i64>().ok()?, zone[3..].parse::<i64>().ok()?);
            if !zone[..2].bytes().chain(zone[3..].bytes()).all(|c| c.is_ascii_digit()) || h > 23 || m > 59 {
                return None;
            }
            sign * (h * 3600 + m * 60)
        }
    };
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset;
    let seconds = u64::try_from(seconds).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(seconds, nanos))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (Howard
/// Hinnant's `days_from_civil`, the standard closed form).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_as_openai_sends_them() {
        assert_eq!(go_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(go_duration("12ms"), Some(Duration::from_millis(12)));
        assert_eq!(go_duration("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(go_duration("0s"), Some(Duration::ZERO));
        assert_eq!(go_duration("2m30.5s"), Some(Duration::from_millis(150_500)));
        for bad in ["", "5", "-1s", "1 s", "1.s", ".5s", "1x", "s", "1s ", "25h", "1.2.3s", "1d"] {
            assert_eq!(go_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn rfc3339_times_as_anthropic_sends_them() {
        // 2025-08-21T12:40:59Z is 1755780059 s after the epoch.
        let at = |s| UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(rfc3339("2025-08-21T12:40:59Z"), Some(at(1_755_780_059)));
        assert_eq!(rfc3339("2025-08-21T14:40:59+02:00"), Some(at(1_755_780_059)));
        assert_eq!(rfc3339("2025-08-21t12:40:59.250z"), Some(at(1_755_780_059) + Duration::from_millis(250)));
        assert_eq!(rfc3339("2024-02-29T00:00:00Z"), Some(at(1_709_164_800)));
        assert_eq!(rfc3339("1970-01-01T00:00:00Z"), Some(UNIX_EPOCH));
        for bad in [
            "",
            "2025-08-21",
            "2025-08-21T12:40:59",
            "2025-02-29T00:00:00Z",
            "2025-13-01T00:00:00Z",
            "2025-08-21T24:00:00Z",
            "2025-08-21T12:40:59+2:00",
            "2025-08-21T12:40:59.Z",
            "1969-12-31T23:59:59Z",
            "2025-08-21X12:40:59Z",
            "+025-08-21T12:40:59Z",
        ] {
            assert_eq!(rfc3339(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn millisecond_waits_saturate_at_a_day() {
        assert_eq!(millis("1500"), Some(Duration::from_millis(1500)));
        assert_eq!(millis("99999999999999999999999"), Some(Duration::from_millis(MAX_MILLIS)));
        for bad in ["", "1.5", "-3", "5s"] {
            assert_eq!(millis(bad), None, "{bad:?}");
        }
    }
}
