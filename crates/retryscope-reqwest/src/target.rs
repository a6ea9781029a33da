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
}

/// `url.full`: the URL without its secrets ([`redact_url`](crate::redact_url)),
/// written only when a span records it.
struct Redacted<'a>(&'a Url);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&retryscope_http::redact_url(self.0.as_str()))
    }
}
