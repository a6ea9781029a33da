//! Attempt spans that follow the OpenTelemetry HTTP client conventions.

use reqwest::{Method, Request};
use retryscope_otel::{AttemptInfo, MakeAttemptSpan};
use tracing::Span;
use tracing::field::Empty;

/// Makes each attempt's span an HTTP client span: named after the method, with
/// `http.request.method`, `server.address`, `server.port`, `url.full` (redacted),
/// `http.response.status_code` and, from the second attempt on,
/// `http.request.resend_count`. A method outside the HTTP specifications (an
/// extension method) is `_OTHER`, with the original in
/// `http.request.method_original`, and the span is named `HTTP`, as the semantic
/// conventions ask: span names stay bounded whatever a caller sends.
///
/// The response status is not known when the attempt starts: the field is
/// declared empty and recorded by the middleware from inside the attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpAttemptSpan<'a> {
    pub(crate) target: &'a Target,
}

impl MakeAttemptSpan for HttpAttemptSpan<'_> {
    fn make_span(&self, info: &AttemptInfo<'_>) -> Span {
        let target = self.target;
        let resend_count = (info.attempt > 1).then(|| i64::from(info.attempt) - 1);
        tracing::info_span!(
            target: retryscope_otel::names::TARGET,
            parent: info.parent,
            "HTTP",
            otel.name = target.span_name(),
            otel.kind = "client",
            otel.status_code = Empty,
            retryscope.attempt = info.attempt_value(),
            "error.type" = Empty,
            "http.request.method" = target.method,
            "http.request.method_original" = target.method_original.as_deref(),
            "server.address" = target.address.as_str(),
            "server.port" = target.port.map(i64::from),
            "url.full" = target.url.as_str(),
            "http.response.status_code" = Empty,
            "http.request.resend_count" = resend_count,
        )
    }
}

/// What the attempt span says about the request, computed once per request.
#[derive(Debug)]
pub(crate) struct Target {
    /// The method, or `_OTHER` for an extension method.
    pub(crate) method: &'static str,
    /// An extension method as sent.
    pub(crate) method_original: Option<String>,
    pub(crate) address: String,
    pub(crate) port: Option<u16>,
    pub(crate) url: String,
    /// The dependency name: `server.address`, with `:port` when the port is not
    /// the scheme's default.
    pub(crate) dependency: String,
}

impl Target {
    pub(crate) fn of(request: &Request) -> Self {
        let url = request.url();
        let address = url.host_str().unwrap_or_default();
        let method = known_method(request.method());
        Self {
            method: method.unwrap_or(OTHER_METHOD),
            method_original: method.is_none().then(|| request.method().as_str().to_owned()),
            address: address.to_owned(),
            port: url.port_or_known_default(),
            url: crate::redact::redact_url(url),
            // `Url::port` is `None` for the scheme's default port.
            dependency: retryscope_otel::dependency_name(address, url.port(), None),
        }
    }

    /// `{method}`, or `HTTP` for an extension method.
    fn span_name(&self) -> &'static str {
        if self.method_original.is_some() { "HTTP" } else { self.method }
    }
}

/// What the conventions call a method they do not know.
const OTHER_METHOD: &str = "_OTHER";

/// The methods of RFC 9110 and RFC 5789 (PATCH), which the semantic conventions
/// report as they are.
fn known_method(method: &Method) -> Option<&'static str> {
    const KNOWN: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"];
    KNOWN.into_iter().find(|known| *known == method.as_str())
}
