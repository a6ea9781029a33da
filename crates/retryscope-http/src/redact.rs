//! `url.full` without secrets, one rule for both integrations.
//!
//! Span attributes are exported to collectors, trace backends and whoever reads
//! them: userinfo and signed-URL parameters must never get there. The
//! OpenTelemetry HTTP conventions ask for exactly this redaction: credentials
//! and the values of the query parameters known to carry secrets replaced by
//! `REDACTED`. It works on the URL's text, so that reqwest's `Url` and tower's
//! `Uri` go through the same code, and it copies nothing when there is nothing
//! to take out.

use std::borrow::Cow;

/// Query parameters whose values are credentials (compared case-insensitively).
const SENSITIVE_PARAMS: &[&str] = &[
    "sig",
    "signature",
    "token",
    "access_token",
    "key",
    "api_key",
    "apikey",
    "password",
    "secret",
    "client_secret",
    "refresh_token",
    "id_token",
    "code",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "awsaccesskeyid",
    "x-goog-signature",
    "x-goog-credential",
];

/// The value that replaces a secret.
pub const REDACTED: &str = "REDACTED";

/// `url` as it may appear in telemetry: no userinfo (each part replaced by
/// `REDACTED`), the values of sensitive query parameters (a signature, a
/// token, a key: names compared percent-decoded and case-insensitively)
/// replaced by `REDACTED`, no fragment. Everything else is kept as written.
/// Borrows `url` when there is nothing to redact, the common case.
///
/// ```
/// let url = "https://user:pw@example.com/file?sig=abc&page=2#top";
/// assert_eq!(
///     retryscope_http::redact_url(url),
///     "https://REDACTED:REDACTED@example.com/file?sig=REDACTED&page=2"
/// );
/// ```
pub fn redact_url(url: &str) -> Cow<'_, str> {
    redact(url, Values::Sensitive)
}

/// [`redact_url`] with every query value replaced, whatever its name: what
/// `retryscope-tower` records, since a layer in front of any service cannot
/// know which of its parameters carry secrets.
pub fn redact_every_query_value(url: &str) -> Cow<'_, str> {
    redact(url, Values::All)
}

/// Which query values are replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Values {
    /// Those of the parameters known to carry secrets ([`is_sensitive`]).
    Sensitive,
    /// All of them.
    All,
}

fn redact(url: &str, values: Values) -> Cow<'_, str> {
    let secret = |name: &str| values == Values::All || is_sensitive_encoded(name);
    let (rest, fragment) = match url.split_once('#') {
        Some((rest, _)) => (rest, true),
        None => (url, false),
    };
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let userinfo = userinfo(before_query);
    // A sensitive name is redacted even without a value (`?sig`): its value
    // is the placeholder, as for every other sensitive parameter.
    let secret_query = query.is_some_and(|query| {
        pairs(query).any(|(name, value)| (value.is_some() && secret(name)) || is_sensitive_encoded(name))
    });
    if !fragment && userinfo.is_none() && !secret_query {
        return Cow::Borrowed(url);
    }
    let mut clean = String::with_capacity(rest.len());
    match userinfo {
        Some((start, end)) => {
            clean.push_str(&before_query[..start]);
            let info = &before_query[start..end];
            if !info.split(':').next().unwrap_or_default().is_empty() {
                clean.push_str(REDACTED);
            }
            if info.contains(':') {
                clean.push(':');
                clean.push_str(REDACTED);
            }
            clean.push_str(&before_query[end..]);
        }
        // The URL standard drops an opaque path's trailing spaces (`mailto:a #x`)
        // with its fragment when there is no query: so must the text, or it
        // would not read back as the URL it says.
        None if fragment && query.is_none() && has_opaque_path(before_query) => {
            clean.push_str(before_query.trim_end_matches(' '))
        }
        None => clean.push_str(before_query),
    }
    if let Some(query) = query {
        clean.push('?');
        for (i, (name, value)) in pairs(query).enumerate() {
            if i > 0 {
                clean.push('&');
            }
            clean.push_str(name);
            match value {
                Some(_) if secret(name) => {
                    clean.push('=');
                    clean.push_str(REDACTED);
                }
                None if is_sensitive_encoded(name) => {
                    clean.push('=');
                    clean.push_str(REDACTED);
                }
                Some(value) => {
                    clean.push('=');
                    clean.push_str(value);
                }
                None => {}
            }
        }
    }
    Cow::Owned(clean)
}

/// Where the userinfo of `url` (without query and fragment) is, as the byte
/// range before its `@`; `None` for a URL without an authority or without
/// userinfo.
fn userinfo(url: &str) -> Option<(usize, usize)> {
    // The authority follows the scheme's `:` and `//` at once: a `://` later
    // on is part of a path (`x:/a://b@c`), which holds no userinfo.
    let (scheme, rest) = url.split_once(':')?;
    if !rest.starts_with("//") {
        return None;
    }
    let start = scheme.len() + 3;
    let authority_end = url[start..].find('/').map_or(url.len(), |end| start + end);
    let at = url[start..authority_end].rfind('@')?;
    Some((start, start + at))
}

/// Whether `url` (without query and fragment) has an opaque path: its
/// scheme's `:` is not followed by `/` (`mailto:`, `data:`).
fn has_opaque_path(url: &str) -> bool {
    url.split_once(':').is_some_and(|(scheme, rest)| {
        !scheme.is_empty()
            && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
            && !rest.starts_with('/')
    })
}

/// A query's `name=value` pairs, as written; a pair without `=` has no value.
fn pairs(query: &str) -> impl Iterator<Item = (&str, Option<&str>)> {
    query.split('&').map(|pair| match pair.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (pair, None),
    })
}

/// [`is_sensitive`] of a name as it is written in a query: percent-decoded,
/// `+` read as a space, so that `%74oken=` is caught like `token=`.
fn is_sensitive_encoded(name: &str) -> bool {
    let bytes = name.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    decoded.push((high * 16 + low) as u8);
                    i += 3;
                    continue;
                }
                _ => decoded.push(b'%'),
            },
            b'+' => decoded.push(b' '),
            byte => decoded.push(byte),
        }
        i += 1;
    }
    SENSITIVE_PARAMS.iter().any(|s| s.as_bytes().eq_ignore_ascii_case(&decoded))
}

/// Whether a query parameter named `name` (decoded) carries a credential, so
/// that [`redact_url`] replaces its value. For the fuzz targets, which check
/// that no such value survives redaction; not part of the stable API.
pub fn is_sensitive(name: &str) -> bool {
    SENSITIVE_PARAMS.iter().any(|s| s.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(s: &str) -> String {
        redact_url(s).into_owned()
    }

    #[test]
    fn plain_urls_are_unchanged() {
        assert_eq!(redact("http://127.0.0.1:8080/a/b?page=2&q=x"), "http://127.0.0.1:8080/a/b?page=2&q=x");
    }

    #[test]
    fn only_a_url_with_nothing_to_redact_goes_uncopied_and_it_is_unchanged() {
        for (url, clean) in [
            ("http://127.0.0.1:8080/a/b?page=2&q=x", true),
            ("http://127.0.0.1:8080/ok", true),
            ("https://h.example/?", true),
            ("https://h.example/p?", true),
            ("https://alice:hunter2@h.example/p", false),
            ("https://alice@h.example/p", false),
            ("https://:pw@h.example/p", false),
            ("https://h.example/p#top", false),
            ("https://h.example/p#", false),
            ("https://h.example/?page=1&%74oken=t", false),
            ("https://h.example/?X-Amz-Signature=s", false),
            ("file:///etc/hosts", true),
            ("mailto:someone@example.com", true),
        ] {
            let redacted = redact_url(url);
            assert_eq!(matches!(redacted, Cow::Borrowed(_)), clean, "{url}");
            assert_eq!(redacted == url, clean, "{url}: {redacted}");
        }
    }

    #[test]
    fn a_sensitive_name_without_a_value_gets_the_placeholder_too() {
        // The fuzz target's seed: no sensitive name may keep anything but the placeholder.
        assert_eq!(
            redact("https://h.example/?token=abc+def&token=%20secret%20&sig"),
            "https://h.example/?token=REDACTED&token=REDACTED&sig=REDACTED"
        );
        assert_eq!(redact("https://h.example/?sig&page"), "https://h.example/?sig=REDACTED&page");
    }

    #[test]
    fn a_path_that_looks_like_an_authority_is_left_alone() {
        // The fuzz target's find: an opaque path holding `://…@` has no userinfo.
        assert_eq!(redact("ttp:/%s://h.e@h.example/?page=1"), "ttp:/%s://h.e@h.example/?page=1");
        assert_eq!(redact("https://a@h.example/x://b@c"), "https://REDACTED@h.example/x://b@c");
    }

    #[test]
    fn userinfo_is_redacted() {
        assert_eq!(redact("https://alice:hunter2@h.example/p"), "https://REDACTED:REDACTED@h.example/p");
        assert_eq!(redact("https://alice@h.example/p"), "https://REDACTED@h.example/p");
    }

    #[test]
    fn signed_url_parameters_are_redacted_case_insensitively() {
        assert_eq!(
            redact("https://b.example/o?X-Amz-Signature=deadbeef&X-Amz-Date=20260101&AWSAccessKeyId=AKIA"),
            "https://b.example/o?X-Amz-Signature=REDACTED&X-Amz-Date=20260101&AWSAccessKeyId=REDACTED"
        );
        assert_eq!(
            redact("https://h.example/?token=t&key=k&sig=s"),
            "https://h.example/?token=REDACTED&key=REDACTED&sig=REDACTED"
        );
    }

    #[test]
    fn percent_encoded_names_are_caught() {
        assert_eq!(
            redact("https://h.example/?%74oken=t&api%5Fkey=k"),
            "https://h.example/?%74oken=REDACTED&api%5Fkey=REDACTED"
        );
    }

    #[test]
    fn a_parameter_without_a_value_is_kept_and_one_with_a_secret_is_not() {
        assert_eq!(
            redact("http://127.0.0.1:8080/a/b?token=abc&flag"),
            "http://127.0.0.1:8080/a/b?token=REDACTED&flag"
        );
    }

    #[test]
    fn every_query_value_can_be_replaced_and_a_url_without_one_is_not_copied() {
        assert_eq!(
            redact_every_query_value("http://127.0.0.1:8080/a/b?token=abc&page=2&flag"),
            "http://127.0.0.1:8080/a/b?token=REDACTED&page=REDACTED&flag"
        );
        assert!(matches!(redact_every_query_value("http://h.example/p?flag"), Cow::Borrowed(_)));
    }

    #[test]
    fn fragments_are_dropped() {
        assert_eq!(redact("https://h.example/p#access_token=abc"), "https://h.example/p");
        // As the URL standard drops them: an opaque path's trailing spaces go too.
        assert_eq!(redact("mailto:a #x"), "mailto:a");
    }
}
