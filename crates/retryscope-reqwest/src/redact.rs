//! `url.full` without secrets.
//!
//! Span attributes are exported to collectors, trace backends and whoever reads
//! them: userinfo and signed-URL parameters must never get there. The
//! OpenTelemetry HTTP conventions ask for exactly this redaction.

use reqwest::Url;
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

/// `url` as it may appear in telemetry: no userinfo, sensitive query values
/// replaced by `REDACTED`, no fragment.
///
/// ```
/// use reqwest::Url;
/// let url = Url::parse("https://user:pw@example.com/file?sig=abc&page=2#top").unwrap();
/// assert_eq!(
///     retryscope_reqwest::redact_url(&url),
///     "https://REDACTED:REDACTED@example.com/file?sig=REDACTED&page=2"
/// );
/// ```
pub fn redact_url(url: &Url) -> String {
    redacted(url).into_owned()
}

/// [`redact_url`], borrowing the URL as it is when there is nothing to
/// redact — no userinfo, no fragment, no sensitive query parameter, the
/// common case — and copying it only to take a secret out.
pub(crate) fn redacted(url: &Url) -> Cow<'_, str> {
    // Names are compared decoded, so `%74oken=` is caught like `token=`.
    let secret_query = url.query().is_some() && url.query_pairs().any(|(name, _)| is_sensitive(&name));
    if url.username().is_empty() && url.password().is_none() && url.fragment().is_none() && !secret_query {
        return Cow::Borrowed(url.as_str());
    }
    let mut clean = url.clone();
    clean.set_fragment(None);
    // Setting credentials only fails for URLs that cannot have them (no host),
    // and those have none to hide.
    if !clean.username().is_empty() {
        let _ = clean.set_username(REDACTED);
    }
    if clean.password().is_some() {
        let _ = clean.set_password(Some(REDACTED));
    }
    if secret_query {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let value = if is_sensitive(&k) { REDACTED.to_owned() } else { v.into_owned() };
                (k.into_owned(), value)
            })
            .collect();
        clean.query_pairs_mut().clear().extend_pairs(pairs);
    }
    Cow::Owned(clean.into())
}

/// Whether a query parameter named `name` (decoded) carries a credential, so
/// that [`redact_url`] replaces its value. Exposed for the fuzz targets, which
/// check that no such value survives redaction; not part of the stable API.
#[doc(hidden)]
pub fn is_sensitive(name: &str) -> bool {
    SENSITIVE_PARAMS.iter().any(|s| s.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact(s: &str) -> String {
        redact_url(&Url::parse(s).unwrap())
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
            let url = Url::parse(url).unwrap();
            let redacted = redacted(&url);
            assert_eq!(matches!(redacted, Cow::Borrowed(_)), clean, "{url}");
            assert_eq!(redacted == url.as_str(), clean, "{url}: {redacted}");
        }
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
            "https://h.example/?token=REDACTED&api_key=REDACTED"
        );
    }

    #[test]
    fn fragments_are_dropped() {
        assert_eq!(redact("https://h.example/p#access_token=abc"), "https://h.example/p");
    }
}
