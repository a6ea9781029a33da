//! The `Retry-After` and `RateLimit` parsers, specified on fixed clocks and header values.

use super::*;
use crate::DelaySource;
use proptest::prelude::*;
use std::time::UNIX_EPOCH;

/// A fixed, whole-second "now" (2023-11-14T22:13:20Z).
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn ra(s: &str) -> Option<Duration> {
    retry_after(&HeaderValue::from_str(s).unwrap(), now())
}

fn secs(n: u64) -> Option<Duration> {
    Some(Duration::from_secs(n))
}

fn with(lines: &[(HeaderName, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in lines {
        h.append(name.clone(), HeaderValue::from_str(value).unwrap());
    }
    h
}

#[test]
fn retry_after_seconds() {
    assert_eq!(ra("120"), secs(120));
    assert_eq!(ra("0"), Some(Duration::ZERO));
    assert_eq!(ra("007"), secs(7));
    assert_eq!(ra(" 15\t"), secs(15));
    assert_eq!(ra("18446744073709551615"), secs(u64::MAX));
}

#[test]
fn retry_after_huge_saturates() {
    assert_eq!(ra("99999999999999999999999999"), secs(u64::MAX));
    assert_eq!(ra("18446744073709551616"), secs(u64::MAX));
}

#[test]
fn retry_after_rejects_garbage() {
    for bad in ["-5", "+5", "1.5", "1e3", " ", "", "\t", "abc", "1 2", "5s", "0x10", "١٢"] {
        let Ok(value) = HeaderValue::from_str(bad) else {
            continue;
        };
        assert_eq!(retry_after(&value, now()), None, "{bad:?}");
    }
    let opaque = HeaderValue::from_bytes(b"12\xFF").unwrap();
    assert_eq!(retry_after(&opaque, now()), None);
    let opaque = HeaderValue::from_bytes(&[0xFF]).unwrap();
    assert_eq!(retry_after(&opaque, now()), None);
}

#[test]
fn retry_after_future_date_is_exact() {
    let date = httpdate::fmt_http_date(now() + Duration::from_secs(30));
    assert_eq!(ra(&date), secs(30));
}

#[test]
fn retry_after_date_with_subsecond_now() {
    // HTTP-dates have one-second resolution; the wait is exact, not rounded.
    let now = now() + Duration::from_millis(250);
    let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
    let value = HeaderValue::from_str(&date).unwrap();
    assert_eq!(retry_after(&value, now), Some(Duration::from_millis(29_750)));
}

#[test]
fn retry_after_past_date_is_zero() {
    let date = httpdate::fmt_http_date(now() - Duration::from_secs(3600));
    assert_eq!(ra(&date), Some(Duration::ZERO));
    assert_eq!(ra(&httpdate::fmt_http_date(now())), Some(Duration::ZERO));
}

#[test]
fn retry_after_obsolete_date_forms() {
    // 1994-11-06T08:49:37Z, the RFC 9110 example, seen from 60 s earlier.
    let at = UNIX_EPOCH + Duration::from_secs(784_111_777);
    let before = at - Duration::from_secs(60);
    for form in
        ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"]
    {
        let value = HeaderValue::from_static(form);
        assert_eq!(retry_after(&value, before), secs(60), "{form}");
        assert_eq!(retry_after(&value, now()), Some(Duration::ZERO), "{form}");
    }
}

/// Was `retry_after_from`'s doc example.
#[test]
fn retry_after_from_skips_a_value_it_cannot_read() {
    let mut headers = HeaderMap::new();
    headers.append(RETRY_AFTER, HeaderValue::from_static("soon"));
    headers.append(RETRY_AFTER, HeaderValue::from_static("7"));
    assert_eq!(retry_after_from(&headers, SystemTime::now()), Some(Duration::from_secs(7)));
}

/// Was `retry_delay`'s doc example.
#[test]
fn retry_delay_reads_milliseconds_before_retry_after() {
    let mut headers = HeaderMap::new();
    headers.insert(RETRY_AFTER, HeaderValue::from_static("2"));
    assert_eq!(retry_delay(&headers, SystemTime::now()), Some(Duration::from_secs(2)));
    headers.insert("retry-after-ms", HeaderValue::from_static("1250"));
    assert_eq!(retry_delay(&headers, SystemTime::now()), Some(Duration::from_millis(1250)));
}

#[test]
fn retry_after_from_takes_first_valid() {
    let h = with(&[(RETRY_AFTER, "nope"), (RETRY_AFTER, "3"), (RETRY_AFTER, "9")]);
    assert_eq!(retry_after_from(&h, now()), secs(3));
    assert_eq!(retry_after_from(&HeaderMap::new(), now()), None);
    let h = with(&[(RETRY_AFTER, "-1")]);
    assert_eq!(retry_after_from(&h, now()), None);
}

fn rl(lines: &[&str]) -> Option<Duration> {
    let pairs: Vec<_> = lines.iter().map(|l| (RATELIMIT, *l)).collect();
    rate_limit(&with(&pairs))
}

#[test]
fn rate_limit_exhausted() {
    assert_eq!(rl(&[r#""default";r=0;t=30"#]), secs(30));
    assert_eq!(rl(&["default;r=0;t=30"]), secs(30), "token name");
    assert_eq!(rl(&[r#""default";r=0;t=0"#]), Some(Duration::ZERO));
    assert_eq!(rl(&[r#""default";t=30;r=0;pk=:AQID:;ext=?1"#]), secs(30));
}

#[test]
fn rate_limit_quota_left() {
    assert_eq!(rl(&[r#""default";r=5;t=30"#]), None);
    assert_eq!(rl(&[r#""a";r=1;t=30, "b";r=2;t=90"#]), None);
    assert_eq!(rl(&[""]), None);
    assert_eq!(rate_limit(&HeaderMap::new()), None);
}

#[test]
fn rate_limit_largest_exhausted_wins() {
    assert_eq!(rl(&[r#""a";r=0;t=10, "b";r=3;t=90"#]), secs(10));
    assert_eq!(rl(&[r#""a";r=0;t=10, "b";r=0;t=40, "c";r=0;t=20"#]), secs(40));
}

#[test]
fn rate_limit_policy_window_fallback() {
    let h = with(&[(RATELIMIT, r#""default";r=0"#), (RATELIMIT_POLICY, r#""default";q=100;w=60"#)]);
    assert_eq!(rate_limit(&h), secs(60));

    // Only the same-named policy counts.
    let h = with(&[(RATELIMIT, r#""default";r=0"#), (RATELIMIT_POLICY, r#""other";q=100;w=60"#)]);
    assert_eq!(rate_limit(&h), None);

    // No policy header at all.
    assert_eq!(rl(&[r#""default";r=0"#]), None);

    // An explicit `t` beats the window; a window-derived wait still competes.
    let h = with(&[
        (RATELIMIT, r#""a";r=0;t=5, "b";r=0"#),
        (RATELIMIT_POLICY, r#""a";q=1;w=1000, "b";q=10;w=20"#),
    ]);
    assert_eq!(rate_limit(&h), secs(20));

    // A malformed policy header only disables the fallback.
    let h = with(&[(RATELIMIT, r#""a";r=0;t=5, "b";r=0"#), (RATELIMIT_POLICY, r#""b";q=10;w=-20"#)]);
    assert_eq!(rate_limit(&h), secs(5));
    let h = with(&[(RATELIMIT, r#""b";r=0"#), (RATELIMIT_POLICY, ";;;")]);
    assert_eq!(rate_limit(&h), None);
    // One malformed member leaves the whole field out (the draft's §7), a
    // valid member beside it included: a window of 0, a negative quota.
    for bad in [r#""b";q=10;w=20, "c";q=1;w=0"#, r#""b";q=10;w=20, "c";q=-1;w=5"#] {
        let h = with(&[(RATELIMIT, r#""b";r=0"#), (RATELIMIT_POLICY, bad)]);
        assert_eq!(rate_limit(&h), None, "{bad}");
    }
}

#[test]
fn rate_limit_malformed_is_ignored() {
    for bad in [
        r#""default";r=-1;t=30"#,
        r#""default";r=0;t=abc"#,
        r#""default";r=0;t=-30"#,
        r#""default";r=0;t=1.5"#,
        r#""default";r=0.0;t=30"#,
        r#""default";r="0";t=30"#,
        r#""default";t=30"#,
        r#"("a" "b");r=0;t=30"#,
        r#"5;r=0;t=30"#,
        r#""default";r=0;t=30,"#,
        ";;;",
        "r=0;t=30",
    ] {
        assert_eq!(rl(&[bad]), None, "{bad}");
    }
    // One bad member poisons the whole field.
    assert_eq!(rl(&[r#""a";r=0;t=30, "b";r=-1;t=5"#]), None);
    // Opaque bytes.
    let mut h = HeaderMap::new();
    h.insert(RATELIMIT, HeaderValue::from_bytes(b"\"a\";r=0;t=3\xFF").unwrap());
    assert_eq!(rate_limit(&h), None);
}

#[test]
fn rate_limit_field_lines_are_combined() {
    assert_eq!(rl(&[r#""a";r=4;t=10"#, r#""b";r=0;t=25"#]), secs(25));
    assert_eq!(rl(&[r#""a";r=0;t=10"#, "", r#""b";r=0;t=5"#]), secs(10));
    // A malformed line poisons the combined field.
    assert_eq!(rl(&[r#""a";r=0;t=10"#, "???"]), None);
}

#[test]
fn from_headers_precedence() {
    let limit = r#""default";r=0;t=30"#;
    let h = with(&[(RATELIMIT, limit), (RETRY_AFTER, "5")]);
    let hint = from_headers(&h, now()).unwrap();
    assert_eq!(hint, Hint::retry_after(Duration::from_secs(5)));
    assert_eq!(hint.source, DelaySource::RetryAfter);

    // A malformed Retry-After falls through to RateLimit.
    let h = with(&[(RATELIMIT, limit), (RETRY_AFTER, "later")]);
    assert_eq!(from_headers(&h, now()), Some(Hint::rate_limit(Duration::from_secs(30))));

    let h = with(&[(RATELIMIT, r#""default";r=1;t=30"#)]);
    assert_eq!(from_headers(&h, now()), None);
    assert_eq!(from_headers(&HeaderMap::new(), now()), None);
}

/// Generators of *valid* header values, so that the properties below test
/// what the parsers compute, not only that they survive noise.
mod valid {
    use super::*;

    /// A policy name: an SF Token or an SF String (which may need escapes).
    pub(super) fn name() -> impl Strategy<Value = (String, String)> {
        prop_oneof![
            "[a-zA-Z*][a-zA-Z0-9!#$%&'*+.^_`|~:/-]{0,8}".prop_map(|t| (t.clone(), t)),
            "[ -~]{0,10}".prop_map(|s| {
                let escaped = s.replace('\\', "\\\\").replace('"', "\\\"");
                (s, format!("\"{escaped}\""))
            }),
        ]
    }

    /// Optional whitespace around list separators.
    fn ows() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just(""), Just(" "), Just("  "), Just("\t")]
    }

    /// One `RateLimit` item: `(name, r, t, serialized)`, with extension
    /// parameters (`pk`, unknown ones) in random order.
    pub(super) fn limit() -> impl Strategy<Value = (String, u32, Option<u32>, String)> {
        let remaining = prop_oneof![Just(0_u32), 0_u32..1_000];
        let extras = prop::collection::vec(
            prop_oneof![Just(";pk=:AQID:"), Just(";ext=?1"), Just(";x=\"y\""), Just(";w=7")],
            0..3,
        );
        (name(), remaining, prop::option::of(0_u32..100_000), extras, any::<bool>()).prop_map(
            |((name, text), r, t, extras, t_first)| {
                let t_param = t.map(|t| format!(";t={t}")).unwrap_or_default();
                let params = if t_first {
                    format!("{t_param};r={r}{}", extras.concat())
                } else {
                    format!("{};r={r}{t_param}", extras.concat())
                };
                (name, r, t, format!("{text}{params}"))
            },
        )
    }

    /// One `RateLimit-Policy` item: `(name, w, serialized)`.
    pub(super) fn policy() -> impl Strategy<Value = (String, u32, String)> {
        (name(), 1_u32..10_000, 0_u32..100_000)
            .prop_map(|((name, text), q, w)| (name, w, format!("{text};q={q};w={w}")))
    }

    /// Members joined into field lines: a list split over 1–3 lines, with
    /// optional whitespace around the commas.
    pub(super) fn lines(members: Vec<String>) -> impl Strategy<Value = Vec<String>> {
        let n = members.len();
        (prop::collection::vec((ows(), ows()), n), prop::collection::vec(any::<bool>(), n)).prop_map(
            move |(spaces, breaks)| {
                let mut lines = vec![String::new()];
                for (i, member) in members.iter().enumerate() {
                    let line = lines.last_mut().expect("never empty");
                    if !line.is_empty() {
                        line.push_str(spaces[i].0);
                        line.push(',');
                        line.push_str(spaces[i].1);
                    }
                    line.push_str(member);
                    if breaks[i] && i + 1 < n {
                        lines.push(String::new());
                    }
                }
                lines
            },
        )
    }
}

proptest! {
    /// Any valid `RateLimit` (split over several lines, with extension
    /// parameters) asks for exactly the longest reset among the exhausted
    /// quotas, a missing `t` falling back to the same-named policy's
    /// largest `w`; with no quota exhausted it asks for nothing.
    #[test]
    fn rate_limit_of_valid_fields_is_the_longest_exhausted_reset(
        (limits, limit_lines, policies, policy_lines) in
            (prop::collection::vec(valid::limit(), 1..5), prop::collection::vec(valid::policy(), 0..4))
                .prop_flat_map(|(limits, policies)| {
                    let limit_text = limits.iter().map(|l| l.3.clone()).collect();
                    let policy_text = policies.iter().map(|p| p.2.clone()).collect();
                    (Just(limits), valid::lines(limit_text), Just(policies), valid::lines(policy_text))
                })
    ) {
        let mut headers = HeaderMap::new();
        for line in &limit_lines {
            headers.append(RATELIMIT, HeaderValue::from_str(line).unwrap());
        }
        if !policies.is_empty() {
            for line in &policy_lines {
                headers.append(RATELIMIT_POLICY, HeaderValue::from_str(line).unwrap());
            }
        }
        let expected = limits
            .iter()
            .filter(|(_, r, _, _)| *r == 0)
            .filter_map(|(name, _, t, _)| {
                t.or_else(|| policies.iter().filter(|(p, _, _)| p == name).map(|(_, w, _)| *w).max())
            })
            .max()
            .map(|secs| Duration::from_secs(secs.into()));
        prop_assert_eq!(rate_limit(&headers), expected, "{:?} {:?}", limit_lines, policy_lines);
    }

    /// Any IMF-fixdate, with optional whitespace around it, gives exactly
    /// the time from `now` until it (zero once it has passed).
    #[test]
    fn retry_after_of_valid_dates_is_exact(
        date_secs in 0_u64..253_402_300_799, now_secs in 0_u64..4_000_000_000, lead in "[ \t]{0,2}", trail in "[ \t]{0,2}"
    ) {
        let date = UNIX_EPOCH + Duration::from_secs(date_secs);
        let now = UNIX_EPOCH + Duration::from_secs(now_secs);
        let value = HeaderValue::from_str(&format!("{lead}{}{trail}", httpdate::fmt_http_date(date))).unwrap();
        prop_assert_eq!(retry_after(&value, now), Some(date.duration_since(now).unwrap_or_default()));
    }

    /// Any delay-seconds, with leading zeros and optional whitespace, is
    /// exactly that many seconds.
    #[test]
    fn retry_after_of_valid_seconds_is_exact(n in any::<u64>(), zeros in 0_usize..3, lead in "[ \t]{0,2}") {
        let value = HeaderValue::from_str(&format!("{lead}{}{n}", "0".repeat(zeros))).unwrap();
        prop_assert_eq!(retry_after(&value, now()), secs(n));
    }

    #[test]
    fn retry_after_seconds_roundtrip(n in any::<u64>()) {
        prop_assert_eq!(ra(&n.to_string()), secs(n));
    }

    #[test]
    fn retry_after_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(value) = HeaderValue::from_bytes(&bytes) {
            let _ = retry_after(&value, now());
        }
    }

    #[test]
    fn rate_limit_never_panics(s in "[ -~]{0,64}", p in "[ -~]{0,64}") {
        if let (Ok(a), Ok(b)) = (HeaderValue::from_str(&s), HeaderValue::from_str(&p)) {
            let mut h = HeaderMap::new();
            h.insert(RATELIMIT, a);
            h.insert(RATELIMIT_POLICY, b);
            let _ = rate_limit(&h);
        }
    }

    #[test]
    fn rate_limit_never_asks_to_wait_with_quota_left(r in 1_i64..1_000_000, t in 0_i64..1_000_000) {
        let line = format!("\"p\";r={r};t={t}");
        prop_assert_eq!(rl(&[&line]), None);
    }
}
