//! W3C trace context on the wire, from the attempt's span.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::Injector;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The headers of the propagators `init_otlp` installs (W3C TraceContext and
/// Baggage), parsed once: `HeaderName::from_bytes` copies a name that is not
/// one of HTTP's own into a fresh buffer, on every attempt.
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
static BAGGAGE: HeaderName = HeaderName::from_static("baggage");

/// Injects the current `tracing` span's context — the attempt span, when called
/// inside an attempt — into `headers` with the globally configured propagator
/// (W3C `traceparent` with the `otlp` feature's `init_otlp`; B3 or any other
/// propagator you install instead works the same way).
/// Every attempt then carries its own span id, so a server's spans hang under
/// the attempt that caused them. With no propagator installed, nothing is added.
/// An empty `tracestate` is not sent: W3C Trace Context lets a client omit it.
/// `traceparent`, unique to each attempt, is marked sensitive, which HTTP/2
/// sends as a never-indexed literal (its value is the same on the wire).
///
/// ```
/// let mut headers = http::HeaderMap::new();
/// retryscope_otel::inject_context(&mut headers); // inside an attempt: its span
/// ```
pub fn inject_context(headers: &mut HeaderMap) {
    inject_span_context(&tracing::Span::current(), headers);
}

/// [`inject_context`] for a span the caller already holds (the attempt's own,
/// taken once inside the attempt): the same headers, without looking the
/// current span up again.
///
/// ```
/// let span = tracing::Span::current();
/// let mut headers = http::HeaderMap::new();
/// retryscope_otel::inject_span_context(&span, &mut headers);
/// ```
pub fn inject_span_context(span: &tracing::Span, headers: &mut HeaderMap) {
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(headers));
    });
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        // Whether the header is `traceparent` is known from the key: comparing
        // the names afterwards compares their bytes.
        let (name, traceparent) = match key {
            "traceparent" => (TRACEPARENT.clone(), true),
            "tracestate" if value.is_empty() => return,
            "tracestate" => (TRACESTATE.clone(), false),
            "baggage" => (BAGGAGE.clone(), false),
            // Another propagator's header (B3's `b3`, `x-b3-traceid`, …). One that
            // produced an invalid name has nothing useful to send: skip it rather
            // than fail the request.
            other => match HeaderName::from_bytes(other.as_bytes()) {
                Ok(name) => {
                    let traceparent = name == TRACEPARENT;
                    (name, traceparent)
                }
                Err(_) => return,
            },
        };
        // `TryFrom<String>` keeps the propagator's buffer instead of copying it.
        if let Ok(mut value) = HeaderValue::try_from(value) {
            // Unique to each attempt: HTTP/2 sends it never-indexed rather than
            // filling the HPACK table with it (a table entry per attempt,
            // evicting the headers every call repeats).
            value.set_sensitive(traceparent);
            self.0.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preparsed_names_are_the_ones_a_parser_makes() {
        for (name, parsed) in
            [(&TRACEPARENT, "traceparent"), (&TRACESTATE, "tracestate"), (&BAGGAGE, "baggage")]
        {
            assert_eq!(*name, HeaderName::from_bytes(parsed.as_bytes()).expect("a valid name"));
        }
    }

    #[test]
    fn an_empty_tracestate_is_not_sent_and_a_full_one_is() {
        let mut headers = HeaderMap::new();
        HeaderInjector(&mut headers).set("tracestate", String::new());
        assert!(headers.is_empty());
        HeaderInjector(&mut headers).set("tracestate", "vendor=1".to_owned());
        assert_eq!(headers["tracestate"], "vendor=1");
    }

    #[test]
    fn a_header_the_propagator_cannot_name_is_skipped() {
        let mut headers = HeaderMap::new();
        HeaderInjector(&mut headers).set("bad name", "x".to_owned());
        HeaderInjector(&mut headers).set("x-b3-traceid", "bad\nvalue".to_owned());
        assert!(headers.is_empty());
        HeaderInjector(&mut headers).set("X-B3-TraceId", "80f198ee56343ba864fe8b2a57d3eff7".to_owned());
        assert_eq!(headers["x-b3-traceid"], "80f198ee56343ba864fe8b2a57d3eff7");
    }
}
