//! Attempt spans: the OpenTelemetry HTTP client conventions, or with `grpc`
//! the RPC conventions.

use crate::settings::Settings;
use http::Uri;
use http::request::Parts;
use retryscope_http::__private::redact::redact_every_query_value;
use retryscope_http::__private::spans::HttpTarget;
use retryscope_otel::{AttemptInfo, MakeAttemptSpan};
use std::cell::OnceCell;
use std::fmt;
use std::sync::Arc;
use tracing::Span;
use tracing::field::Empty;

/// The server a request goes to: the request's own authority, or `origin` for
/// a URI without one (tonic clients send only the path).
pub(crate) fn server<'a>(request: &'a Uri, origin: Option<&'a Uri>) -> Server<'a> {
    let uri = match (request.authority(), origin) {
        (None, Some(origin)) => origin,
        _ => request,
    };
    let default_port = match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") | None => Some(80),
        Some(_) => None,
    };
    Server { uri, address: uri.host().unwrap_or("unknown"), default_port }
}

/// Where a request goes, as the attempt spans and the guards name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Server<'a> {
    /// The URI with the scheme and authority.
    pub(crate) uri: &'a Uri,
    /// `server.address`.
    pub(crate) address: &'a str,
    /// The scheme's port, which the dependency name leaves out.
    pub(crate) default_port: Option<u16>,
}

impl Server<'_> {
    /// `server.port`: the URI's, or the scheme's.
    pub(crate) fn port(&self) -> Option<u16> {
        self.uri.port_u16().or(self.default_port)
    }
}

/// The attempt span of one request: what it needs of the request, kept
/// without working anything out, since the span's fields are computed only
/// when a subscriber takes the span.
#[derive(Clone)]
pub(crate) struct AttemptSpan {
    /// The request's method and URI, shared with its attempts.
    pub(crate) request: Arc<Parts>,
    /// The layer's settings: its origin, for a URI without authority, and
    /// the header the retry log's `request_id` is read from. Shared, not
    /// copied: the call's observer and its operation each hold the spans
    /// (one reference count rather than an origin's and a header name's).
    pub(crate) settings: Arc<Settings>,
    /// An RPC span (`/package.Service/Method` is the path) rather than HTTP.
    pub(crate) grpc: bool,
    /// Whether the layer made the request's idempotency key, if it has one (HTTP).
    pub(crate) key_generated: Option<bool>,
}

impl fmt::Debug for AttemptSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AttemptSpan")
            .field("request", &self.request)
            .field("origin", &self.settings.origin)
            .field("grpc", &self.grpc)
            .field("key_generated", &self.key_generated)
            .field("request_id_header", &self.settings.client.request_id_header)
            .finish()
    }
}

impl AttemptSpan {
    /// The attempt spans of a call to `request` through a layer with
    /// `settings`.
    pub(crate) fn new(
        settings: &Arc<Settings>,
        request: &Arc<Parts>,
        grpc: bool,
        key_generated: Option<bool>,
    ) -> Self {
        Self { request: Arc::clone(request), settings: Arc::clone(settings), grpc, key_generated }
    }

    /// What an HTTP attempt's span and the retry log read from the request
    /// (a gRPC call's `request_id` too).
    fn http_target(&self) -> HttpTarget<'_, RedactedUrl<'_>> {
        let uri = &self.request.uri;
        let server = server(uri, self.settings.origin.as_deref());
        HttpTarget {
            method: &self.request.method,
            address: server.address,
            port: server.port(),
            url: RedactedUrl { origin: server.uri, request: uri },
            key_generated: self.key_generated,
            headers: &self.request.headers,
            request_id_header: &self.settings.client.request_id_header,
        }
    }
}

impl MakeAttemptSpan for AttemptSpan {
    fn make_span(&self, info: &AttemptInfo<'_>) -> Span {
        if self.grpc {
            return grpc_span(self, info);
        }
        self.http_target().span(info)
    }

    fn request_id(&self) -> Option<&str> {
        self.http_target().request_id()
    }

    // An attempt's closure (`Attempts::next`) only clones the request's
    // parts: the readiness check, the inner service's `call` (where its own
    // layers may start spans) and the `traceparent` are the future's, polled
    // in the span.
    const BUILDS_IN_SPAN: bool = false;
}

pub(crate) fn rpc_method(path: &str) -> &str {
    path.strip_prefix('/').unwrap_or(path)
}

/// Named `{rpc.method}` (`package.Service/Method`), with the RPC attributes;
/// `rpc.grpc.status_code` is recorded when the status arrives, which for a
/// committed call may be after the attempt handed its response over (the span
/// stays open until then).
fn grpc_span(request: &AttemptSpan, info: &AttemptInfo<'_>) -> Span {
    // Evaluated by the macro only for a span some subscriber wants.
    let path = request.request.uri.path();
    // Each worked out once, and only if a subscriber wants the span.
    let (service_method, to) = (OnceCell::new(), OnceCell::new());
    let split = || *service_method.get_or_init(|| rpc_method(path).split_once('/').unwrap_or(("", path)));
    // The layer's origin, read once when the layer was built, for a call
    // without an authority of its own (a tonic channel's every call): parsing
    // its host and port again cost some 500 instructions an attempt.
    let server = || *to.get_or_init(|| request.settings.server(&request.request.uri));
    tracing::info_span!(
        target: retryscope_otel::names::TARGET,
        parent: info.parent,
        "gRPC",
        otel.name = rpc_method(path),
        otel.kind = "client",
        otel.status_code = Empty,
        retryscope.attempt = info.attempt_value(),
        // What groups a call's attempts now that they hang under the caller's
        // span, and what the dashboards' trace links search by.
        retryscope.dependency = info.dependency,
        retryscope.operation = info.operation,
        // The configuration the call started with, for a configured layer.
        retryscope.config.hash = info.config_hash,
        // Recorded by the observer on the copies of a hedged call.
        retryscope.hedge = Empty,
        retryscope.hedge.outcome = Empty,
        // Recorded by a fault layer below the retry layer (fault injection).
        retryscope.fault.injected = Empty,
        "error.type" = Empty,
        "rpc.system" = "grpc",
        "rpc.service" = split().0,
        "rpc.method" = split().1,
        "rpc.grpc.status_code" = Empty,
        "server.address" = server().0,
        // The URI's port, else the scheme's: `Server::port`.
        "server.port" = server().1.or(server().2).map(i64::from),
    )
}

/// `url.full` without credentials and without query values: the scheme and host
/// of `origin`, the path of `request`, and each query key with its value
/// replaced by `REDACTED` (the conventions ask that sensitive values never
/// reach telemetry, and the layer cannot know which are), by the redaction
/// both integrations share. Worked out only when a span records it.
struct RedactedUrl<'a> {
    origin: &'a Uri,
    request: &'a Uri,
}

impl fmt::Display for RedactedUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(query) = self.request.query() else {
            // No query, no credentials (a host has none), no fragment (a
            // request's URI has none): nothing to redact, nothing to build.
            return self.write_without_query(f);
        };
        let mut url = String::new();
        self.write_without_query(&mut url)?;
        url.push('?');
        url.push_str(query);
        f.write_str(&redact_every_query_value(&url))
    }
}

impl RedactedUrl<'_> {
    /// The scheme and host of `origin`, its port if it has one, and the path
    /// of `request`.
    fn write_without_query(&self, out: &mut impl fmt::Write) -> fmt::Result {
        let scheme = self.origin.scheme_str().unwrap_or("http");
        write!(out, "{scheme}://{}", self.origin.host().unwrap_or("unknown"))?;
        if let Some(port) = self.origin.port_u16() {
            write!(out, ":{port}")?;
        }
        out.write_str(self.request.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(uri: &str) -> (String, String, Option<u16>) {
        let uri: Uri = uri.parse().expect("valid uri");
        let server = server(&uri, None);
        let name =
            retryscope::dependency::dependency_name(server.address, uri.port_u16(), server.default_port);
        (name, RedactedUrl { origin: server.uri, request: &uri }.to_string(), server.port())
    }

    #[test]
    fn dependency_names_and_ports() {
        let (name, full, port) = url("http://user:secret@127.0.0.1:8080/a/b?token=abc&flag");
        assert_eq!((name.as_str(), port), ("127.0.0.1:8080", Some(8080)));
        assert_eq!(full, "http://127.0.0.1:8080/a/b?token=REDACTED&flag");
        let (name, full, port) = url("https://payments.internal/charge");
        assert_eq!((name.as_str(), port), ("payments.internal", Some(443)));
        assert_eq!(full, "https://payments.internal/charge");
    }

    /// Without a query the URL is written straight out; with one it goes
    /// through the redaction: both give what the redaction gives.
    #[test]
    fn a_url_without_a_query_is_what_the_redaction_would_make_of_it() {
        for uri in
            ["http://[::1]:8080/a/b", "https://payments.internal/", "http://10.0.0.1:81/x@y/z", "http://h/p?"]
        {
            let (_, full, _) = url(uri);
            assert_eq!(full, redact_every_query_value(&full), "{uri}");
        }
        assert_eq!(url("http://[::1]:8080/a/b").1, "http://[::1]:8080/a/b");
        assert_eq!(url("http://h/p?").1, "http://h/p?");
    }

    #[test]
    fn a_path_only_uri_takes_the_origin() {
        let request: Uri = "/helloworld.Greeter/SayHello".parse().expect("valid");
        let origin: Uri = "http://127.0.0.1:50051".parse().expect("valid");
        let server = server(&request, Some(&origin));
        assert_eq!((server.address, server.port()), ("127.0.0.1", Some(50051)));
        assert_eq!(rpc_method(request.path()), "helloworld.Greeter/SayHello");
    }
}
