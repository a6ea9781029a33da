//! W3C trace context on the wire, from the attempt's span.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::Injector;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Injects the current span's context (the attempt span, inside an attempt)
/// with the globally configured propagator, so every attempt carries its own
/// `traceparent` and the server's spans hang under the attempt that caused them.
pub(crate) fn inject_current_context(headers: &mut HeaderMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(headers));
    });
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        // A propagator that produced an invalid header has nothing useful to
        // send: skip it rather than fail the request.
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(key.as_bytes()), HeaderValue::from_str(&value))
        {
            self.0.insert(name, value);
        }
    }
}
