//! A filter on the whole registry, against a real collector (rotel): with
//! `retryscope=info` alone the attempt spans are exported as the roots of
//! traces of their own, because the span of the handler that made the call is
//! filtered out; naming the handler's target too (`checkout=info`, the
//! directive docs/guide/existing-services.md gives) keeps it, and the attempts
//! are its children, in its trace.

#![cfg(feature = "otlp")]
#![allow(clippy::unwrap_used)]

use retryscope::{Policy, Retryable};
use retryscope_otel::{OtlpConfig, Protocol, Telemetry};
use retryscope_test_support::rotel::{self, PrintedSpan};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;

#[test]
fn a_global_filter_keeps_the_callers_span_only_when_it_names_its_target() {
    let Some(binary) = rotel::binary() else { return };
    let collector = rotel::Collector::start(&binary, "global-filter");
    let telemetry = OtlpConfig::default()
        .protocol(Protocol::HttpProtobuf)
        .endpoint(format!("http://{}", collector.http))
        .service_name("global-filter-test")
        .build()
        .unwrap();

    call_in_a_handler(&telemetry, "warn,retryscope=info", "control");
    call_in_a_handler(&telemetry, "warn,retryscope=info,checkout=info", "fixed");
    telemetry.tracer_provider().force_flush().unwrap();

    let printed = collector
        .wait_for(&["Str(control)", "Str(fixed)", "Name           : handler-fixed"])
        .unwrap_or_else(|missing| panic!("{missing}"));
    let spans = rotel::spans(&printed);
    let attempt = |dependency: &str| -> &PrintedSpan {
        let value = format!("Str({dependency})");
        spans
            .iter()
            .find(|s| s.kind == "SPAN_KIND_CLIENT" && s.attribute("retryscope.dependency") == Some(&value))
            .unwrap_or_else(|| panic!("no attempt span for {dependency}: {spans:#?}"))
    };

    let control = attempt("control");
    assert_eq!(control.parent_id, "", "retryscope=info alone: the attempt is a root: {control:#?}");
    assert!(!spans.iter().any(|s| s.name == "handler-control"), "the handler's span is filtered out");

    let fixed = attempt("fixed");
    let handler = spans.iter().find(|s| s.name == "handler-fixed").unwrap();
    assert_eq!(
        (fixed.trace_id.as_str(), fixed.parent_id.as_str()),
        (handler.trace_id.as_str(), handler.id.as_str())
    );
    telemetry.shutdown().unwrap();
}

/// One engine call through retryscope's observer, inside a handler's span
/// whose target is the service's (`checkout`), under `directives` as a filter
/// of the whole registry.
fn call_in_a_handler(telemetry: &Telemetry, directives: &str, dependency: &'static str) {
    let subscriber = tracing_subscriber::registry().with(EnvFilter::new(directives)).with(telemetry.layer());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    tracing::subscriber::with_default(subscriber, || {
        let handler =
            tracing::info_span!(target: "checkout", "handler", otel.name = format!("handler-{dependency}"));
        let _entered = handler.enter();
        let call = (|| async { Ok::<_, std::io::Error>(7) })
            .retry(Policy::interactive())
            .observe(telemetry.observer())
            .dependency(dependency);
        let answer = runtime.block_on(async { call.await });
        assert_eq!(answer.unwrap(), 7);
    });
}
