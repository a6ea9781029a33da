//! `RateLimit` / `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers)
//! from untrusted bytes.
//!
//! The input is split into field lines: lines separated by `\n` before the
//! first NUL are `RateLimit` lines, those after it `RateLimit-Policy` lines
//! (neither byte can occur in a field value).
//!
//! Properties: parsing is total; a wait is asked for only when some quota is
//! exhausted (`r=0`), and it is exactly the `t` of an exhausted item or the `w`
//! of the same-named policy — never more than the headers say; a combined
//! field that is not a valid Structured Field List asks for nothing; and the
//! resulting hint only ever lengthens the computed delay.
#![no_main]

use http::header::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use retryscope::hints::rate_limit;
use retryscope::Hint;
use std::time::Duration;

const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

fuzz_target!(|data: &[u8]| {
    let (limits, policies) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let mut headers = HeaderMap::new();
    if !append_lines(&mut headers, &RATELIMIT, limits)
        || !append_lines(&mut headers, &RATELIMIT_POLICY, policies)
    {
        return;
    }
    let wait = rate_limit(&headers);

    let Some(limit_list) = combined(&headers, &RATELIMIT) else {
        assert_eq!(wait, None, "an unparseable RateLimit asked for {wait:?}");
        return;
    };
    let exhausted: Vec<&sfv::Item> = limit_list
        .iter()
        .filter_map(|entry| match entry {
            sfv::ListEntry::Item(item) if int(item, "r") == Some(0) => Some(item),
            _ => None,
        })
        .collect();
    let Some(wait) = wait else { return };
    assert!(!exhausted.is_empty(), "{wait:?} asked for with quota left: {headers:?}");
    let policy_list = combined(&headers, &RATELIMIT_POLICY);
    // Every reset time the headers state for an exhausted quota: its `t`, or
    // the `w` of a policy of the same name.
    let stated: Vec<i64> = exhausted
        .iter()
        .flat_map(|item| {
            let windows = policy_list.iter().flatten().filter_map(|entry| match entry {
                sfv::ListEntry::Item(policy) if name(policy).is_some() && name(policy) == name(item) => {
                    int(policy, "w")
                }
                _ => None,
            });
            int(item, "t").into_iter().chain(windows)
        })
        .collect();
    let secs = i64::try_from(wait.as_secs()).unwrap_or(i64::MAX);
    assert!(stated.contains(&secs), "{wait:?} is not a stated reset time {stated:?}: {headers:?}");
    // The longest explicit reset of an exhausted quota wins.
    let explicit = exhausted.iter().filter_map(|item| int(item, "t"));
    assert!(explicit.clone().all(|t| t <= secs), "{wait:?} is shorter than a reset in {headers:?}");

    // A rate-limit hint can only slow the client down.
    let hint = Hint::rate_limit(wait);
    for computed in [Duration::ZERO, Duration::from_millis(1_500), wait, wait + Duration::from_secs(1)] {
        let applied = hint.apply(computed);
        assert!(applied >= computed && applied == computed.max(wait));
    }
});

/// Appends each `\n`-separated line of `bytes` as a field line; `false` if
/// `http` refuses one (such bytes never reach the parser).
fn append_lines(headers: &mut HeaderMap, name: &HeaderName, bytes: &[u8]) -> bool {
    if bytes.is_empty() {
        return true;
    }
    for line in bytes.split(|&b| b == b'\n') {
        match HeaderValue::from_bytes(line) {
            Ok(value) => headers.append(name.clone(), value),
            Err(_) => return false,
        };
    }
    true
}

/// The field's lines combined as RFC 9110 §5.3 says, parsed as an SF List.
fn combined(headers: &HeaderMap, name: &HeaderName) -> Option<sfv::List> {
    let mut lines = Vec::new();
    for value in headers.get_all(name) {
        let line = value.to_str().ok()?.trim_matches([' ', '\t']);
        if !line.is_empty() {
            lines.push(line);
        }
    }
    if headers.get(name).is_none() {
        return None;
    }
    sfv::Parser::new(&lines.join(", ")).parse::<sfv::List>().ok()
}

fn int(item: &sfv::Item, key: &str) -> Option<i64> {
    item.params.get(key)?.as_integer().map(i64::from)
}

/// A policy's name: a String or a Token, compared by its text.
fn name(item: &sfv::Item) -> Option<&str> {
    match &item.bare_item {
        sfv::BareItem::String(s) => Some(s.as_str()),
        sfv::BareItem::Token(t) => Some(t.as_str()),
        _ => None,
    }
}
