//! Attempt spans that follow the OpenTelemetry HTTP client conventions.

use reqwest::Request;
use retryscope_otel::{AttemptInfo, MakeAttemptSpan};
use tracing::Span;
use tracing::field::Empty;

/// Makes each attempt's span an HTTP client span: named after the method, with
/// `http.request.method`, `server.address`, `server.port`, `url.full` (redacted),
/// `http.response.status_code` and, from the second attempt on,
/// `http.request.resend_count`.
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
            otel.name = target.method.as_str(),
            otel.kind = "client",
            otel.status_code = Empty,
            retryscope.attempt = info.attempt_value(),
            "error.type" = Empty,
            "http.request.method" = target.method.as_str(),
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
    pub(crate) method: String,
    pub(crate) address: String,
    pub(crate) port: Option<u16>,
    pub(crate) url: String,
}

impl Target {
    pub(crate) fn of(request: &Request) -> Self {
        let url = request.url();
        Self {
            method: request.method().as_str().to_owned(),
            address: url.host_str().unwrap_or_default().to_owned(),
            port: url.port_or_known_default(),
            url: crate::redact::redact_url(url),
        }
    }

    /// The dependency name: `server.address`.
    pub(crate) fn address(&self) -> &str {
        &self.address
    }
}
