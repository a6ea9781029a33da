//! Attempt spans: the OpenTelemetry HTTP client conventions, or with `grpc`
//! the RPC conventions.

use http::Uri;
use http::request::Parts;
use retryscope_http::spans::HttpTarget;
use retryscope_otel::{AttemptInfo, MakeAttemptSpan};
use std::sync::Arc;
use tracing::Span;
use tracing::field::Empty;

/// What the attempt spans say about the request, computed once per request.
#[derive(Debug)]
pub(crate) struct Target {
    /// `method`, `server.*` and `url.full`: what the shared HTTP span says.
    pub(crate) http: HttpTarget,
    /// `server.address`, with `:port` when the port is not the scheme's default.
    pub(crate) dependency: String,
    /// The gRPC path (`/package.Service/Method`) when the call is gRPC.
    pub(crate) rpc: Option<String>,
}

impl Target {
    /// The target of `parts`; `origin` stands in for a URI without authority
    /// (tonic clients send only the path).
    pub(crate) fn of(parts: &Parts, origin: Option<&Uri>, grpc: bool) -> Self {
        let uri = match (parts.uri.authority(), origin) {
            (None, Some(origin)) => origin,
            _ => &parts.uri,
        };
        let address = uri.host().unwrap_or("unknown");
        let default_port = match uri.scheme_str() {
            Some("https") => Some(443),
            Some("http") | None => Some(80),
            Some(_) => None,
        };
        Self {
            http: HttpTarget::new(
                &parts.method,
                address.to_owned(),
                uri.port_u16().or(default_port),
                redacted_url(uri, &parts.uri),
            ),
            dependency: retryscope_otel::dependency_name(address, uri.port_u16(), default_port),
            rpc: grpc.then(|| parts.uri.path().to_owned()),
        }
    }
}

/// The attempt span of one request.
#[derive(Debug, Clone)]
pub(crate) struct AttemptSpan(pub(crate) Arc<Target>);

impl MakeAttemptSpan for AttemptSpan {
    fn make_span(&self, info: &AttemptInfo<'_>) -> Span {
        let target = &*self.0;
        match &target.rpc {
            Some(path) => grpc_span(target, path, info),
            None => target.http.span(info),
        }
    }
}

/// `{rpc.service}/{rpc.method}` with the RPC attributes; `rpc.grpc.status_code`
/// is recorded when the status arrives, which for a committed call may be after
/// the attempt handed its response over (the span stays open until then).
fn grpc_span(target: &Target, path: &str, info: &AttemptInfo<'_>) -> Span {
    let (service, method) = path.strip_prefix('/').and_then(|p| p.split_once('/')).unwrap_or(("", path));
    tracing::info_span!(
        target: retryscope_otel::names::TARGET,
        parent: info.parent,
        "gRPC",
        otel.name = path.strip_prefix('/').unwrap_or(path),
        otel.kind = "client",
        otel.status_code = Empty,
        retryscope.attempt = info.attempt_value(),
        "error.type" = Empty,
        "rpc.system" = "grpc",
        "rpc.service" = service,
        "rpc.method" = method,
        "rpc.grpc.status_code" = Empty,
        "server.address" = target.http.address.as_str(),
        "server.port" = target.http.port.map(i64::from),
    )
}

/// `url.full` without credentials and without query values: the scheme and host
/// of `origin`, the path of `request`, and each query key with its value
/// replaced by `REDACTED` (the conventions ask that sensitive values never
/// reach telemetry, and the layer cannot know which are).
fn redacted_url(origin: &Uri, request: &Uri) -> String {
    let scheme = origin.scheme_str().unwrap_or("http");
    let host = origin.host().unwrap_or("unknown");
    let port = origin.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
    let mut url = format!("{scheme}://{host}{port}{}", request.path());
    if let Some(query) = request.query() {
        let keys: Vec<String> = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) => format!("{key}=REDACTED"),
                None => pair.to_owned(),
            })
            .collect();
        url.push('?');
        url.push_str(&keys.join("&"));
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(uri: &str) -> Target {
        let (parts, ()) = http::Request::get(uri).body(()).expect("valid request").into_parts();
        Target::of(&parts, None, false)
    }

    #[test]
    fn dependency_names_and_ports() {
        let t = target("http://user:secret@127.0.0.1:8080/a/b?token=abc&flag");
        assert_eq!((t.dependency.as_str(), t.http.port), ("127.0.0.1:8080", Some(8080)));
        assert_eq!(t.http.url, "http://127.0.0.1:8080/a/b?token=REDACTED&flag");
        let t = target("https://payments.internal/charge");
        assert_eq!((t.dependency.as_str(), t.http.port), ("payments.internal", Some(443)));
        assert_eq!(t.http.url, "https://payments.internal/charge");
    }

    #[test]
    fn a_path_only_uri_takes_the_origin() {
        let (parts, ()) =
            http::Request::post("/helloworld.Greeter/SayHello").body(()).expect("valid").into_parts();
        let origin: Uri = "http://127.0.0.1:50051".parse().expect("valid");
        let t = Target::of(&parts, Some(&origin), true);
        assert_eq!(t.dependency, "127.0.0.1:50051");
        assert_eq!(t.rpc.as_deref(), Some("/helloworld.Greeter/SayHello"));
    }
}
