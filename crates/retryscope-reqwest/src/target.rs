//! A reqwest request's attempt spans: the shared HTTP client span
//! ([`HttpTarget::span`]), its fields read from the request only when a
//! subscriber takes the span.

use crate::source::RequestSource;
use reqwest::Url;
use reqwest::header::HeaderName;
use retryscope_http::__private::spans::HttpTarget;
use retryscope_otel::{AttemptInfo, MakeAttemptSpan};
use std::fmt;
use tracing::Span;

/// Makes each attempt's span an HTTP client span (see [`HttpTarget::span`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpAttemptSpan<'a> {
    pub(crate) source: &'a RequestSource,
    /// Whether the middleware made the request's idempotency key, if it has one.
    pub(crate) key_generated: Option<bool>,
    /// The header the retry log's `request_id` is read from.
    pub(crate) request_id_header: &'a HeaderName,
}

impl HttpAttemptSpan<'_> {
    /// What the attempt's span and the retry log read from the request.
    fn target(&self) -> HttpTarget<'_, Redacted<'_>> {
        let (method, url) = self.source.target();
        HttpTarget {
            method,
            address: url.host_str().unwrap_or_default(),
            port: url.port_or_known_default(),
            url: Redacted(url),
            key_generated: self.key_generated,
            headers: self.source.headers(),
            request_id_header: self.request_id_header,
        }
    }
}

impl MakeAttemptSpan for HttpAttemptSpan<'_> {
    fn make_span(&self, info: &AttemptInfo<'_>) -> Span {
        self.target().span(info)
    }

    fn request_id(&self) -> Option<&str> {
        self.target().request_id()
    }

    // An attempt's closure (`Attempts::next`) only clones the request: the
    // `traceparent`, the chain below and the status are the future's, polled
    // in the span.
    const BUILDS_IN_SPAN: bool = false;
}

/// `url.full`: the URL without its secrets ([`redact_url`](crate::redact_url)),
/// written only when a span records it.
struct Redacted<'a>(&'a Url);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = self.0;
        // What redaction could change — credentials, a query, a fragment —
        // the parsed URL already knows where it is: a URL with none of them
        // (most) is written as it is, without scanning it again.
        if url.username().is_empty()
            && url.password().is_none()
            && url.query().is_none()
            && url.fragment().is_none()
        {
            return f.write_str(url.as_str());
        }
        f.write_str(&retryscope_http::redact_url(url.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shortcut writes exactly what the redaction writes, at its edges:
    /// an empty userinfo, a bare `?` or `#`, a password without a user.
    #[test]
    fn a_url_is_written_as_the_redaction_writes_it() {
        for url in [
            "http://127.0.0.1:8080/ok",
            "https://api.example.com/v1/items/7",
            "http://@host/path",
            "http://:@host/path",
            "http://user@host/path",
            "http://:secret@host/path",
            "http://user:secret@host/path?token=1",
            "http://host/path?",
            "http://host/path#",
            "http://host/path?page=2&sig=abc#frag",
            "http://host/a@b/c",
            "mailto:someone@example.com",
            "data:text/plain,hi#x",
        ] {
            let parsed = Url::parse(url).expect("a valid URL");
            assert_eq!(Redacted(&parsed).to_string(), retryscope_http::redact_url(parsed.as_str()), "{url}");
        }
    }
}
