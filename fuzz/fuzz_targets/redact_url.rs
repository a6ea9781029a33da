//! URL redaction for `url.full` from untrusted URLs.
//!
//! Properties: redaction is total and yields a URL; it keeps no userinfo but
//! the placeholder and no fragment; no query parameter with a sensitive name
//! (compared decoded, case-insensitively) keeps a value other than the
//! placeholder; every other parameter survives unchanged, in order; and the
//! output has no part besides scheme, placeholder userinfo, host, port, path
//! (all as in the input) and that query, so no secret hides anywhere else
//! (checked on inputs whose serialisation reads back as themselves: the URL
//! standard's is not always idempotent).
#![no_main]

use libfuzzer_sys::fuzz_target;
use reqwest::Url;
use retryscope_http::__private::redact::is_sensitive;
use retryscope_http::{REDACTED, redact_url};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(url) = Url::parse(text) else { return };
    let redacted = redact_url(url.as_str());
    let out = match Url::parse(&redacted) {
        Ok(out) => out,
        Err(e) => panic!("{url} redacted to {redacted:?}, which is no URL: {e}"),
    };

    assert!(out.username().is_empty() || out.username() == REDACTED, "{redacted}");
    assert!(out.password().is_none_or(|p| p == REDACTED), "{redacted}");
    assert_eq!(out.fragment(), None, "{redacted}");

    let before: Vec<(String, String)> =
        url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    let after: Vec<(String, String)> =
        out.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    for (name, value) in &after {
        assert!(!is_sensitive(name) || value == REDACTED, "{name}={value} survives in {redacted}");
    }
    // Parameters are kept in order; only sensitive values change. (Comparing
    // decoded pairs: the query may be re-encoded when anything was redacted.)
    let expected: Vec<(String, String)> = before
        .iter()
        .map(|(k, v)| (k.clone(), if is_sensitive(k) { REDACTED.to_owned() } else { v.clone() }))
        .collect();
    assert_eq!(after, expected, "{url} → {redacted}");

    // The URL standard's serialisation does not always read back as the same
    // URL (`file:j:%2E` is `file:///j:/%2E`, which reads back as `file:///j:/`,
    // the `%2E` taken for a `.` segment). The redacted text is exactly that
    // serialisation, so for such inputs the secrets are checked above and the
    // exact shape below is checked only on inputs that read back as themselves.
    if Url::parse(url.as_str()).ok().as_ref() != Some(&url) {
        return;
    }
    // The rest of the output is the input's own, unchanged: with the checks
    // above, every part of the redacted URL is accounted for, so no secret can
    // hide anywhere in it.
    assert_eq!((out.scheme(), out.host_str(), out.port()), (url.scheme(), url.host_str(), url.port()));
    // Dropping the fragment of a URL with an opaque path (`mailto:a #x`) also
    // drops the path's trailing spaces, as the URL standard says.
    let path = if url.cannot_be_a_base() { url.path().trim_end_matches(' ') } else { url.path() };
    assert!(out.path() == url.path() || out.path() == path, "{url} → {redacted}");
    let rebuilt = match out.query() {
        Some(query) => format!("{}?{query}", out[..url::Position::AfterPath].to_owned()),
        None => out[..url::Position::AfterPath].to_owned(),
    };
    assert_eq!(rebuilt, redacted, "the redacted URL has parts beyond these");
});
