//! What `inject_context` puts on the wire from inside an attempt: the attempt
//! span's own context, through whatever propagator the process installed.

mod common;

use common::Telemetry;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry::{Context, global};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use retryscope::{Policy, Retryable};
use std::sync::{Mutex, PoisonError};

/// The propagator is process-wide: the tests of this file take turns.
static PROPAGATOR: Mutex<()> = Mutex::new(());

/// Runs one call of one attempt and returns the headers its attempt injected,
/// with the ids of the attempt span.
fn headers_of_one_attempt(t: &Telemetry) -> (http::HeaderMap, String, String) {
    let mut headers = http::HeaderMap::new();
    let mut ids = (String::new(), String::new());
    let result = (|| {
        retryscope_otel::inject_context(&mut headers);
        let span = tracing_opentelemetry::OpenTelemetrySpanExt::context(&tracing::Span::current());
        let context = span.span().span_context().clone();
        ids = (context.trace_id().to_string(), context.span_id().to_string());
        Ok::<_, std::io::Error>(())
    })
    .retry(Policy::interactive())
    .observe(t.observer.clone())
    .dependency("db")
    .call();
    assert!(result.is_ok());
    (headers, ids.0, ids.1)
}

#[test]
fn w3c_sends_the_attempt_span_as_traceparent_and_no_empty_tracestate() {
    let _turn = PROPAGATOR.lock().unwrap_or_else(PoisonError::into_inner);
    global::set_text_map_propagator(TraceContextPropagator::new());
    let t = Telemetry::new();
    let (headers, trace, span) = headers_of_one_attempt(&t);
    assert_eq!(headers["traceparent"], format!("00-{trace}-{span}-01"));
    assert!(!headers.contains_key("tracestate"), "an empty tracestate is left out: {headers:?}");
    assert_eq!(headers.len(), 1);
}

/// A propagator of the user's own, with header names that are not W3C's.
#[derive(Debug)]
struct Custom {
    fields: Vec<String>,
}

impl TextMapPropagator for Custom {
    fn inject_context(&self, cx: &Context, injector: &mut dyn Injector) {
        let span = cx.span();
        let context = span.span_context();
        injector.set("X-Custom-Trace", format!("{}:{}", context.trace_id(), context.span_id()));
        injector.set("b3", format!("{}-{}-1", context.trace_id(), context.span_id()));
        // An empty value under another name is the propagator's to send.
        injector.set("x-custom-empty", String::new());
    }

    fn extract_with_context(&self, cx: &Context, _: &dyn Extractor) -> Context {
        cx.clone()
    }

    fn fields(&self) -> opentelemetry::propagation::text_map_propagator::FieldIter<'_> {
        opentelemetry::propagation::text_map_propagator::FieldIter::new(&self.fields)
    }
}

#[test]
fn a_propagator_the_user_installed_is_honoured() {
    let _turn = PROPAGATOR.lock().unwrap_or_else(PoisonError::into_inner);
    global::set_text_map_propagator(Custom {
        fields: vec!["x-custom-trace".into(), "b3".into(), "x-custom-empty".into()],
    });
    let t = Telemetry::new();
    let (headers, trace, span) = headers_of_one_attempt(&t);
    global::set_text_map_propagator(TraceContextPropagator::new());
    assert_eq!(headers["x-custom-trace"], format!("{trace}:{span}"));
    assert_eq!(headers["b3"], format!("{trace}-{span}-1"));
    assert_eq!(headers["x-custom-empty"], "");
    assert!(!headers.contains_key("traceparent"));
    assert_eq!(headers.len(), 3);
}
