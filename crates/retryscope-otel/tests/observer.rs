//! The observer against an in-memory SDK: exact metric names, units, buckets and
//! attribute sets; span names, kinds, parents, attributes, statuses and events.
//! tokio's clock is paused, so durations are exact and nothing sleeps for real.

mod common;

use common::Refuse;
use retryscope::dependency::{Dependency, OVERFLOW};
use retryscope::overload::{Aimd, ConcurrencyLimiter};
use std::sync::Arc;

use common::{Telemetry, attrs, span_attr, to_attrs};
use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use retryscope::observe::{AttemptEnd, AttemptStart, Finish, Observer, OperationInfo, OperationObserver};
use retryscope::{CircuitBreaker, ErrorType, Hint, Jitter, Outcome, Policy, Retryable, StopReason, Verdict};
use retryscope_otel::names;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::time::Duration;
use tracing::Instrument;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// 100 ms doubling, no jitter, no deadline: delays are exact.
fn policy(max_attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(max_attempts)
        .base_delay(ms(100))
        .max_delay(ms(1_000))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid policy")
}

/// Each call takes 20 ms (virtual) and fails with `error` until call `succeed_on`.
fn op(
    calls: &Cell<u32>,
    succeed_on: u32,
) -> impl FnMut() -> std::pin::Pin<Box<dyn Future<Output = Result<u32, u16>>>> + '_ {
    move || {
        calls.set(calls.get() + 1);
        let n = calls.get();
        Box::pin(async move {
            tokio::time::sleep(ms(20)).await;
            if n >= succeed_on { Ok(n) } else { Err(503) }
        })
    }
}

fn by_status(result: &Result<u32, u16>) -> Verdict {
    match result {
        Ok(_) => Verdict::Success,
        Err(code) if *code >= 500 => Verdict::retryable(ErrorType::Status(*code)),
        Err(code) => Verdict::permanent(ErrorType::Status(*code)),
    }
}

#[tokio::test(start_paused = true)]
async fn success_at_once() {
    let t = Telemetry::new();
    let calls = Cell::new(0);
    let caller = tracing::info_span!("caller");
    let result = op(&calls, 1)
        .retry(policy(3))
        .classify(by_status)
        .observe(t.observer.clone())
        .dependency("db")
        .operation("load_user")
        .into_future()
        .instrument(caller)
        .await;
    assert_eq!(result.unwrap(), 1);

    // One span: the attempt, a CLIENT child of the caller's span, named after
    // the operation. No operation span repeats it.
    let caller = t.span("caller");
    assert_eq!(t.finished_spans().len(), 2, "the caller's span and one attempt span");
    let attempts = t.children(caller.span_context.span_id());
    assert_eq!(attempts.len(), 1);
    let attempt = &attempts[0];
    assert_eq!(attempt.name, "load_user");
    assert_eq!(attempt.span_kind, SpanKind::Client);
    assert_eq!(attempt.span_context.trace_id(), caller.span_context.trace_id());
    assert_eq!(span_attr(attempt, names::ATTEMPT).as_deref(), Some("1"));
    assert_eq!(span_attr(attempt, names::DEPENDENCY).as_deref(), Some("db"));
    assert_eq!(span_attr(attempt, names::OPERATION).as_deref(), Some("load_user"));
    assert_eq!(span_attr(attempt, names::ERROR_TYPE), None);
    assert_eq!(span_attr(attempt, names::OUTCOME), None, "a success says nothing more");
    assert_eq!(attempt.status, Status::Unset);
    assert!(attempt.events.is_empty(), "no waits");
    assert!(caller.events.is_empty());

    let common = [(names::DEPENDENCY, "db"), (names::OPERATION, "load_user")];
    assert_eq!(t.counter(names::REQUESTS), [(attrs(&common), 1)].into());
    assert!(t.counter(names::RETRIES).is_empty());
    assert!(t.counter(names::THROTTLED).is_empty());
    assert!(t.histogram(names::BACKOFF_DELAY).is_empty());
    let attempt1 = attrs(&[common[0], common[1], (names::ATTEMPT, "1")]);
    assert_eq!(t.histogram(names::ATTEMPT_DURATION), [(attempt1, (1, 0.02))].into());
    let request = attrs(&[common[0], common[1], (names::OUTCOME, "success"), (names::ATTEMPTS, "1")]);
    assert_eq!(t.histogram(names::REQUEST_DURATION), [(request, (1, 0.02))].into());
}

#[tokio::test(start_paused = true)]
async fn success_on_the_third_attempt() {
    let t = Telemetry::new();
    let calls = Cell::new(0);
    let result = op(&calls, 3)
        .retry(policy(5))
        .classify(by_status)
        .observe(t.observer.clone())
        .dependency("db")
        .into_future()
        .instrument(tracing::info_span!("caller"))
        .await;
    assert_eq!(result.unwrap(), 3);

    // Three sibling attempt spans under the caller, and no other span. Without
    // an operation name, they are named after the dependency.
    let caller = t.span("caller");
    assert_eq!(t.finished_spans().len(), 4, "the caller's span and three attempts");
    let attempts = t.children(caller.span_context.span_id());
    assert!(attempts.iter().all(|s| s.name == "db" && span_attr(s, names::OPERATION).is_none()));
    let summary: Vec<_> = attempts
        .iter()
        .map(|s| {
            (
                s.span_kind.clone(),
                span_attr(s, names::ATTEMPT),
                span_attr(s, names::ERROR_TYPE),
                s.status.clone(),
            )
        })
        .collect();
    let failed = |n: &str| (SpanKind::Client, Some(n.to_owned()), Some("503".to_owned()), Status::error(""));
    assert_eq!(
        summary,
        [failed("1"), failed("2"), (SpanKind::Client, Some("3".to_owned()), None, Status::Unset)]
    );
    assert!(attempts.iter().all(|s| s.span_context.trace_id() == caller.span_context.trace_id()));

    // One backoff event per wait, on the attempt that failed, whose own ids it
    // carries; the attempt that succeeded has none.
    let events: Vec<_> = attempts
        .iter()
        .flat_map(|attempt| {
            let ids =
                (attempt.span_context.trace_id().to_string(), attempt.span_context.span_id().to_string());
            attempt.events.iter().map(move |e| (e.name.to_string(), to_attrs(&e.attributes), ids.clone()))
        })
        .collect();
    assert_eq!(attempts[2].events.len(), 0);
    let event = |attempt: &str, delay: &str| {
        (
            names::BACKOFF_EVENT.to_owned(),
            attrs(&[
                (names::DEPENDENCY, "db"),
                (names::ATTEMPT, attempt),
                ("retryscope.max_attempts", "5"),
                (names::RETRY_REASON, "503"),
                ("http.response.status_code", "503"),
                ("delay_ms", delay),
                (names::DELAY_SOURCE, "policy"),
            ]),
        )
    };
    let events: Vec<_> = events
        .into_iter()
        .map(|(name, mut a, (trace, span))| {
            // The bridge adds the event's source location and level; they are not ours.
            a.retain(|k, _| !k.starts_with("code.") && k != "level" && k != "target");
            // The event names the attempt it is an event of.
            assert_eq!((a.remove("trace_id"), a.remove("span_id")), (Some(trace), Some(span)));
            (name, a)
        })
        .collect();
    assert_eq!(events, [event("2", "100"), event("3", "200")]);

    let db = (names::DEPENDENCY, "db");
    assert_eq!(t.counter(names::REQUESTS), [(attrs(&[db]), 1)].into());
    assert_eq!(t.counter(names::RETRIES), [(attrs(&[db, (names::RETRY_REASON, "503")]), 2)].into());
    assert_eq!(
        t.histogram(names::ATTEMPT_DURATION),
        [
            (attrs(&[db, (names::ATTEMPT, "1"), (names::ERROR_TYPE, "503")]), (1, 0.02)),
            (attrs(&[db, (names::ATTEMPT, "2"), (names::ERROR_TYPE, "503")]), (1, 0.02)),
            (attrs(&[db, (names::ATTEMPT, "3")]), (1, 0.02)),
        ]
        .into()
    );
    let (count, sum) = t.histogram(names::BACKOFF_DELAY)[&attrs(&[db, (names::DELAY_SOURCE, "policy")])];
    assert_eq!(count, 2);
    assert!((sum - 0.3).abs() < 1e-9, "{sum}");
    let request = t.histogram(names::REQUEST_DURATION);
    let (count, sum) = request[&attrs(&[db, (names::OUTCOME, "success"), (names::ATTEMPTS, "3")])];
    assert_eq!(count, 1);
    assert!((sum - 0.36).abs() < 1e-9, "3 × 20 ms attempts + 300 ms of waits: {sum}");
}

#[tokio::test(start_paused = true)]
async fn exhausted() {
    let t = Telemetry::new();
    let calls = Cell::new(0);
    let err = op(&calls, u32::MAX)
        .retry(policy(3))
        .classify(by_status)
        .observe(t.observer.clone())
        .dependency("db")
        .await
        .unwrap_err();
    assert_eq!(err.reason(), StopReason::AttemptsExhausted);

    // Called outside any span: each attempt is the root of its own trace, as
    // in the HTTP conventions' example with no trace started upfront.
    let attempts = t.finished_spans();
    assert_eq!(attempts.len(), 3);
    assert!(attempts.iter().all(|s| s.status == Status::error("") && s.parent_span_id == SpanId::INVALID));
    assert_eq!(
        attempts.iter().map(|s| s.span_context.trace_id()).collect::<std::collections::HashSet<_>>().len(),
        3
    );
    // The outcome is the give-up event's, on the last attempt.
    let events = |s: &opentelemetry_sdk::trace::SpanData| -> Vec<String> {
        s.events.iter().map(|e| e.name.to_string()).collect()
    };
    assert_eq!(events(&attempts[0]), [names::BACKOFF_EVENT]);
    assert_eq!(events(&attempts[1]), [names::BACKOFF_EVENT]);
    assert_eq!(events(&attempts[2]), [names::GAVE_UP_EVENT]);
    let gave_up = to_attrs(&attempts[2].events[0].attributes);
    assert_eq!(gave_up[names::OUTCOME], "exhausted");
    assert_eq!(gave_up["retryscope.stop_reason"], "attempts_exhausted");
    assert_eq!(gave_up[names::ATTEMPTS], "3");

    let db = (names::DEPENDENCY, "db");
    assert_eq!(t.counter(names::RETRIES), [(attrs(&[db, (names::RETRY_REASON, "503")]), 2)].into());
    assert!(t.counter(names::THROTTLED).is_empty(), "exhaustion is not throttling");
    let request = attrs(&[db, (names::OUTCOME, "exhausted"), (names::ATTEMPTS, "3")]);
    assert_eq!(t.histogram(names::REQUEST_DURATION)[&request].0, 1);
}

#[tokio::test(start_paused = true)]
async fn permanent_error() {
    let t = Telemetry::new();
    let err = (|| async { Err::<(), u16>(404) })
        .retry(policy(3))
        .classify(by_status_unit)
        .observe(t.observer.clone())
        .dependency("api")
        .await
        .unwrap_err();
    assert_eq!(err.reason(), StopReason::Permanent);

    // The one attempt says it all: a first attempt's permanent failure is the
    // caller's answer, not a give-up, and has no event.
    let attempt = t.span("api");
    assert_eq!(span_attr(&attempt, names::ERROR_TYPE).as_deref(), Some("404"));
    assert_eq!(attempt.status, Status::error(""));
    assert!(attempt.events.is_empty());

    let api = (names::DEPENDENCY, "api");
    assert!(t.counter(names::RETRIES).is_empty());
    assert_eq!(
        t.histogram(names::ATTEMPT_DURATION).into_keys().collect::<Vec<_>>(),
        [attrs(&[api, (names::ATTEMPT, "1"), (names::ERROR_TYPE, "404")])]
    );
    let request = attrs(&[api, (names::OUTCOME, "failure"), (names::ATTEMPTS, "1")]);
    assert_eq!(t.histogram(names::REQUEST_DURATION)[&request].0, 1);
}

fn by_status_unit(result: &Result<(), u16>) -> Verdict {
    match result {
        Ok(()) => Verdict::Success,
        Err(code) if *code >= 500 => Verdict::retryable(ErrorType::Status(*code)),
        Err(code) => Verdict::permanent(ErrorType::Status(*code)),
    }
}

#[tokio::test(start_paused = true)]
async fn throttled_by_the_budget() {
    let t = Telemetry::new();
    let err = (|| async { Err::<(), u16>(503) })
        .retry(policy(3))
        .classify(by_status_unit)
        .dependency(&Dependency::new("db").with_budget(Refuse))
        .observe(t.observer.clone())
        .await
        .unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (StopReason::BudgetExhausted, 1));

    let attempt = t.span("db");
    let gave_up = to_attrs(&attempt.events[0].attributes);
    assert_eq!(
        (gave_up[names::OUTCOME].as_str(), gave_up["retryscope.stop_reason"].as_str()),
        ("throttled", "budget_exhausted")
    );
    let db = (names::DEPENDENCY, "db");
    assert_eq!(
        t.counter(names::THROTTLED),
        [(attrs(&[db, (names::THROTTLE_REASON, "budget"), (names::PRIORITY, "critical")]), 1)].into()
    );
    assert!(t.counter(names::RETRIES).is_empty(), "the refused retry never started");
    let request = attrs(&[db, (names::OUTCOME, "throttled"), (names::ATTEMPTS, "1")]);
    assert_eq!(t.histogram(names::REQUEST_DURATION)[&request].0, 1);
}

#[tokio::test(start_paused = true)]
async fn refused_by_an_open_breaker() {
    let t = Telemetry::new();
    let breaker = CircuitBreaker::builder()
        .min_calls(1)
        .failure_ratio(0.5)
        .cool_down(Duration::from_secs(60))
        .build()
        .expect("valid breaker");
    // One transient failure opens it.
    let _ = (|| async { Err::<(), u16>(503) })
        .retry(policy(1))
        .classify(by_status_unit)
        .dependency(&Dependency::new("db").with_breaker(breaker.clone()))
        .await;
    let err = (|| async { Ok::<(), u16>(()) })
        .retry(policy(3))
        .classify(by_status_unit)
        .dependency(&Dependency::new("db").with_breaker(breaker.clone()))
        .observe(t.observer.clone())
        .into_future()
        .instrument(tracing::info_span!("caller"))
        .await
        .unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (StopReason::CircuitOpen, 0));

    // No attempt ran: the give-up event is the caller's span's.
    let caller = t.span("caller");
    assert_eq!(t.finished_spans().len(), 1, "no attempt span");
    assert_eq!(caller.events.len(), 1);
    let gave_up = to_attrs(&caller.events[0].attributes);
    assert_eq!(caller.events[0].name, names::GAVE_UP_EVENT);
    assert_eq!(gave_up[names::OUTCOME], "throttled");
    assert_eq!(gave_up[names::ATTEMPTS], "0");
    let db = (names::DEPENDENCY, "db");
    assert_eq!(t.counter(names::REQUESTS), [(attrs(&[db]), 1)].into());
    assert_eq!(
        t.counter(names::THROTTLED),
        [(attrs(&[db, (names::THROTTLE_REASON, "circuit_open"), (names::PRIORITY, "critical")]), 1)].into()
    );
    // Counted as refused, not as an operation with 0 attempts, which the
    // attempt figures would read as one that needed a retry.
    assert_eq!(
        t.counter(names::REFUSED),
        [(
            attrs(&[
                db,
                (names::OUTCOME, "throttled"),
                (names::THROTTLE_REASON, "circuit_open"),
                (names::PRIORITY, "critical")
            ]),
            1
        )]
        .into()
    );
    assert!(t.histogram(names::REQUEST_DURATION).is_empty(), "no operation with an attempt figure");
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_wait_reports_its_source() {
    let t = Telemetry::new();
    let calls = Cell::new(0);
    let result = op(&calls, 2)
        .retry(policy(3))
        .classify(|r: &Result<u32, u16>| match r {
            Ok(_) => Verdict::Success,
            Err(code) => Verdict::Retryable {
                error: ErrorType::Status(*code),
                hint: Some(Hint::retry_after(ms(1_500))),
            },
        })
        .observe(t.observer.clone())
        .dependency("db")
        .await;
    assert_eq!(result.unwrap(), 2);

    let db = (names::DEPENDENCY, "db");
    let delays = t.histogram(names::BACKOFF_DELAY);
    // Retry-After is a floor with up to a fifth of it on top: 1.5 s to 1.8 s.
    let (count, seconds) = delays[&attrs(&[db, (names::DELAY_SOURCE, "retry_after")])];
    assert!(count == 1 && (1.5..=1.8).contains(&seconds), "{delays:?}");
    let failed = &t.finished_spans()[0];
    assert_eq!(span_attr(failed, names::ATTEMPT).as_deref(), Some("1"));
    let event = to_attrs(&failed.events[0].attributes);
    assert_eq!(event[names::DELAY_SOURCE], "retry_after");
    let delay_ms: u64 = event["delay_ms"].parse().expect("whole milliseconds");
    assert_eq!(delay_ms, (seconds * 1e3) as u64);
}

#[tokio::test(start_paused = true)]
async fn instruments_have_the_contract_names_units_and_buckets() {
    let t = Telemetry::new();
    let calls = Cell::new(0);
    let _ = op(&calls, 2)
        .retry(policy(3))
        .classify(by_status)
        .dependency(&Dependency::new("test").with_budget(Refuse))
        .observe(t.observer.clone())
        .await;
    let _ = op(&calls, 0).retry(policy(3)).classify(by_status).observe(t.observer.clone()).await;
    let units = t.units();
    let expected = [
        (names::REQUESTS, "{request}"),
        (names::THROTTLED, "{retry}"),
        (names::ATTEMPT_DURATION, "s"),
        (names::REQUEST_DURATION, "s"),
    ];
    for (name, unit) in expected {
        assert_eq!(units.get(name).map(String::as_str), Some(unit), "{name}");
    }
    let calls = Cell::new(0);
    let _ = op(&calls, 2).retry(policy(3)).classify(by_status).observe(t.observer.clone()).await;
    let units = t.units();
    assert_eq!(units.get(names::RETRIES).map(String::as_str), Some("{retry}"));
    assert_eq!(units.get(names::BACKOFF_DELAY).map(String::as_str), Some("s"));
    assert_eq!(units.len(), 6, "{units:?}");
    for histogram in [names::ATTEMPT_DURATION, names::REQUEST_DURATION, names::BACKOFF_DELAY] {
        let bounds = t.bounds(histogram);
        assert!(!bounds.is_empty());
        for b in bounds {
            assert_eq!(
                b,
                [
                    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0,
                    30.0, 60.0
                ]
            );
        }
    }
}

#[test]
fn attribute_values_stay_bounded() {
    let t = Telemetry::new();
    let info = OperationInfo {
        dependency: "db",
        operation: None,
        max_attempts: 2,
        hedged: false,
        priority: retryscope::overload::Priority::Critical,
    };
    let mut operation = t.observer.start(&info);
    // An engine never exceeds the limit, but the attribute must not grow if one did.
    let scope = operation.attempt_started(&AttemptStart {
        number: 7,
        retry_of: Some(ErrorType::Status(999)),
        hedge: false,
        limit: None,
    });
    operation.attempt_finished(
        scope,
        &AttemptEnd { number: 7, duration: ms(5), error: Some(ErrorType::Status(42)), hedge: None },
    );
    operation.finished(&Finish { outcome: Outcome::Exhausted, reason: None, attempts: 7, duration: ms(5) });

    let db = (names::DEPENDENCY, "db");
    assert_eq!(t.counter(names::RETRIES), [(attrs(&[db, (names::RETRY_REASON, "_OTHER")]), 1)].into());
    let attempt = attrs(&[db, (names::ATTEMPT, "2"), (names::ERROR_TYPE, "_OTHER")]);
    assert_eq!(t.histogram(names::ATTEMPT_DURATION)[&attempt].0, 1);
    let request = attrs(&[db, (names::OUTCOME, "exhausted"), (names::ATTEMPTS, "2")]);
    assert_eq!(t.histogram(names::REQUEST_DURATION)[&request].0, 1);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_operation_is_cancelled() {
    let t = Telemetry::new();
    let slow = (|| async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok::<(), u16>(())
    })
    .retry(policy(3))
    .retry_any_error()
    .observe(t.observer.clone())
    .dependency("db");
    assert!(tokio::time::timeout(ms(50), slow).await.is_err());

    let attempt = t.span("db");
    assert_eq!(span_attr(&attempt, names::ERROR_TYPE).as_deref(), Some("cancelled"));
    assert!(attempt.events.is_empty(), "the caller gave up; the operation did not");
    let request = attrs(&[(names::DEPENDENCY, "db"), (names::OUTCOME, "cancelled"), (names::ATTEMPTS, "1")]);
    assert_eq!(t.histogram(names::REQUEST_DURATION)[&request].0, 1);
}

#[tokio::test(start_paused = true)]
async fn code_inside_an_attempt_runs_in_the_attempt_span() {
    let t = Telemetry::new();
    let seen = Cell::new(None);
    let _ = (|| {
        seen.set(tracing::Span::current().metadata().map(|m| m.name()));
        async { Ok::<(), u16>(()) }
    })
    .retry(policy(1))
    .retry_any_error()
    .observe(t.observer.clone())
    .await;
    assert_eq!(seen.get(), Some("retryscope.attempt"), "the attempt span is current inside the attempt");
    assert_eq!(t.span("unknown").span_kind, SpanKind::Client);
}

#[tokio::test(start_paused = true)]
async fn integrations_can_shape_attempt_spans() {
    let t = Telemetry::new();
    let observer = t.observer.clone().with_attempt_spans(|info: &retryscope_otel::AttemptInfo<'_>| {
        tracing::info_span!(
            target: "retryscope",
            parent: info.parent,
            "http.attempt",
            otel.name = "GET",
            otel.kind = "client",
            retryscope.attempt = info.attempt_value(),
            http.response.status_code = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        )
    });
    let calls = Cell::new(0);
    let _ = (|| {
        calls.set(calls.get() + 1);
        let code: u16 = if calls.get() == 1 { 503 } else { 200 };
        tracing::Span::current().record("http.response.status_code", code);
        async move { if code == 200 { Ok(()) } else { Err(code) } }
    })
    .retry(policy(2))
    .classify(by_status_unit)
    .observe(observer)
    .dependency("api.example.com")
    .into_future()
    .instrument(tracing::info_span!("caller"))
    .await;

    let attempts = t.children(t.span("caller").span_context.span_id());
    let summary: Vec<_> = attempts
        .iter()
        .map(|s| {
            (
                s.name.to_string(),
                s.span_kind.clone(),
                span_attr(s, "http.response.status_code"),
                span_attr(s, names::ERROR_TYPE),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("GET".into(), SpanKind::Client, Some("503".into()), Some("503".into())),
            ("GET".into(), SpanKind::Client, Some("200".into()), None),
        ]
    );
}

#[test]
fn gauges_report_breaker_state_and_budget() {
    let t = Telemetry::new();
    let meter = opentelemetry::metrics::MeterProvider::meter(&t.meter_provider, "gauges");
    let db = Arc::new(Dependency::new("db").with_breaker(CircuitBreaker::default()).with_budget(Refuse));
    retryscope_otel::publish_guard_gauges(&meter, &db);
    let cache = Arc::new(Dependency::new("cache").with_breaker(opened()));
    retryscope_otel::publish_guard_gauges(&meter, &cache);

    let (unit, points) = t
        .with_metric(names::BREAKER_STATE, |m| match m.data() {
            AggregatedMetrics::I64(MetricData::Gauge(g)) => (
                m.unit().to_owned(),
                g.data_points().map(|p| (to_attrs(p.attributes()), p.value())).collect::<BTreeMap<_, _>>(),
            ),
            other => panic!("not an i64 gauge: {other:?}"),
        })
        .expect("breaker gauge");
    assert_eq!(unit, "{state}");
    assert_eq!(
        points,
        [(attrs(&[(names::DEPENDENCY, "cache")]), 2), (attrs(&[(names::DEPENDENCY, "db")]), 0)].into()
    );
    let (unit, points) = t
        .with_metric(names::BUDGET_AVAILABLE, |m| match m.data() {
            AggregatedMetrics::F64(MetricData::Gauge(g)) => (
                m.unit().to_owned(),
                g.data_points().map(|p| (to_attrs(p.attributes()), p.value())).collect::<Vec<_>>(),
            ),
            other => panic!("not an f64 gauge: {other:?}"),
        })
        .expect("budget gauge");
    assert_eq!(unit, "{retry}");
    assert_eq!(points, [(attrs(&[(names::DEPENDENCY, "db")]), 0.0)]);
}

/// A breaker that has opened: its first failure opens it.
fn opened() -> CircuitBreaker {
    let breaker = CircuitBreaker::builder().min_calls(1).failure_ratio(0.5).build().expect("valid breaker");
    breaker.try_acquire().expect("closed").failure();
    breaker
}

#[test]
fn the_overflow_sets_of_a_built_in_gauge_make_one_series_the_worst_of_them() {
    let t = Telemetry::new();
    let meter = opentelemetry::metrics::MeterProvider::meter(&t.meter_provider, "gauges");
    let limit =
        |n| ConcurrencyLimiter::new(Aimd::builder().initial_limit(n).min_limit(1).build().expect("valid"));
    let sets = [
        Dependency::new("db").with_breaker(CircuitBreaker::default()).with_concurrency_limit(limit(5)),
        Dependency::new(OVERFLOW).with_breaker(CircuitBreaker::default()).with_concurrency_limit(limit(7)),
        Dependency::new(OVERFLOW).with_breaker(opened()).with_concurrency_limit(limit(3)),
        Dependency::new(OVERFLOW).with_breaker(CircuitBreaker::default()).with_concurrency_limit(limit(9)),
    ]
    .map(Arc::new);
    let gauges = sets[0].published();
    retryscope_otel::register_guard_gauges(&meter, move || sets.to_vec(), &gauges);

    let states = t
        .with_metric(names::BREAKER_STATE, |m| match m.data() {
            AggregatedMetrics::I64(MetricData::Gauge(g)) => {
                g.data_points().map(|p| (to_attrs(p.attributes()), p.value())).collect::<BTreeMap<_, _>>()
            }
            other => panic!("not an i64 gauge: {other:?}"),
        })
        .expect("breaker gauge");
    assert_eq!(
        states,
        [(attrs(&[(names::DEPENDENCY, "db")]), 0), (attrs(&[(names::DEPENDENCY, OVERFLOW)]), 2)].into(),
        "one _OTHER series: the most open of their breakers"
    );
    let limits = t
        .with_metric(names::LIMIT, |m| match m.data() {
            AggregatedMetrics::U64(MetricData::Gauge(g)) => {
                g.data_points().map(|p| (to_attrs(p.attributes()), p.value())).collect::<BTreeMap<_, _>>()
            }
            other => panic!("not a u64 gauge: {other:?}"),
        })
        .expect("limit gauge");
    assert_eq!(
        limits,
        [(attrs(&[(names::DEPENDENCY, "db")]), 5), (attrs(&[(names::DEPENDENCY, OVERFLOW)]), 3)].into(),
        "one _OTHER series: the lowest of their limits"
    );
}

/// With operation spans, every call keeps today's tree: an INTERNAL span named
/// after the operation under the caller's span, the attempts under it, and the
/// retry log's events on it.
#[tokio::test(start_paused = true)]
async fn operation_spans_put_one_internal_span_above_the_attempts() {
    let t = Telemetry::new();
    let calls = Cell::new(0);
    let result = op(&calls, 2)
        .retry(policy(3))
        .classify(by_status)
        .observe(t.observer.clone().with_operation_spans())
        .dependency("db")
        .operation("load_user")
        .into_future()
        .instrument(tracing::info_span!("caller"))
        .await;
    assert_eq!(result.unwrap(), 2);

    let caller = t.span("caller");
    let operation = t
        .finished_spans()
        .into_iter()
        .find(|s| s.span_kind == SpanKind::Internal && s.name == "load_user")
        .expect("an operation span");
    assert_eq!(operation.parent_span_id, caller.span_context.span_id(), "child of the caller's span");
    assert_eq!(span_attr(&operation, names::DEPENDENCY).as_deref(), Some("db"));
    assert_eq!(span_attr(&operation, names::OPERATION).as_deref(), Some("load_user"));
    assert_eq!(span_attr(&operation, names::ATTEMPTS).as_deref(), Some("2"));
    assert_eq!(span_attr(&operation, names::OUTCOME).as_deref(), Some("success"));
    assert_eq!(operation.status, Status::Unset);
    let events: Vec<_> = operation.events.iter().map(|e| e.name.to_string()).collect();
    assert_eq!(events, [names::BACKOFF_EVENT]);

    let attempts = t.children(operation.span_context.span_id());
    let summary: Vec<_> = attempts
        .iter()
        .map(|s| (s.span_kind.clone(), span_attr(s, names::ATTEMPT), s.events.len()))
        .collect();
    assert_eq!(summary, [(SpanKind::Client, Some("1".into()), 0), (SpanKind::Client, Some("2".into()), 0)]);
    assert!(t.children(caller.span_context.span_id()).iter().all(|s| s.span_kind == SpanKind::Internal));
}

#[tokio::test(start_paused = true)]
async fn an_operation_span_records_how_the_operation_ended() {
    let t = Telemetry::new();
    let calls = Cell::new(0);
    let err = op(&calls, u32::MAX)
        .retry(policy(3))
        .classify(by_status)
        .observe(t.observer.clone().with_operation_spans())
        .dependency("db")
        .await
        .unwrap_err();
    assert_eq!(err.reason(), StopReason::AttemptsExhausted);

    // Without an operation name, `retry {dependency}`.
    let operation = t.span("retry db");
    assert_eq!(operation.span_kind, SpanKind::Internal);
    assert_eq!(span_attr(&operation, names::OUTCOME).as_deref(), Some("exhausted"));
    assert_eq!(span_attr(&operation, names::ATTEMPTS).as_deref(), Some("3"));
    assert_eq!(operation.status, Status::error(""));
    let events: Vec<_> = operation.events.iter().map(|e| e.name.to_string()).collect();
    assert_eq!(events, [names::BACKOFF_EVENT, names::BACKOFF_EVENT, names::GAVE_UP_EVENT]);
    let attempts = t.children(operation.span_context.span_id());
    assert_eq!(attempts.len(), 3);
    assert!(attempts.iter().all(|s| s.status == Status::error("") && s.events.is_empty()));
    assert!(attempts.iter().all(|s| s.span_context.trace_id() == operation.span_context.trace_id()));
}

#[tokio::test(start_paused = true)]
async fn with_the_retry_log_off_a_failed_attempt_has_no_events() {
    let t = Telemetry::new();
    let calls = Cell::new(0);
    let _ = op(&calls, 2)
        .retry(policy(3))
        .classify(by_status)
        .observe(t.observer.clone().no_retry_log())
        .dependency("db")
        .await;
    let spans = t.finished_spans();
    assert_eq!(spans.len(), 2);
    assert!(spans.iter().all(|s| s.events.is_empty()));
    assert_eq!(span_attr(&spans[0], names::ERROR_TYPE).as_deref(), Some("503"));
}

/// Attempt spans named "attempt" that say whether an attempt's closure runs in
/// them (`BUILDS_IN_SPAN`, the const parameter).
#[derive(Clone)]
struct Builds<const IN_SPAN: bool>;

impl<const IN_SPAN: bool> retryscope_otel::MakeAttemptSpan for Builds<IN_SPAN> {
    fn make_span(&self, info: &retryscope_otel::AttemptInfo<'_>) -> tracing::Span {
        tracing::info_span!(parent: info.parent, "attempt")
    }

    const BUILDS_IN_SPAN: bool = IN_SPAN;
}

/// The name of the span current where an attempt is built and where it is
/// polled, for one call made inside a span named "caller".
async fn current_spans<const IN_SPAN: bool>(t: &Telemetry) -> (Option<&'static str>, Option<&'static str>) {
    let name = || tracing::Span::current().metadata().map(|m| m.name());
    let built = Cell::new(None);
    let result = (|| {
        built.set(name());
        async move { Ok::<_, u16>(name()) }
    })
    .retry(policy(1))
    .classify(|_: &Result<_, u16>| Verdict::Success)
    .observe(t.observer.clone().with_attempt_spans(Builds::<IN_SPAN>))
    .dependency("db")
    .into_future()
    .instrument(tracing::info_span!("caller"))
    .await;
    (built.get(), result.expect("one attempt succeeds"))
}

#[tokio::test(start_paused = true)]
async fn an_attempt_is_built_in_its_span_unless_the_spans_say_otherwise() {
    let t = Telemetry::new();
    // By default the closure sees the attempt's span, as the future's polls do.
    assert_eq!(current_spans::<true>(&t).await, (Some("attempt"), Some("attempt")));
    // A maker whose closures only prepare their future (the HTTP
    // integrations') spares the span's enter and exit around the build: the
    // closure sees the caller's span, the polls still the attempt's.
    assert_eq!(current_spans::<false>(&t).await, (Some("caller"), Some("attempt")));
}
