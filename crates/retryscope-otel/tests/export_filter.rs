//! What the layer exports as span events: retryscope's own events, those the
//! program opts in to, and never sqlx's statement log, whichever span is
//! current when another crate logs.

#![cfg(feature = "otlp")]

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use retryscope_otel::{ExportFilter, OtlpConfig, SetupError, names};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// Runs one attempt span holding a retry-log-like event of retryscope's, a
/// WARN of another crate and a slow-statement WARN of sqlx, through
/// tracing-opentelemetry's layer behind `filter`; returns the names of the
/// exported attempt span's events.
fn exported_events(filter: ExportFilter) -> Vec<String> {
    let spans = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test")).with_filter(filter);
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
        tracing::info_span!(target: names::TARGET, "retryscope.attempt").in_scope(|| {
            tracing::info!(target: names::TARGET, "retryscope.backoff");
            tracing::warn!(target: "checkout::payments", card = "4111", "card declined");
            tracing::warn!(target: "sqlx::query", summary = "SELECT secret", "slow statement");
        });
    });
    let finished = spans.get_finished_spans().expect("the in-memory exporter answers");
    let attempt =
        finished.iter().find(|span| span.name == "retryscope.attempt").expect("the attempt span is exported");
    attempt.events.iter().map(|event| event.name.to_string()).collect()
}

#[test]
fn by_default_only_retryscope_s_own_events_are_exported_on_its_spans() {
    let filter = ExportFilter::new("info", None).expect("valid directives");
    assert_eq!(exported_events(filter), ["retryscope.backoff"]);
}

#[test]
fn an_event_filter_opts_the_program_s_events_in() {
    let filter = ExportFilter::new("info", Some("checkout=info")).expect("valid directives");
    assert_eq!(exported_events(filter), ["retryscope.backoff", "card declined"]);
}

#[test]
fn sqlx_s_statement_log_is_never_exported_even_when_opted_in() {
    for opt_in in ["sqlx=trace", "sqlx::query=warn", "info", "trace"] {
        let filter = ExportFilter::new("info", Some(opt_in)).expect("valid directives");
        let events = exported_events(filter);
        assert!(!events.iter().any(|name| name == "slow statement"), "{opt_in}: {events:?}");
        assert!(events.iter().any(|name| name == "retryscope.backoff"), "{opt_in}: {events:?}");
    }
}

#[test]
fn an_event_filter_that_does_not_parse_is_refused_at_build() {
    let built = OtlpConfig::default().endpoint("http://127.0.0.1:4318").event_filter("checkout=loud").build();
    assert!(matches!(built, Err(SetupError::Filter(_))), "{built:?}");
}
