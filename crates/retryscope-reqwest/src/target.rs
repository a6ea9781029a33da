//! What a reqwest request's attempt spans and guards are keyed on; the span
//! itself is the shared HTTP client span ([`HttpTarget::span`]).

use reqwest::Request;
use retryscope_http::spans::HttpTarget;
use retryscope_otel::{AttemptInfo, MakeAttemptSpan};
use tracing::Span;

/// Makes each attempt's span an HTTP client span (see [`HttpTarget::span`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HttpAttemptSpan<'a> {
    pub(crate) target: &'a Target,
}

impl MakeAttemptSpan for HttpAttemptSpan<'_> {
    fn make_span(&self, info: &AttemptInfo<'_>) -> Span {
        self.target.http.span(info)
    }
}

/// What the attempt span says about the request, computed once per request.
#[derive(Debug)]
pub(crate) struct Target {
    pub(crate) http: HttpTarget,
    /// The dependency name: `server.address`, with `:port` when the port is not
    /// the scheme's default.
    pub(crate) dependency: String,
}

impl Target {
    pub(crate) fn of(request: &Request) -> Self {
        let url = request.url();
        let address = url.host_str().unwrap_or_default();
        Self {
            http: HttpTarget::new(
                request.method(),
                address.to_owned(),
                url.port_or_known_default(),
                crate::redact::redact_url(url),
            ),
            // `Url::port` is `None` for the scheme's default port.
            dependency: retryscope_otel::dependency_name(address, url.port(), None),
        }
    }
}
