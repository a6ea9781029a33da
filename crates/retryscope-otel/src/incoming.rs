//! The server's side of retries: which incoming requests are themselves
//! retries, counted as `retryscope.server.requests`.
//!
//! Retries multiply down a call chain: when three layers each make four
//! attempts, one user request becomes 64 at the bottom. A client tells the next
//! hop which attempt it is sending — retryscope's clients send
//! [`ATTEMPT_HEADER`] on every retry — and the server counts what it receives,
//! so an operator sees the share of a service's traffic that is retries of
//! retries next to its own retry ratio.

use crate::names;
use crate::observer::scope;
use http::{HeaderMap, HeaderName};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter};
use retryscope::dependency::NameTable;
use std::sync::LazyLock;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The request header retryscope's clients send on every retry: the attempt's
/// number, from 2 (`retry-attempt: 2` on the first retry). The first attempt
/// sends nothing, as gRPC sends no `grpc-previous-rpc-attempts` on it.
///
/// Why this name: Envoy's `x-envoy-attempt-count` carries the same number, but
/// it belongs to Envoy — a mesh in between overwrites it with its own count —
/// and gRPC's `grpc-previous-rpc-attempts` is specific to gRPC and counts the
/// attempts before this one. A neutral name (no `x-` prefix, per RFC 6648) lets
/// any server read it; [`IncomingRequests`] also understands both of the others.
pub const ATTEMPT_HEADER: HeaderName = HeaderName::from_static("retry-attempt");

/// Envoy's attempt count (1-based), read when [`ATTEMPT_HEADER`] is absent.
pub const ENVOY_ATTEMPT_HEADER: HeaderName = HeaderName::from_static("x-envoy-attempt-count");

/// gRPC's count of previous attempts (gRFC A6), read when neither of the others
/// is present.
pub const GRPC_PREVIOUS_ATTEMPTS: HeaderName = HeaderName::from_static("grpc-previous-rpc-attempts");

/// The response header a server adds to an error when the clients it called
/// while serving the request already retried and gave up: `retry-exhausted: 4`
/// says four attempts were made below. A client that retries at one layer only
/// does not retry such a response.
pub const EXHAUSTED_HEADER: HeaderName = HeaderName::from_static("retry-exhausted");

/// Attempt numbers above this are not believed: a caller's header can say
/// anything, and no sane policy makes a hundred attempts.
pub const MAX_TRUSTED_ATTEMPT: u32 = 100;

/// Which attempt of its caller an incoming request is, as far as its headers say.
///
/// ```
/// use http::HeaderMap;
/// use retryscope_otel::IncomingAttempt;
///
/// let mut headers = HeaderMap::new();
/// assert_eq!(IncomingAttempt::from_headers(&headers), IncomingAttempt::FIRST);
/// headers.insert("retry-attempt", "3".parse().unwrap());
/// let attempt = IncomingAttempt::from_headers(&headers);
/// assert_eq!((attempt.number(), attempt.bucket(), attempt.is_retry()), (Some(3), "3", true));
/// headers.insert("retry-attempt", "-1".parse().unwrap());
/// assert_eq!(IncomingAttempt::from_headers(&headers).bucket(), "unknown");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncomingAttempt(Option<u32>);

impl IncomingAttempt {
    /// A first attempt: what a request without any attempt header is.
    pub const FIRST: IncomingAttempt = IncomingAttempt(Some(1));
    /// A header was there but said nothing believable.
    pub const UNKNOWN: IncomingAttempt = IncomingAttempt(None);

    /// The attempt `headers` describe, read from [`ATTEMPT_HEADER`], else
    /// [`ENVOY_ATTEMPT_HEADER`], else [`GRPC_PREVIOUS_ATTEMPTS`]; no header is a
    /// first attempt. A value that is not a plain number from 1 to
    /// [`MAX_TRUSTED_ATTEMPT`] (from 0 for gRPC's count) is
    /// [`UNKNOWN`](Self::UNKNOWN).
    pub fn from_headers(headers: &HeaderMap) -> Self {
        Self::from_headers_named(headers, &ATTEMPT_HEADER)
    }

    /// Like [`from_headers`](Self::from_headers), with the 1-based attempt read
    /// from `name` instead of [`ATTEMPT_HEADER`].
    pub fn from_headers_named(headers: &HeaderMap, name: &HeaderName) -> Self {
        let number = |name: &HeaderName| headers.get(name).map(|v| parse_count(v.as_bytes()));
        if let Some(attempt) = number(name).or_else(|| number(&ENVOY_ATTEMPT_HEADER)) {
            return Self(attempt.filter(|n| (1..=MAX_TRUSTED_ATTEMPT).contains(n)));
        }
        match number(&GRPC_PREVIOUS_ATTEMPTS) {
            Some(previous) => Self(previous.filter(|n| *n < MAX_TRUSTED_ATTEMPT).map(|n| n + 1)),
            None => Self::FIRST,
        }
    }

    /// The attempt's number (1 = a first attempt), unless unknown.
    pub fn number(self) -> Option<u32> {
        self.0
    }

    /// Whether the caller says this request is a retry.
    pub fn is_retry(self) -> bool {
        self.0.is_some_and(|n| n > 1)
    }

    /// The `retryscope.attempt` value of `retryscope.server.requests`: `1`, `2`,
    /// `3`, `4+` or `unknown`.
    pub fn bucket(self) -> &'static str {
        match self.0 {
            Some(1) => "1",
            Some(2) => "2",
            Some(3) => "3",
            Some(_) => "4+",
            None => "unknown",
        }
    }

    /// Every value [`bucket`](Self::bucket) can take.
    pub const BUCKETS: [&'static str; 5] = ["1", "2", "3", "4+", "unknown"];
}

/// The attempts a response's [`EXHAUSTED_HEADER`] says were made below, if it
/// carries a believable count (2 to [`MAX_TRUSTED_ATTEMPT`]).
pub(crate) fn exhausted_attempts(headers: &HeaderMap) -> Option<u32> {
    let count = parse_count(headers.get(EXHAUSTED_HEADER)?.as_bytes())?;
    (2..=MAX_TRUSTED_ATTEMPT).contains(&count).then_some(count)
}

/// A header value as a small decimal count: digits only, at most ten of them.
fn parse_count(value: &[u8]) -> Option<u32> {
    if value.is_empty() || value.len() > 10 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Counts incoming requests by the attempt their caller says they are:
/// `retryscope.server.requests`, for any server.
///
/// Frameworks built on tower get it from `retryscope-tower`'s server layer;
/// any other server calls [`observe`](Self::observe) once per request.
///
/// ```
/// use retryscope_otel::IncomingRequests;
///
/// // Once, after the meter provider is installed:
/// let incoming = IncomingRequests::global();
/// // Per request, with the route template if the framework has one:
/// let headers = http::HeaderMap::new();
/// let attempt = incoming.observe(&headers, Some("/orders/{id}"));
/// assert!(!attempt.is_retry());
/// ```
#[derive(Debug, Clone)]
pub struct IncomingRequests {
    requests: Counter<u64>,
    header: HeaderName,
}

impl IncomingRequests {
    /// Records through the global meter provider (install it first).
    pub fn global() -> Self {
        Self::from_meter(&opentelemetry::global::meter_with_scope(scope()))
    }

    /// Records with `meter`.
    pub fn from_meter(meter: &Meter) -> Self {
        let requests = meter
            .u64_counter(names::SERVER_REQUESTS)
            .with_unit(names::UNIT_REQUEST)
            .with_description("Incoming requests, by the attempt their caller says they are.")
            .build();
        Self { requests, header: ATTEMPT_HEADER }
    }

    /// Reads the attempt from `name` instead of [`ATTEMPT_HEADER`] (the other
    /// known headers are still read when it is absent).
    #[must_use]
    pub fn attempt_header(mut self, name: HeaderName) -> Self {
        self.header = name;
        self
    }

    /// Reads which attempt the request with `headers` is, counts it with its
    /// `route` (a route template such as `/orders/{id}`, or a gRPC
    /// `/package.Service/Method`; bounded like dependency names) and puts the
    /// attempt number on the current span as `retryscope.attempt`.
    pub fn observe(&self, headers: &HeaderMap, route: Option<&str>) -> IncomingAttempt {
        let attempt = IncomingAttempt::from_headers_named(headers, &self.header);
        let bucket = KeyValue::new(names::ATTEMPT, attempt.bucket());
        match route.map(bounded_route) {
            Some(route) => self.requests.add(1, &[bucket, KeyValue::new(names::HTTP_ROUTE, route)]),
            None => self.requests.add(1, &[bucket]),
        }
        if let Some(number) = attempt.number() {
            tracing::Span::current().set_attribute(names::ATTEMPT, i64::from(number));
        }
        attempt
    }
}

/// `route` as an `http.route` label, bounded like dependency names by a table
/// of its own: the table `retryscope.server.requests` uses, shared with the
/// other server-side metrics (retryscope-idempotency) so that a route has one
/// label everywhere.
///
/// ```
/// let label = retryscope_otel::bounded_route("/orders/{id}");
/// assert_eq!(label, "/orders/{id}");
/// ```
pub fn bounded_route(route: &str) -> &'static str {
    static ROUTES: LazyLock<NameTable> =
        LazyLock::new(|| NameTable::new(retryscope::dependency::MAX_DEPENDENCIES));
    ROUTES.intern(route)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            if let Ok(value) = value.parse() {
                map.append((*name).clone(), value);
            }
        }
        map
    }

    #[test]
    fn attempts_are_read_from_the_known_headers_in_order() {
        let read = |pairs: &[(&HeaderName, &str)]| IncomingAttempt::from_headers(&headers(pairs)).number();
        assert_eq!(read(&[]), Some(1));
        assert_eq!(read(&[(&ATTEMPT_HEADER, "2")]), Some(2));
        assert_eq!(read(&[(&ENVOY_ATTEMPT_HEADER, "3")]), Some(3));
        assert_eq!(
            read(&[(&GRPC_PREVIOUS_ATTEMPTS, "1")]),
            Some(2),
            "one previous attempt: this is the second"
        );
        assert_eq!(read(&[(&ATTEMPT_HEADER, "2"), (&ENVOY_ATTEMPT_HEADER, "5")]), Some(2));
    }

    #[test]
    fn hostile_values_are_unknown_never_trusted() {
        for value in ["-1", "0", "99999999999", "101", "1e3", "", " 2", "two", "2.0", "+2", "0x2"] {
            let attempt = IncomingAttempt::from_headers(&headers(&[(&ATTEMPT_HEADER, value)]));
            assert_eq!(attempt, IncomingAttempt::UNKNOWN, "{value:?}");
            assert_eq!(attempt.bucket(), "unknown");
            assert!(!attempt.is_retry());
        }
        let grpc = IncomingAttempt::from_headers(&headers(&[(&GRPC_PREVIOUS_ATTEMPTS, "100")]));
        assert_eq!(grpc, IncomingAttempt::UNKNOWN);
        assert_eq!(IncomingAttempt::from_headers(&headers(&[(&ATTEMPT_HEADER, "100")])).bucket(), "4+");
    }

    #[test]
    fn buckets_are_bounded() {
        let buckets: Vec<_> = [Some(1), Some(2), Some(3), Some(4), Some(99), None]
            .into_iter()
            .map(|n| IncomingAttempt(n).bucket())
            .collect();
        assert_eq!(buckets, ["1", "2", "3", "4+", "4+", "unknown"]);
        assert!(buckets.iter().all(|b| IncomingAttempt::BUCKETS.contains(b)));
    }
}
