//! HTTP client attempt spans, as the OpenTelemetry HTTP conventions ask.

use http::Method;
use retryscope_otel::AttemptInfo;
use tracing::Span;
use tracing::field::Empty;

/// What the conventions call a method they do not know.
pub const OTHER_METHOD: &str = "_OTHER";

/// The methods of RFC 9110 and RFC 5789 (PATCH), which the semantic conventions
/// report as they are.
pub fn known_method(method: &Method) -> Option<&'static str> {
    const KNOWN: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"];
    KNOWN.into_iter().find(|known| *known == method.as_str())
}

/// What an HTTP attempt span says about the request, computed once per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    /// The method, or `_OTHER` for an extension method.
    pub method: &'static str,
    /// An extension method as sent.
    pub method_original: Option<String>,
    /// `server.address`.
    pub address: String,
    /// `server.port`.
    pub port: Option<u16>,
    /// `url.full`, already redacted.
    pub url: String,
}

impl HttpTarget {
    /// The target of a request with `method`, to `address:port`, at the
    /// redacted `url`.
    pub fn new(method: &Method, address: String, port: Option<u16>, url: String) -> Self {
        let known = known_method(method);
        Self {
            method: known.unwrap_or(OTHER_METHOD),
            method_original: known.is_none().then(|| method.as_str().to_owned()),
            address,
            port,
            url,
        }
    }

    /// `{method}`, or `HTTP` for an extension method.
    pub fn span_name(&self) -> &'static str {
        if self.method_original.is_some() { "HTTP" } else { self.method }
    }

    /// The attempt's span: named after the method, with `http.request.method`,
    /// `server.address`, `server.port`, `url.full`, `http.response.status_code`
    /// and, from the second attempt on, `http.request.resend_count`. A method
    /// outside the HTTP specifications is `_OTHER`, with the original in
    /// `http.request.method_original`, and the span is named `HTTP`, as the
    /// semantic conventions ask: span names stay bounded whatever a caller
    /// sends.
    ///
    /// The response status is not known when the attempt starts: the field is
    /// declared empty and recorded by the integration from inside the attempt.
    pub fn span(&self, info: &AttemptInfo<'_>) -> Span {
        let resend_count = (info.attempt > 1).then(|| i64::from(info.attempt) - 1);
        tracing::info_span!(
            target: retryscope_otel::names::TARGET,
            parent: info.parent,
            "HTTP",
            otel.name = self.span_name(),
            otel.kind = "client",
            otel.status_code = Empty,
            retryscope.attempt = info.attempt_value(),
            "error.type" = Empty,
            "http.request.method" = self.method,
            "http.request.method_original" = self.method_original.as_deref(),
            "server.address" = self.address.as_str(),
            "server.port" = self.port.map(i64::from),
            "url.full" = self.url.as_str(),
            "http.response.status_code" = Empty,
            "http.request.resend_count" = resend_count,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extension_method_is_reported_as_other_with_its_original() {
        let target =
            HttpTarget::new(&Method::from_bytes(b"PURGE").expect("a token"), "a".into(), None, "u".into());
        assert_eq!((target.method, target.method_original.as_deref()), (OTHER_METHOD, Some("PURGE")));
        assert_eq!(target.span_name(), "HTTP");
        assert_eq!(HttpTarget::new(&Method::PATCH, "a".into(), None, "u".into()).span_name(), "PATCH");
    }
}
