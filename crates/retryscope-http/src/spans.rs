//! HTTP client attempt spans, as the OpenTelemetry HTTP conventions ask.

use http::{HeaderMap, HeaderName, Method};
use retryscope_otel::AttemptInfo;
use std::fmt;
use tracing::Span;
use tracing::field::Empty;

/// What the conventions call a method they do not know.
pub const OTHER_METHOD: &str = "_OTHER";

/// The variable that replaces the methods reported as they are, as the
/// semantic conventions name it: a comma-separated, case-sensitive list, the
/// whole list (not one added to the defaults).
pub const KNOWN_METHODS_ENV: &str = "OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS";

/// The methods the conventions know by default: RFC 9110's, PATCH (RFC 5789)
/// and QUERY.
const DEFAULT_KNOWN: [&str; 10] =
    ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "QUERY"];

/// The most methods [`KNOWN_METHODS_ENV`] may name: each is a span name and
/// a metric attribute's value, and their number must stay bounded.
const MAX_KNOWN: usize = 32;

/// The method as the conventions report it, if it is a known one: one of
/// [`KNOWN_METHODS_ENV`]'s when the variable is set (read once per process),
/// else one of the defaults (RFC 9110's, PATCH and QUERY).
pub fn known_method(method: &Method) -> Option<&'static str> {
    static KNOWN: std::sync::OnceLock<Box<[Box<str>]>> = std::sync::OnceLock::new();
    let known = KNOWN.get_or_init(|| known_methods(std::env::var(KNOWN_METHODS_ENV).ok().as_deref()));
    known.iter().find(|known| ***known == *method.as_str()).map(|known| &**known)
}

/// The known methods when the variable reads `set` (`None`: unset): its
/// methods, up to [`MAX_KNOWN`] of them and each a method's syntax (a token),
/// else the defaults.
fn known_methods(set: Option<&str>) -> Box<[Box<str>]> {
    let Some(list) = set else { return DEFAULT_KNOWN.into_iter().map(Box::from).collect() };
    let mut known: Vec<Box<str>> = Vec::new();
    for method in list.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        if Method::from_bytes(method.as_bytes()).is_err() {
            tracing::warn!(
                variable = KNOWN_METHODS_ENV,
                method,
                "not an HTTP method: left out of the known methods"
            );
        } else if known.len() == MAX_KNOWN {
            tracing::warn!(
                variable = KNOWN_METHODS_ENV,
                most = MAX_KNOWN,
                "too many known methods: the rest are reported as _OTHER"
            );
            break;
        } else {
            known.push(method.into());
        }
    }
    known.into_boxed_slice()
}

/// The request's id for the retry log (`request_id`): the value of header
/// `name`, if it is one the log accepts ([`retryscope_otel::request_id`]: 1 to
/// 128 bytes of visible ASCII). Both integrations' attempt-span makers answer
/// `MakeAttemptSpan::request_id` with it ([`HttpTarget::request_id`]).
fn request_id<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<&'h str> {
    let value = headers.get(name)?.to_str().ok()?;
    retryscope_otel::request_id(value)
}

/// What an HTTP attempt's span and the retry log's `request_id` say about
/// the request: borrowed from the request, nothing computed ahead. Each
/// integration's attempt-span maker builds one from its request and answers
/// both `MakeAttemptSpan` methods with it ([`span`](Self::span),
/// [`request_id`](Self::request_id)). The span's field values — the redacted
/// `url.full` above all, which is written out — are built only when a
/// subscriber takes the span, so a process without one pays nothing for them.
#[derive(Debug, Clone, Copy)]
pub struct HttpTarget<'a, U> {
    /// The method as sent.
    pub method: &'a Method,
    /// `server.address`.
    pub address: &'a str,
    /// `server.port`.
    pub port: Option<u16>,
    /// `url.full`: writes the request's URL, redacted.
    pub url: U,
    /// Whether the integration made the request's idempotency key, if it has
    /// one ([`KeySource::generated`](crate::idempotency::KeySource::generated)):
    /// `retryscope.idempotency_key.generated`.
    pub key_generated: Option<bool>,
    /// The request's headers, which the retry log's `request_id` is read
    /// from.
    pub headers: &'a HeaderMap,
    /// The header `request_id` is read from (the builder's
    /// `request_id_header`).
    pub request_id_header: &'a HeaderName,
}

impl<'a, U> HttpTarget<'a, U> {
    /// The request's id for the retry log: the value of its
    /// `request_id_header`, if the log accepts it (1 to 128 bytes of visible
    /// ASCII).
    pub fn request_id(&self) -> Option<&'a str> {
        request_id(self.headers, self.request_id_header)
    }
}

impl<U: fmt::Display> HttpTarget<'_, U> {
    /// `{method}`, or `HTTP` for an extension method.
    pub fn span_name(&self) -> &'static str {
        known_method(self.method).unwrap_or("HTTP")
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
        // The macro evaluates these only for a span some subscriber wants.
        let known = || known_method(self.method);
        tracing::info_span!(
            target: retryscope_otel::names::TARGET,
            parent: info.parent,
            "HTTP",
            otel.name = self.span_name(),
            otel.kind = "client",
            otel.status_code = Empty,
            retryscope.attempt = info.attempt_value(),
            // What groups a call's attempts now that they hang under the caller's
            // span, and what the dashboards' trace links search by.
            retryscope.dependency = info.dependency,
            retryscope.operation = info.operation,
            // The configuration the call started with, for a configured client.
            retryscope.config.hash = info.config_hash,
            // Recorded by the observer on the copies of a hedged call.
            retryscope.hedge = Empty,
            retryscope.hedge.outcome = Empty,
            // Recorded by a fault layer below the retry layer (fault injection).
            retryscope.fault.injected = Empty,
            "error.type" = Empty,
            "http.request.method" = known().unwrap_or(OTHER_METHOD),
            "http.request.method_original" = known().is_none().then(|| self.method.as_str()),
            "server.address" = self.address,
            "server.port" = self.port.map(i64::from),
            "url.full" = tracing::field::display(&self.url),
            "http.response.status_code" = Empty,
            "http.request.resend_count" = (info.attempt > 1).then(|| i64::from(info.attempt) - 1),
            "retryscope.idempotency_key.generated" = self.key_generated,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(method: &Method) -> HttpTarget<'_, &'static str> {
        static HEADERS: std::sync::LazyLock<HeaderMap> = std::sync::LazyLock::new(HeaderMap::new);
        static NAME: HeaderName = retryscope_otel::REQUEST_ID_HEADER;
        let (headers, request_id_header) = (&*HEADERS, &NAME);
        HttpTarget {
            method,
            address: "a",
            port: None,
            url: "u",
            key_generated: None,
            headers,
            request_id_header,
        }
    }

    #[test]
    fn the_request_id_is_the_header_s_value_when_the_log_accepts_it() {
        let name = retryscope_otel::REQUEST_ID_HEADER;
        let mut headers = HeaderMap::new();
        assert_eq!(request_id(&headers, &name), None);
        headers.insert(&name, http::HeaderValue::from_static("req-42"));
        assert_eq!(request_id(&headers, &name), Some("req-42"));
        headers.insert(&name, http::HeaderValue::from_static("has space"));
        assert_eq!(request_id(&headers, &name), None);
        let long = "r".repeat(retryscope_otel::names::MAX_REQUEST_ID_LEN + 1);
        headers.insert(&name, http::HeaderValue::from_str(&long).expect("visible ASCII"));
        assert_eq!(request_id(&headers, &name), None);
        headers.insert(&name, http::HeaderValue::from_bytes(b"caf\xc3\xa9").expect("opaque bytes"));
        assert_eq!(request_id(&headers, &name), None);
    }

    #[test]
    fn an_extension_method_names_its_span_http() {
        let purge = Method::from_bytes(b"PURGE").expect("a token");
        assert_eq!(target(&purge).span_name(), "HTTP");
        assert_eq!(known_method(&purge), None);
        assert_eq!(target(&Method::PATCH).span_name(), "PATCH");
    }

    #[test]
    fn query_is_known_and_the_variable_replaces_the_whole_list() {
        let query = Method::from_bytes(b"QUERY").expect("a token");
        assert_eq!(known_method(&query), Some("QUERY"));
        assert_eq!(target(&query).span_name(), "QUERY");
        let names =
            |set: Option<&str>| -> Vec<String> { known_methods(set).iter().map(|m| m.to_string()).collect() };
        assert_eq!(names(None).len(), 10);
        // The whole list, case-sensitive, spaces around commas ignored.
        assert_eq!(names(Some("GET, PURGE,,get")), ["GET", "PURGE", "get"]);
        // Not a method: left out; empty: nothing is known.
        assert_eq!(names(Some("GET,BAD METHOD,{x}")), ["GET"]);
        assert!(names(Some("")).is_empty());
        // Bounded.
        let many: Vec<String> = (0..100).map(|i| format!("M{i}")).collect();
        assert_eq!(names(Some(&many.join(","))).len(), MAX_KNOWN);
    }
}
