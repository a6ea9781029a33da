//! What the README's and the guide's doctests check beyond the code they show:
//! that what they exported reached the collector, attributes and all. Each
//! check panics, naming what is missing, as a failed doctest should.

use retryscope_test_support::Server;
use retryscope_test_support::echo::EchoServer;
use retryscope_test_support::rotel::{Collector, PrintedSpan, spans};

/// The CLIENT spans in what `collector` printed.
fn client_spans(printed: &str) -> Vec<PrintedSpan> {
    spans(printed).into_iter().filter(|s| s.kind == "SPAN_KIND_CLIENT").collect()
}

fn printed(collector: &Collector, needles: &[&str]) -> String {
    collector.wait_for(needles).unwrap_or_else(|missing| panic!("{missing}"))
}

/// The README's reqwest quickstart against [`inventory`](crate::services::inventory):
/// the server saw two requests (503, then 200), each with a `traceparent`
/// naming the CLIENT span of its own attempt, and the collector received the
/// dependency's budget and breaker gauges.
pub fn reqwest_attempts_reached(collector: &Collector, server: &Server) {
    let printed =
        printed(collector, &["-> Name: retryscope.budget.available", "-> Name: retryscope.breaker.state"]);
    let spans = client_spans(&printed);
    let seen = server.seen();
    assert_eq!(seen.len(), 2, "503, then 200");
    assert_eq!(spans.len(), 2, "one attempt span per request: {spans:#?}");
    for (attempt, request) in (1..).zip(&seen) {
        let traceparent =
            request.headers.get("traceparent").unwrap_or_else(|| panic!("attempt {attempt}: no traceparent"));
        let [version, trace_id, span_id, flags] = traceparent.split('-').collect::<Vec<_>>()[..] else {
            panic!("malformed traceparent {traceparent:?}");
        };
        assert_eq!((version, flags), ("00", "01"), "{traceparent}");
        let span = spans
            .iter()
            .find(|s| s.id == span_id)
            .unwrap_or_else(|| panic!("{traceparent} names no client span: {spans:#?}"));
        assert_eq!(span.trace_id, trace_id);
        assert_eq!(
            span.attribute("retryscope.attempt"),
            Some(format!("Int({attempt})").as_str()),
            "the traceparent of attempt {attempt} names its own span"
        );
    }
    let dependency = format!("127.0.0.1:{}", server.addr.port());
    for gauge in ["retryscope.budget.available", "retryscope.breaker.state"] {
        let metric = printed
            .split("Metric #")
            .find(|m| m.contains(&format!("-> Name: {gauge}\n")))
            .unwrap_or_else(|| panic!("no {gauge} in\n{printed}"));
        assert!(metric.contains("DataType: Gauge"), "{gauge}: {metric}");
        assert!(
            metric.contains(&format!("-> retryscope.dependency: Str({dependency})")),
            "{gauge}: {metric}"
        );
    }
}

/// The README's tonic quickstart against [`greeter`](crate::services::greeter):
/// three attempts, the retries with `grpc-previous-rpc-attempts` 1 and 2, and
/// each attempt's `traceparent` naming a CLIENT span with the RPC attributes
/// and its status.
pub fn grpc_attempts_reached(collector: &Collector, server: &EchoServer) {
    let printed = printed(collector, &["-> rpc.grpc.status_code: Int(0)"]);
    let calls = server.calls();
    let previous: Vec<Option<&str>> = calls.iter().map(|c| c.previous_attempts.as_deref()).collect();
    assert_eq!(previous, [None, Some("1"), Some("2")]);
    let spans = client_spans(&printed);
    let port = server.addr.port();
    for (attempt, call) in (1..).zip(&calls) {
        let traceparent =
            call.traceparent.as_deref().unwrap_or_else(|| panic!("attempt {attempt}: no traceparent"));
        let span_id = traceparent.split('-').nth(2).unwrap_or_default();
        let span = spans
            .iter()
            .find(|s| s.id == span_id)
            .unwrap_or_else(|| panic!("{traceparent} names no client span:\n{printed}"));
        let code = if attempt < 3 { 14 } else { 0 };
        assert_eq!(span.name, "helloworld.Greeter/SayHello");
        for (key, value) in [
            ("retryscope.attempt", format!("Int({attempt})")),
            ("rpc.system", "Str(grpc)".to_owned()),
            ("rpc.service", "Str(helloworld.Greeter)".to_owned()),
            ("rpc.method", "Str(SayHello)".to_owned()),
            ("server.address", "Str(127.0.0.1)".to_owned()),
            ("server.port", format!("Int({port})")),
            ("rpc.grpc.status_code", format!("Int({code})")),
        ] {
            assert_eq!(span.attribute(key), Some(value.as_str()), "attempt {attempt}: {key} on {span:#?}");
        }
        let error_type = (code == 14).then_some("Str(UNAVAILABLE)");
        assert_eq!(span.attribute("error.type"), error_type, "{span:#?}");
    }
}

/// The guide's transactions (databases.md): one CLIENT span per attempt with
/// the database conventions and never the query text; `transfer` committed at
/// once, `replayed` failed with `40001` and committed on its second attempt,
/// `refused` ended on its `23505` after one.
pub fn sqlx_attempts_reached(collector: &Collector) {
    let printed = printed(collector, &["Str(23505)", "Str(40001)", "Str(transfer"]);
    let spans = client_spans(&printed);
    let by_operation = |operation: &str| -> Vec<&PrintedSpan> {
        let value = format!("Str({operation})");
        spans.iter().filter(|s| s.attribute("db.operation.name") == Some(value.as_str())).collect()
    };
    for span in &spans {
        for (key, value) in [
            ("db.system.name", "Str(postgresql)"),
            ("db.namespace", "Str(retryscope)"),
            ("server.address", "Str(127.0.0.1)"),
        ] {
            assert_eq!(span.attribute(key), Some(value), "{key} on {span:#?}");
        }
        assert!(span.attribute("server.port").is_some_and(|p| p.starts_with("Int(")), "{span:#?}");
        let text = span.attributes.join("\n");
        assert!(!text.contains("UPDATE") && !text.contains("INSERT"), "the query text leaked: {text}");
    }
    let transfer = by_operation("transfer");
    assert_eq!(transfer.len(), 1, "{spans:#?}");
    assert_eq!(transfer[0].name, "transfer retryscope");
    assert_eq!(transfer[0].attribute("db.response.status_code"), None, "it committed");

    let replayed = by_operation("replayed");
    assert_eq!(replayed.len(), 2, "{spans:#?}");
    let (first, second) = match replayed[0].attribute("retryscope.attempt") {
        Some("Int(1)") => (replayed[0], replayed[1]),
        _ => (replayed[1], replayed[0]),
    };
    assert_eq!(first.attribute("db.response.status_code"), Some("Str(40001)"));
    assert_eq!(first.attribute("error.type"), Some("Str(40001)"));
    assert_eq!(second.attribute("retryscope.attempt"), Some("Int(2)"));
    assert_eq!(second.attribute("error.type"), None);

    let refused = by_operation("refused");
    assert_eq!(refused.len(), 1, "a unique violation is tried once: {spans:#?}");
    assert_eq!(refused[0].attribute("db.response.status_code"), Some("Str(23505)"));
    assert_eq!(refused[0].attribute("error.type"), Some("Str(23505)"));
}

/// Every CLIENT span the collector received has `parent`'s span (an INTERNAL
/// span) as its parent, in `parent`'s trace: the span the calls ran in reached
/// the collector too. And neither carries what nobody asked for (source
/// locations, threads, busy and idle times).
pub fn attempts_are_children_of(collector: &Collector, parent: &str) {
    let printed = printed(collector, &[&format!("Name           : {parent}"), "SPAN_KIND_CLIENT"]);
    let all = spans(&printed);
    let parent_span =
        all.iter().find(|s| s.name == parent).unwrap_or_else(|| panic!("no span {parent:?} in\n{printed}"));
    assert_eq!(parent_span.kind, "SPAN_KIND_INTERNAL", "{parent_span:#?}");
    let attempts = client_spans(&printed);
    assert!(!attempts.is_empty(), "no attempt span in\n{printed}");
    for attempt in &attempts {
        assert_eq!(
            (attempt.trace_id.as_str(), attempt.parent_id.as_str()),
            (parent_span.trace_id.as_str(), parent_span.id.as_str()),
            "the attempt span is a child of {parent:?}: {attempt:#?}"
        );
        assert!(
            attempt.attribute("retryscope.dependency").is_some_and(|d| d.contains("127.0.0.1")),
            "{attempt:#?}"
        );
        for absent in ["code.file.path", "thread.id", "thread.name", "busy_ns", "idle_ns"] {
            assert_eq!(attempt.attribute(absent), None, "an attempt span carries {absent}");
            assert_eq!(parent_span.attribute(absent), None, "{parent:?} carries {absent}");
        }
    }
}

/// The trace id and parent span id of every CLIENT span `collector` printed,
/// in the order received, once `count` have arrived: printed too, for a
/// reader comparing runs.
pub fn attempt_traces(collector: &Collector, count: usize) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for _ in 0..100 {
        let printed = printed(collector, &["SPAN_KIND_CLIENT"]);
        found = client_spans(&printed).into_iter().map(|s| (s.trace_id, s.parent_id)).collect();
        if found.len() >= count {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    println!("attempt spans (trace id, parent span id): {found:?}");
    found
}

/// Waits up to `within` until a job worker's `stats` count `want` deliveries
/// that ended with `outcome`; panics with the counts it saw otherwise.
pub async fn jobs_reached(
    stats: &retryscope_jobs::WorkerStats,
    outcome: retryscope_jobs::JobOutcome,
    want: u64,
    within: std::time::Duration,
) {
    let start = std::time::Instant::now();
    while stats.count(outcome) < want {
        if start.elapsed() > within {
            let counts: Vec<String> = retryscope_jobs::JobOutcome::ALL
                .iter()
                .map(|o| format!("{}={}", o.as_str(), stats.count(*o)))
                .collect();
            panic!(
                "{want} deliveries {} expected within {within:?}; saw {}",
                outcome.as_str(),
                counts.join(", ")
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The fallbacks guide's OTLP block against
/// [`inventory_down`](crate::services::inventory_down): the collector received
/// `retryscope.fallbacks` for the dependency, reason `attempts_exhausted`, and
/// the `retryscope.fallback` event on the caller's span, marked `served`.
pub fn fallback_reached(collector: &Collector, server: &Server) {
    let printed = printed(collector, &["-> Name: retryscope.fallbacks\n", "-> Name: retryscope.fallback\n"]);
    let dependency = format!("127.0.0.1:{}", server.addr.port());
    let metric = printed
        .split("Metric #")
        .find(|m| m.contains("-> Name: retryscope.fallbacks\n"))
        .unwrap_or_else(|| panic!("no retryscope.fallbacks in\n{printed}"));
    for needle in [
        "DataType: Sum".to_owned(),
        format!("-> retryscope.dependency: Str({dependency})"),
        "-> retryscope.fallback.reason: Str(attempts_exhausted)".to_owned(),
        "Value: 1".to_owned(),
    ] {
        assert!(metric.contains(&needle), "{needle} not in {metric}");
    }
    let event = printed
        .split("SpanEvent #")
        .find(|e| e.contains("-> Name: retryscope.fallback\n"))
        .unwrap_or_else(|| panic!("no retryscope.fallback event in\n{printed}"));
    for needle in
        ["-> retryscope.fallback.result: Str(served)", "-> retryscope.fallback.name: Str(stale-cache)"]
    {
        assert!(event.contains(needle), "{needle} not in {event}");
    }
}
