//! Quota headers, on any response: how many requests are left until when, for
//! the [`Pacer`](crate::Pacer).

use super::dialects::{names_a_vendor_quota, vendor_quotas};
use super::{
    RATELIMIT, from_cache, non_negative, parse_list, parse_policies, policy_name, policy_window, retry_delay,
};
use crate::pace::{PaceSignal, Quota, QuotaPolicy};
use crate::verdict::Hint;
use http::header::{HeaderMap, HeaderName};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `RateLimit-Remaining`, of the draft's earlier revisions (-00 to -06) and
/// the gateways that still send it.
pub(super) const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
/// `RateLimit-Reset`, of the draft's earlier revisions.
pub(super) const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
/// `X-RateLimit-Remaining`, as GitHub, Stripe and many gateways send it.
pub(super) const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`, as GitHub, Stripe and many gateways send it.
pub(super) const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// `X-RateLimit-Resource`: which of GitHub's quotas (`core`, `search`,
/// `graphql`, …) the response's `X-RateLimit-*` describe. GitHub's own
/// header, so a 403 that carries it is one of GitHub's rate-limit answers.
pub(super) const X_RATELIMIT_RESOURCE: HeaderName = HeaderName::from_static("x-ratelimit-resource");

/// A reset at or above this many is a Unix time in seconds, not a delay: no
/// quota window lasts 31 years (10⁹ s is September 2001).
const EPOCH_SECONDS_FROM: f64 = 1e9;
/// A reset at or above this many is a Unix time in milliseconds (10¹² ms is
/// also September 2001).
const EPOCH_MILLIS_FROM: f64 = 1e12;

/// The strictest quota a response's headers report, if any: the one that
/// allows the fewest requests per second; an exhausted quota is the
/// strictest of all, and between two exhausted ones the later reset.
///
/// Read, each a hint on its own:
///
/// | headers | remaining | reset |
/// |---|---|---|
/// | `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10) | each item's `r` | its `t`, else the `w` of its policy in `RateLimit-Policy` |
/// | `RateLimit-Remaining` + `RateLimit-Reset` (the draft's revisions -00 to -06) | the integer | see below |
/// | `X-RateLimit-Remaining` + `X-RateLimit-Reset` (GitHub, Stripe, many gateways) | the integer | see below |
/// | `x-ratelimit-remaining-requests` + `x-ratelimit-reset-requests` (OpenAI, Azure OpenAI) | the integer | a Go duration: `1s`, `6m0s`, `12ms` |
/// | `anthropic-ratelimit-requests-remaining` + `-reset` (Anthropic) | the integer | an RFC 3339 time: `2025-08-21T12:40:59Z` |
/// | the same vendors' token quotas (`…-tokens`, Anthropic's `…-input-tokens`, `…-output-tokens`) | the integer, **only when 0** | as for requests |
///
/// A token quota paces only once exhausted: how many *requests* a count of
/// tokens allows depends on each request's size, which the client does not
/// know, while an exhausted one forbids every request until its reset.
///
/// A `Reset` value is a non-negative decimal number. Vendors send either a
/// delay or a Unix time, and the value itself tells which: below 10⁹ it is a
/// delay in seconds (`30`, `1.5`); from 10⁹ it is a Unix time in seconds
/// (GitHub's `1767225600`), from 10¹² one in milliseconds — 10⁹ s of delay
/// would be 31 years, and both thresholds are September 2001 as a date. A
/// Unix time in the past means the window has reset: no quota. Anything
/// malformed (a sign, text, a remaining count without a reset) is ignored:
/// the other headers still count. A response from a cache (an `Age` above
/// zero) reports no quota: its headers are as old as it is (the ratelimit
/// draft's §7.3).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::{HeaderMap, HeaderValue};
/// use retryscope::hints::quota;
/// use retryscope::pace::Quota;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("ratelimit", HeaderValue::from_static(r#""default";r=50;t=30"#));
/// assert_eq!(quota(&headers, SystemTime::now()), Some(Quota { remaining: 50, reset: Duration::from_secs(30), policy: None }));
///
/// // A vendor's stricter quota wins: 5 requests in 20 s is slower than 50 in 30 s.
/// headers.insert("x-ratelimit-remaining", HeaderValue::from_static("5"));
/// headers.insert("x-ratelimit-reset", HeaderValue::from_static("20"));
/// assert_eq!(quota(&headers, SystemTime::now()), Some(Quota { remaining: 5, reset: Duration::from_secs(20), policy: None }));
/// ```
pub fn quota(headers: &HeaderMap, now: SystemTime) -> Option<Quota> {
    let Quotas { spent, left } = quotas(headers, now, Ietf::Every);
    // An exhausted quota is the strictest of all.
    spent.or(left)
}

/// Which of the `RateLimit` field's quotas count.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ietf {
    Every,
    /// Those with some left: beside a `Retry-After`, which "MUST take
    /// precedence" (the draft's §7), an exhausted one's reset is no gate.
    Unspent,
}

/// What a response's quotas come to: the exhausted one that resets last,
/// and the strictest of those with requests left. Kept apart, so that one
/// policy's exhausted window does not hide another's limit.
#[derive(Default)]
struct Quotas {
    spent: Option<Quota>,
    left: Option<Quota>,
}

fn quotas(headers: &HeaderMap, now: SystemTime, ietf: Ietf) -> Quotas {
    let mut found = Quotas::default();
    // Most responses carry no quota at all: one pass over their few names
    // spares them the lookups and parsing below.
    if !headers.keys().any(names_a_quota) || from_cache(headers) {
        return found;
    }
    let pairs = [(RATELIMIT_REMAINING, RATELIMIT_RESET), (X_RATELIMIT_REMAINING, X_RATELIMIT_RESET)];
    let every = ietf_quotas(headers)
        .into_iter()
        .flatten()
        .filter(|quota| ietf == Ietf::Every || quota.remaining > 0)
        .chain(pairs.iter().filter_map(|(remaining, reset)| vendor_quota(headers, remaining, reset, now)))
        .chain(vendor_quotas(headers, now));
    for quota in every {
        let kept = if quota.remaining == 0 { &mut found.spent } else { &mut found.left };
        if kept.is_none_or(|kept| quota.is_stricter_than(&kept)) {
            *kept = Some(quota);
        }
    }
    found
}

/// Whether `name` is a field without which [`quota`] finds nothing:
/// `RateLimit`, the `*-Remaining` half of a vendor pair, or a dialect's
/// (see [`dialects`](super::dialects)).
fn names_a_quota(name: &HeaderName) -> bool {
    [&RATELIMIT, &RATELIMIT_REMAINING, &X_RATELIMIT_REMAINING].contains(&name) || names_a_vendor_quota(name)
}

/// Each item of `RateLimit` as a quota; `None` if the field is absent or
/// malformed (then, as for [`rate_limit`](super::rate_limit), it is ignored whole).
fn ietf_quotas(headers: &HeaderMap) -> Option<Vec<Quota>> {
    let limits = parse_list(headers, &RATELIMIT)?;
    let mut policies: Option<Option<sfv::List>> = None;
    let mut quotas = Vec::with_capacity(limits.len());
    for entry in &limits {
        let sfv::ListEntry::Item(item) = entry else { return None };
        let name = policy_name(item)?;
        let remaining = non_negative(item.params.get("r")?)?;
        let policies = policies.get_or_insert_with(|| parse_policies(headers)).as_ref();
        let reset = match item.params.get("t") {
            Some(t) => Some(non_negative(t)?),
            None => policies.and_then(|list| policy_window(list, name)),
        };
        if let Some(reset) = reset {
            let quota = Quota::new(remaining, Duration::from_secs(reset));
            quotas.push(match policies.and_then(|list| quota_policy(list, name)) {
                Some(policy) => quota.with_policy(policy),
                None => quota,
            });
        }
    }
    Some(quotas)
}

/// The first policy named `name` in `RateLimit-Policy` with both a quota
/// (`q`) and a window (`w`).
fn quota_policy(policies: &sfv::List, name: &str) -> Option<QuotaPolicy> {
    policies.iter().find_map(|entry| match entry {
        sfv::ListEntry::Item(item) if policy_name(item) == Some(name) => {
            let quota = item.params.get("q").and_then(non_negative)?;
            let window = item.params.get("w").and_then(non_negative)?;
            Some(QuotaPolicy::new(quota, Duration::from_secs(window)))
        }
        _ => None,
    })
}

/// A `*-Remaining` / `*-Reset` pair as a quota.
fn vendor_quota(
    headers: &HeaderMap,
    remaining: &HeaderName,
    reset: &HeaderName,
    now: SystemTime,
) -> Option<Quota> {
    let remaining = single(headers, remaining)?;
    if remaining.is_empty() || !remaining.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let remaining = remaining.parse::<u64>().ok()?;
    let reset = reset_delay(single(headers, reset)?, now)?;
    Some(Quota::new(remaining, reset))
}

/// The one value of `name`, trimmed; `None` if absent, repeated or not text.
pub(super) fn single<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        // Two values of a single-valued field contradict each other.
        return None;
    }
    Some(value.to_str().ok()?.trim_matches([' ', '\t']))
}

/// A vendor reset value as a delay from `now` (see [`quota`]).
fn reset_delay(text: &str, now: SystemTime) -> Option<Duration> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    if !value.is_finite() {
        return None;
    }
    let epoch = if value >= EPOCH_MILLIS_FROM {
        value / 1e3
    } else if value >= EPOCH_SECONDS_FROM {
        value
    } else {
        return Duration::try_from_secs_f64(value).ok();
    };
    let at = UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(epoch).ok()?)?;
    // A reset in the past: the window is over, nothing to pace.
    at.duration_since(now).ok()
}

/// What a response says about pace (see [`Pacer`](crate::Pacer)): for
/// [`Pacer::learn`](crate::Pacer::learn).
///
/// - a wait (`Retry-After` or a vendor's millisecond header, read as
///   [`from_headers`](super::from_headers) reads it) on a **429 or 503** closes the dependency
///   for that long (RFC 9110 §10.2.3 pairs it with those; on other statuses it
///   concerns only the call that got it, and stays the call's own hint) — and
///   on a **403 from GitHub** (it carries `x-ratelimit-resource`), whose
///   secondary rate limits answer 403 with a `Retry-After`;
/// - a quota on **any** status paces the calls that follow: an exhausted one
///   closes the dependency until its reset (the one that resets last, if
///   several are), and the strictest of those with requests left spaces the
///   calls (after that reset, if one is exhausted);
/// - a **429** is a throttling answer.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::{HeaderMap, HeaderValue, header::RETRY_AFTER};
/// use retryscope::hints::pace_signal;
/// use retryscope::Hint;
///
/// let mut headers = HeaderMap::new();
/// headers.insert(RETRY_AFTER, HeaderValue::from_static("5"));
/// let signal = pace_signal(429, &headers, SystemTime::now());
/// assert_eq!(signal.not_before, Some(Hint::retry_after(Duration::from_secs(5))));
/// assert!(signal.throttled);
/// // On a 500, the header is that call's business.
/// assert_eq!(pace_signal(500, &headers, SystemTime::now()).not_before, None);
/// ```
pub fn pace_signal(status: u16, headers: &HeaderMap, now: SystemTime) -> PaceSignal {
    let mut signal = PaceSignal { throttled: status == 429, ..PaceSignal::none() };
    // Read only where it holds the dependency: a success does not pay for
    // the four lookups.
    let holds = matches!(status, 429 | 503) || (status == 403 && headers.contains_key(X_RATELIMIT_RESOURCE));
    let wait = if holds { retry_delay(headers, now) } else { None };
    signal.not_before = wait.map(Hint::retry_after);
    // With a `Retry-After` beside it, the wait "MUST take precedence"
    // (draft-ietf-httpapi-ratelimit-headers §7): an exhausted `RateLimit`
    // quota's reset closes no gate of its own; one with some left still
    // paces. The vendors' dialects are not the draft's: OpenAI's spent
    // tokens hold until their reset beside its `retry-after-ms`.
    let ietf = if wait.is_some() { Ietf::Unspent } else { Ietf::Every };
    let Quotas { spent, left } = quotas(headers, now, ietf);
    // An exhausted quota closes the dependency until its reset (unless a
    // wait above already holds it longer), and the strictest of those with
    // requests left spaces the calls after it: a spent burst window does
    // not hide an hourly quota with one request left.
    if let Some(spent) = spent
        && signal.not_before.is_none_or(|hint| spent.reset > hint.delay)
    {
        signal.not_before = Some(Hint::rate_limit(spent.reset));
    }
    signal.quota = left;
    signal
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hints::RATELIMIT_POLICY;
    use http::HeaderValue;

    fn headers(pairs: &[(&HeaderName, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append((*name).clone(), HeaderValue::from_static(value));
        }
        map
    }

    const NOW: Duration = Duration::from_secs(1_767_225_600); // 2026-01-01

    #[test]
    fn a_reset_is_a_delay_or_a_unix_time_in_seconds_or_milliseconds() {
        let now = UNIX_EPOCH + NOW;
        assert_eq!(reset_delay("30", now), Some(Duration::from_secs(30)));
        assert_eq!(reset_delay("1.5", now), Some(Duration::from_millis(1_500)));
        assert_eq!(reset_delay("1767225660", now), Some(Duration::from_secs(60)));
        assert_eq!(reset_delay("1767225660000", now), Some(Duration::from_secs(60)));
        assert_eq!(reset_delay("1767225000", now), None, "in the past");
        for bad in ["", "-1", "+3", "1e3", "1.", ".5", "soon", "1 2", "0x10"] {
            assert_eq!(reset_delay(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn vendor_headers_need_both_halves_and_one_value_each() {
        let now = UNIX_EPOCH + NOW;
        let both = headers(&[(&X_RATELIMIT_REMAINING, "4"), (&X_RATELIMIT_RESET, "1767225620")]);
        assert_eq!(quota(&both, now), Some(Quota::new(4, Duration::from_secs(20))));
        assert_eq!(quota(&headers(&[(&X_RATELIMIT_REMAINING, "4")]), now), None);
        let twice = headers(&[
            (&X_RATELIMIT_REMAINING, "4"),
            (&X_RATELIMIT_REMAINING, "9"),
            (&X_RATELIMIT_RESET, "5"),
        ]);
        assert_eq!(quota(&twice, now), None);
        let old_draft = headers(&[(&RATELIMIT_REMAINING, "0"), (&RATELIMIT_RESET, "7")]);
        assert_eq!(quota(&old_draft, now), Some(Quota::new(0, Duration::from_secs(7))));
    }

    #[test]
    fn every_ietf_item_counts_and_the_strictest_wins() {
        let now = UNIX_EPOCH + NOW;
        let two = headers(&[(&RATELIMIT, r#""burst";r=90;t=1, "day";r=2;t=3"#)]);
        assert_eq!(quota(&two, now), Some(Quota::new(2, Duration::from_secs(3))));
        let from_policy =
            headers(&[(&RATELIMIT, r#""default";r=10"#), (&RATELIMIT_POLICY, r#""default";q=100;w=60"#)]);
        let per_minute = QuotaPolicy::new(100, Duration::from_secs(60));
        assert_eq!(
            quota(&from_policy, now),
            Some(Quota::new(10, Duration::from_secs(60)).with_policy(per_minute))
        );
        let malformed = headers(&[(&RATELIMIT, r#""default";r=-1;t=3"#)]);
        assert_eq!(quota(&malformed, now), None);
    }

    #[test]
    fn quota_headers_are_found_among_any_others_and_a_response_without_them_has_none() {
        let now = UNIX_EPOCH + NOW;
        let date = HeaderName::from_static("date");
        let server = HeaderName::from_static("server");
        let plain = headers(&[(&date, "Thu, 01 Jan 2026 00:00:00 GMT"), (&server, "hyper")]);
        assert_eq!(quota(&plain, now), None);
        let only_resets =
            headers(&[(&RATELIMIT_RESET, "5"), (&X_RATELIMIT_RESET, "5"), (&RATELIMIT_POLICY, "x")]);
        assert_eq!(quota(&only_resets, now), None);
        let among = headers(&[
            (&date, "Thu, 01 Jan 2026 00:00:00 GMT"),
            (&server, "hyper"),
            (&X_RATELIMIT_RESET, "20"),
            (&X_RATELIMIT_REMAINING, "3"),
        ]);
        assert_eq!(quota(&among, now), Some(Quota::new(3, Duration::from_secs(20))));
    }

    /// The ratelimit draft's §7: with both, "the Retry-After field MUST take
    /// precedence". A 429 saying 5 s beside an exhausted 30-s `RateLimit`
    /// quota closes the gate for 5 s, not 30 (a 10-s deadline refused the
    /// retry). A vendor's exhausted quota is not the draft's, and still holds.
    #[test]
    fn retry_after_takes_precedence_over_an_exhausted_quota() {
        let now = UNIX_EPOCH + NOW;
        let retry_after = HeaderName::from_static("retry-after");
        let both = headers(&[(&retry_after, "5"), (&RATELIMIT, r#""d";r=0;t=30"#)]);
        let signal = pace_signal(429, &both, now);
        assert_eq!(signal.not_before, Some(Hint::retry_after(Duration::from_secs(5))));
        assert_eq!(signal.quota, None);
        // Quota left still paces beside the wait.
        let left = headers(&[(&retry_after, "5"), (&RATELIMIT, r#""d";r=3;t=30"#)]);
        assert_eq!(pace_signal(429, &left, now).quota, Some(Quota::new(3, Duration::from_secs(30))));
        // Alone, the exhausted quota is the gate.
        let alone = headers(&[(&RATELIMIT, r#""d";r=0;t=30"#)]);
        assert_eq!(pace_signal(429, &alone, now).not_before, Some(Hint::rate_limit(Duration::from_secs(30))));
        let vendor =
            headers(&[(&retry_after, "5"), (&X_RATELIMIT_REMAINING, "0"), (&X_RATELIMIT_RESET, "30")]);
        assert_eq!(
            pace_signal(429, &vendor, now).not_before,
            Some(Hint::rate_limit(Duration::from_secs(30)))
        );
    }

    /// The draft's §7: a client "SHOULD NOT exceed the quota units conveyed
    /// by the remaining parameter before the time window expressed in the
    /// reset parameter" — for every policy. A spent 1-s burst window closes
    /// the gate for 1 s, and the hourly quota with one request left spaces
    /// the calls after it. (The spent window stood for both: once it reset,
    /// calls went unpaced.)
    #[test]
    fn a_spent_policy_closes_the_gate_and_another_with_some_left_still_paces() {
        let now = UNIX_EPOCH + NOW;
        let two = headers(&[(&RATELIMIT, r#""burst";r=0;t=1, "hour";r=1;t=3600"#)]);
        let signal = pace_signal(200, &two, now);
        assert_eq!(signal.not_before, Some(Hint::rate_limit(Duration::from_secs(1))));
        assert_eq!(signal.quota, Some(Quota::new(1, Duration::from_secs(3600))));
        // `quota` still answers the strictest of all: the spent one.
        assert_eq!(quota(&two, now), Some(Quota::new(0, Duration::from_secs(1))));
        // Two spent: the later reset closes the gate.
        let spent = headers(&[(&RATELIMIT, r#""a";r=0;t=5, "b";r=0;t=9"#)]);
        assert_eq!(pace_signal(200, &spent, now).not_before, Some(Hint::rate_limit(Duration::from_secs(9))));
    }

    /// The ratelimit draft's §7.3: the fields "SHOULD be ignored on responses
    /// that come from cache". An `Age` of 120 s: no quota, no wait; an `Age`
    /// of 0 (or a malformed one) is a fresh response.
    #[test]
    fn a_response_from_a_cache_reports_no_quota() {
        let now = UNIX_EPOCH + NOW;
        let age = HeaderName::from_static("age");
        let cached =
            headers(&[(&age, "120"), (&RATELIMIT, r#""d";r=0;t=30"#), (&X_RATELIMIT_REMAINING, "0")]);
        assert_eq!(quota(&cached, now), None);
        assert_eq!(crate::hints::rate_limit(&cached), None);
        assert_eq!(pace_signal(200, &cached, now), PaceSignal::none());
        for fresh in ["0", "soon"] {
            let fresh = headers(&[(&age, fresh), (&RATELIMIT, r#""d";r=0;t=30"#)]);
            assert_eq!(quota(&fresh, now), Some(Quota::new(0, Duration::from_secs(30))));
        }
    }
}
