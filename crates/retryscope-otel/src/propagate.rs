//! W3C trace context on the wire, from the attempt's span.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::Injector;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Injects the current `tracing` span's context — the attempt span, when called
/// inside an attempt — into `headers` with the globally configured propagator
/// (W3C `traceparent` with the `otlp` feature's `init_otlp`).
/// Every attempt then carries its own span id, so a server's spans hang under
/// the attempt that caused them. With no propagator installed, nothing is added.
///
/// ```
/// let mut headers = http::HeaderMap::new();
/// retryscope_otel::inject_context(&mut headers); // inside an attempt: its span
/// ```
pub fn inject_context(headers: &mut HeaderMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(headers));
    });
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        // A propagator that produced an invalid header name or value has nothing
        // useful to send: skip it rather than fail the request.
        if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(key.as_bytes()), HeaderValue::from_str(&value))
        {
            self.0.insert(name, value);
        }
    }
}
