//! Server hints: when a server says to try again.
//!
//! Two kinds of response header can tell a client how long to wait before it
//! retries:
//!
//! - [`Retry-After`](https://www.rfc-editor.org/rfc/rfc9110#section-10.2.3)
//!   (RFC 9110 §10.2.3): either a number of seconds or an HTTP-date. The engine
//!   waits at least that long — the longer of it and the backoff, plus a random
//!   spread of up to a fifth of it (at most 5 s), so that the clients one
//!   server told "1 s" do not all come back in the same millisecond
//!   ([`Hint::retry_after`], [`Hint::wait`]).
//! - [`RateLimit` / `RateLimit-Policy`](https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/)
//!   (draft-ietf-httpapi-ratelimit-headers-10, Structured Fields): the engine waits
//!   *at least* until an exhausted quota resets ([`Hint::rate_limit`]); these
//!   headers can only ever slow a client down.
//!
//! Beyond the next attempt of one call, a response's quota headers — the
//! draft's `RateLimit`, its earlier `RateLimit-Remaining` / `-Reset` and the
//! vendors' `X-RateLimit-*` and their own dialects (OpenAI's, Anthropic's:
//! see the table at [`quota`]) — pace every call to the dependency: [`quota`],
//! [`pace_signal`] and the [`Pacer`](crate::Pacer).
//!
//! Every parser here is total: a malformed header is ignored (`None`), never an
//! error and never a panic.
//!
//! | Header | Accepted | Result |
//! |---|---|---|
//! | `Retry-After: 120` | `1*DIGIT`, surrounding spaces/tabs trimmed | 120 s |
//! | `Retry-After: 99999999999999999999999` | too large for `u64` seconds | saturates to `u64::MAX` s |
//! | `Retry-After: <HTTP-date>` | IMF-fixdate, RFC 850, asctime | time until the date; `ZERO` if past |
//! | `Retry-After: -5` / `1.5` / `1 2` / empty / opaque bytes | — | `None` |
//! | `RateLimit: "default";r=0;t=30` | quota exhausted | 30 s |
//! | `RateLimit: "default";r=5;t=30` | quota left | `None` |
//!
//! **The headers read**, by name (as [`HeaderMap`] stores them, lowercase):
//!
//! | header | from | read by |
//! |---|---|---|
//! | `retry-after` | RFC 9110 | [`from_headers`] (each value: [`retry_after`]) |
//! | `retry-after-ms`, `x-ms-retry-after-ms` | OpenAI, Azure (milliseconds) | [`from_headers`] (before `retry-after`) |
//! | `x-amz-retry-after` | AWS (milliseconds) | [`from_headers`] (before `retry-after`) |
//! | `ratelimit`, `ratelimit-policy` | the IETF draft (-10) | [`rate_limit`], [`quota`] |
//! | `ratelimit-remaining`, `ratelimit-reset` | the draft's earlier revisions | [`quota`] |
//! | `x-ratelimit-remaining`, `x-ratelimit-reset` | GitHub, Stripe, gateways | [`quota`] |
//! | `x-ratelimit-resource` | GitHub (a 403 carrying it is a rate-limit answer) | [`pace_signal`] |
//! | the vendors' `x-ratelimit-*-{requests,tokens}`, `anthropic-ratelimit-*` | OpenAI, Anthropic | [`quota`] (its table) |

use std::time::{Duration, SystemTime};

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::verdict::Hint;

/// The `RateLimit` field name (lowercase, as stored by [`HeaderMap`]).
pub(crate) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The `RateLimit-Policy` field name (lowercase, as stored by [`HeaderMap`]).
pub(crate) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// Parses one `Retry-After` field value (RFC 9110 §10.2.3).
///
/// Accepts either form the RFC defines:
///
/// - **delay-seconds** (`1*DIGIT`): a non-negative decimal integer. Signs,
///   fractions, inner whitespace and the empty string are rejected. Surrounding
///   optional whitespace (spaces and tabs) is trimmed. A digit string too large
///   for `u64` seconds **saturates** to `Duration::from_secs(u64::MAX)`: the
///   server clearly asked for a very long wait, and the engine turns a hint
///   longer than its deadline or cap into an explicit "hint too long" error
///   rather than ignoring it and retrying early.
/// - **HTTP-date**, parsed with [`httpdate`] (IMF-fixdate and the obsolete RFC 850
///   and asctime formats). The result is the exact time from `now` until that
///   date; a date at or before `now` gives [`Duration::ZERO`].
///
/// Anything else — including values that are not visible ASCII — returns `None`
/// and should be ignored.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderValue;
/// use retryscope::hints::retry_after;
///
/// let now = SystemTime::now();
/// assert_eq!(
///     retry_after(&HeaderValue::from_static("120"), now),
///     Some(Duration::from_secs(120))
/// );
///
/// let in_30s = httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_030));
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
/// assert_eq!(
///     retry_after(&HeaderValue::try_from(in_30s)?, now),
///     Some(Duration::from_secs(30))
/// );
///
/// assert_eq!(retry_after(&HeaderValue::from_static("-5"), now), None);
/// # Ok::<(), http::header::InvalidHeaderValue>(())
/// ```
pub fn retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let text = value.to_str().ok()?.trim_matches([' ', '\t']);
    if text.is_empty() {
        return None;
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return Some(delay_seconds(text));
    }
    let date = httpdate::parse_http_date(text).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parses a non-empty all-digit string as seconds, saturating at `u64::MAX`.
fn delay_seconds(digits: &str) -> Duration {
    let secs =
        digits.bytes().fold(0_u64, |acc, b| acc.saturating_mul(10).saturating_add(u64::from(b - b'0')));
    Duration::from_secs(secs)
}

/// The first valid `Retry-After` value in `headers`, parsed with [`retry_after`].
///
/// A response should carry at most one `Retry-After`; if it carries several, the
/// invalid ones are skipped and the first that parses wins.
pub(crate) fn retry_after_from(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    headers.get_all(RETRY_AFTER).iter().find_map(|value| retry_after(value, now))
}

/// How long a response asks the client to wait before it tries again: the
/// vendors' millisecond headers first — `retry-after-ms` and
/// `x-ms-retry-after-ms` (OpenAI, Azure), `x-amz-retry-after` (AWS), more
/// precise than whole seconds, and what those vendors' own SDKs read first —
/// then `Retry-After` ([`retry_after_from`]). Users read it through
/// [`from_headers`], whose hint it is whatever a `RateLimit` beside it says
/// (the draft's §7: `Retry-After` takes precedence).
pub(crate) fn retry_delay(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    dialects::retry_after_millis(headers).or_else(|| retry_after_from(headers, now))
}

/// How long `RateLimit` / `RateLimit-Policy` headers ask the client to wait
/// (draft-ietf-httpapi-ratelimit-headers-10).
///
/// `RateLimit` is a Structured Field List of Items. Each item's value is a policy
/// name (a String or a Token) with the parameters `r` (remaining quota units) and
/// `t` (seconds until the quota resets). The result is the largest `t` among the
/// items whose quota is exhausted (`r=0`). An exhausted item without `t` falls back
/// to the `w` (window, seconds) of the same-named policy in `RateLimit-Policy`
/// (the largest, if the name appears more than once); if there is none, that item
/// contributes nothing.
///
/// Returns `None` when:
///
/// - no item is exhausted — the header never asks for a wait while quota remains;
/// - no exhausted item carries a usable reset time;
/// - the response came from a cache (an `Age` above zero: the draft's §7.3);
/// - the `RateLimit` field is malformed: not valid ASCII or not a valid SF List,
///   or any member is not an Item named by a String or Token, lacks `r`, or has an
///   `r` or `t` that is not a non-negative Integer. The whole field is then ignored.
///
/// Multiple field lines are combined into one list (joined with `", "`, RFC 9110
/// §5.3); empty lines are skipped. Unknown parameters (`pk`, extensions) are
/// ignored. A malformed `RateLimit-Policy` only disables the `w` fallback. An
/// exhausted quota with `t=0` yields `Some(Duration::ZERO)`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use http::{HeaderMap, HeaderValue};
/// use retryscope::hints::rate_limit;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("ratelimit", HeaderValue::from_static(r#""default";r=0;t=30"#));
/// assert_eq!(rate_limit(&headers), Some(Duration::from_secs(30)));
///
/// // Quota left: no wait requested.
/// headers.insert("ratelimit", HeaderValue::from_static(r#""default";r=5;t=30"#));
/// assert_eq!(rate_limit(&headers), None);
///
/// // Exhausted without `t`: fall back to the policy's window.
/// headers.insert("ratelimit", HeaderValue::from_static(r#""default";r=0"#));
/// headers.insert("ratelimit-policy", HeaderValue::from_static(r#""default";q=100;w=60"#));
/// assert_eq!(rate_limit(&headers), Some(Duration::from_secs(60)));
/// ```
pub fn rate_limit(headers: &HeaderMap) -> Option<Duration> {
    let limits = parse_list(headers, &RATELIMIT)?;
    if from_cache(headers) {
        return None;
    }
    let mut wait: Option<u64> = None;
    // Parsed lazily: only needed when an exhausted item has no `t`.
    let mut policies: Option<Option<sfv::List>> = None;
    for entry in &limits {
        let sfv::ListEntry::Item(item) = entry else {
            return None;
        };
        let name = policy_name(item)?;
        let remaining = non_negative(item.params.get("r")?)?;
        let reset = match item.params.get("t") {
            Some(t) => Some(non_negative(t)?),
            None => None,
        };
        if remaining != 0 {
            continue;
        }
        let reset = match reset {
            Some(t) => Some(t),
            None => policies
                .get_or_insert_with(|| parse_policies(headers))
                .as_ref()
                .and_then(|list| policy_window(list, name)),
        };
        if let Some(t) = reset {
            wait = Some(wait.map_or(t, |w| w.max(t)));
        }
    }
    wait.map(Duration::from_secs)
}

/// Combines every line of the field `name` into one SF List; `None` if the field
/// is absent, not visible ASCII or not a valid List.
fn parse_list(headers: &HeaderMap, name: &HeaderName) -> Option<sfv::List> {
    let mut combined = String::new();
    let mut any = false;
    for value in headers.get_all(name) {
        any = true;
        let line = value.to_str().ok()?.trim_matches([' ', '\t']);
        if line.is_empty() {
            continue;
        }
        if !combined.is_empty() {
            combined.push_str(", ");
        }
        combined.push_str(line);
    }
    if !any {
        return None;
    }
    sfv::Parser::new(&combined).parse::<sfv::List>().ok()
}

/// `RateLimit-Policy` as one SF List, if every member of it is a well-formed
/// policy: an Item named by a String (or a Token), its `q` (quota) a
/// non-negative Integer and its `w` (window) a positive one where given.
/// "Malformed RateLimit-Policy fields MUST be ignored" (the draft's §7): one
/// bad member leaves the whole field out, not just itself.
fn parse_policies(headers: &HeaderMap) -> Option<sfv::List> {
    let policies = parse_list(headers, &RATELIMIT_POLICY)?;
    let well_formed = |entry: &sfv::ListEntry| {
        let sfv::ListEntry::Item(item) = entry else { return false };
        let quota_ok = item.params.get("q").is_none_or(|q| non_negative(q).is_some());
        let window_ok = item.params.get("w").is_none_or(|w| non_negative(w).is_some_and(|w| w > 0));
        policy_name(item).is_some() && quota_ok && window_ok
    };
    policies.iter().all(well_formed).then_some(policies)
}

/// The policy name of a `RateLimit` / `RateLimit-Policy` item: a String or Token.
fn policy_name(item: &sfv::Item) -> Option<&str> {
    match &item.bare_item {
        sfv::BareItem::String(s) => Some(s.as_str()),
        sfv::BareItem::Token(t) => Some(t.as_str()),
        _ => None,
    }
}

/// A parameter that must be a non-negative Integer.
fn non_negative(value: &sfv::BareItem) -> Option<u64> {
    value.as_integer().and_then(|i| u64::try_from(i64::from(i)).ok())
}

/// The largest valid `w` among the policies named `name`.
fn policy_window(policies: &sfv::List, name: &str) -> Option<u64> {
    policies
        .iter()
        .filter_map(|entry| match entry {
            sfv::ListEntry::Item(item) if policy_name(item) == Some(name) => {
                item.params.get("w").and_then(non_negative)
            }
            _ => None,
        })
        .max()
}

/// Whether the response came from a cache: an `Age` (RFC 9111 §5.1) above
/// zero. Its quota headers describe the quota when it was stored, not now,
/// and the ratelimit draft (§7.3) has them ignored.
pub(crate) fn from_cache(headers: &HeaderMap) -> bool {
    let age = headers.get(http::header::AGE).and_then(|age| age.to_str().ok());
    age.and_then(|age| age.trim().parse::<u64>().ok()).is_some_and(|age| age > 0)
}

/// The server hint carried by a response's headers, if any.
///
/// A wait wins (a vendor's millisecond header, else the first valid
/// `Retry-After`, each value read by [`retry_after`]; [`Hint::retry_after`]: the next attempt waits at least that long, as [`Hint::wait`] spreads it), whatever a `RateLimit` beside it says (the ratelimit draft's §7: `Retry-After` takes precedence); otherwise an exhausted `RateLimit` quota gives [`Hint::rate_limit`] (the
/// next attempt waits at least that long); otherwise `None`. Malformed headers
/// are ignored.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::{HeaderMap, HeaderValue, header::RETRY_AFTER};
/// use retryscope::hints::from_headers;
/// use retryscope::Hint;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("ratelimit", HeaderValue::from_static(r#""default";r=0;t=30"#));
/// let now = SystemTime::now();
/// assert_eq!(from_headers(&headers, now), Some(Hint::rate_limit(Duration::from_secs(30))));
///
/// headers.insert(RETRY_AFTER, HeaderValue::from_static("5"));
/// assert_eq!(from_headers(&headers, now), Some(Hint::retry_after(Duration::from_secs(5))));
/// ```
pub fn from_headers(headers: &HeaderMap, now: SystemTime) -> Option<Hint> {
    if let Some(delay) = retry_delay(headers, now) {
        return Some(Hint::retry_after(delay));
    }
    rate_limit(headers).map(Hint::rate_limit)
}

mod dialects;
mod quota;
pub use quota::{pace_signal, quota};

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
