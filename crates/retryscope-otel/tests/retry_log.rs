//! The retry log, read as a service's log pipeline reads it: a real `tracing`
//! subscriber with the tracing-opentelemetry layer, events captured with every
//! field, against real connection failures on loopback.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use retryscope::dependency::Dependency;
use retryscope::{ErrorType, Verdict};
use retryscope::{Jitter, Policy, Retryable};
use retryscope_otel::{OtelObserver, RetryLog, names};
use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::Instrument;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// One captured event: its level and every field, as text.
#[derive(Debug, Clone)]
struct Event {
    level: tracing::Level,
    fields: BTreeMap<String, String>,
}

impl Event {
    fn get(&self, field: &str) -> Option<&str> {
        self.fields.get(field).map(String::as_str)
    }
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Event>>>);

impl Capture {
    fn events(&self, message: &str) -> Vec<Event> {
        let events = self.0.lock().map(|e| e.clone()).unwrap_or_default();
        events.into_iter().filter(|e| e.get("message") == Some(message)).collect()
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != names::TARGET {
            return;
        }
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        if let Ok(mut events) = self.0.lock() {
            events.push(Event { level: *event.metadata().level(), fields });
        }
    }
}

/// A service's own subscriber: tracing-opentelemetry on an SDK tracer, plus
/// the log capture standing for its log output.
struct Service {
    spans: InMemorySpanExporter,
    log: Capture,
    _guard: tracing::subscriber::DefaultGuard,
    _provider: SdkTracerProvider,
}

impl Service {
    fn start() -> Self {
        let spans = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
        let log = Capture::default();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("service")))
            .with(log.clone());
        Self {
            spans,
            log,
            _guard: retryscope_test_support::telemetry::set_default(subscriber),
            _provider: provider,
        }
    }

    /// The finished attempt spans (CLIENT children of `retry …`), in order.
    fn attempts(&self) -> Vec<SpanData> {
        let mut spans: Vec<_> = self
            .spans
            .get_finished_spans()
            .unwrap_or_default()
            .into_iter()
            .filter(|s| s.span_kind == opentelemetry::trace::SpanKind::Client)
            .collect();
        spans.sort_by_key(|s| s.start_time);
        spans
    }
}

/// A loopback port nothing listens on: connecting is refused at once.
fn closed_port() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address")
}

fn policy(attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(40))
        .jitter(Jitter::None)
        .build()
        .expect("valid policy")
}

#[tokio::test(start_paused = true)]
async fn every_retry_and_the_give_up_are_logged_with_the_attempt_that_failed() {
    let service = Service::start();
    let address = closed_port();
    let result = (|| tokio::net::TcpStream::connect(address))
        .retry(policy(3))
        .observe(OtelObserver::global())
        .dependency("ledger")
        .operation("post")
        .await;
    let error = result.expect_err("nothing listens");
    assert_eq!(error.attempts(), 3);

    let attempts = service.attempts();
    assert_eq!(attempts.len(), 3, "{attempts:#?}");
    let retries = service.log.events(names::BACKOFF_EVENT);
    assert_eq!(retries.len(), 2, "{retries:#?}");
    for (n, (retry, failed)) in retries.iter().zip(&attempts).enumerate() {
        assert_eq!(retry.level, tracing::Level::INFO);
        let next = (n + 2).to_string();
        let expected = [
            ("retryscope.dependency", "ledger"),
            ("retryscope.operation", "post"),
            ("retryscope.attempt", next.as_str()),
            ("retryscope.max_attempts", "3"),
            ("retryscope.retry.reason", "connect"),
            ("retryscope.delay.source", "policy"),
        ];
        for (field, value) in expected {
            assert_eq!(retry.get(field), Some(value), "{field} of {retry:?}");
        }
        assert_eq!(retry.get("delay_ms"), Some(if n == 0 { "10" } else { "20" }));
        // The line leads to the span of the attempt that failed.
        assert_eq!(retry.get("trace_id"), Some(failed.span_context.trace_id().to_string().as_str()));
        assert_eq!(retry.get("span_id"), Some(failed.span_context.span_id().to_string().as_str()));
        assert_eq!(retry.get("http.response.status_code"), None, "not an HTTP failure");
    }

    let gave_up = service.log.events(names::GAVE_UP_EVENT);
    assert_eq!(gave_up.len(), 1, "{gave_up:#?}");
    let gave_up = &gave_up[0];
    assert_eq!(gave_up.level, tracing::Level::WARN);
    let last = &attempts[2];
    let expected = [
        ("retryscope.dependency", "ledger"),
        ("retryscope.operation", "post"),
        ("retryscope.attempts", "3"),
        ("retryscope.max_attempts", "3"),
        ("retryscope.outcome", "exhausted"),
        ("retryscope.stop_reason", "attempts_exhausted"),
        ("error.type", "connect"),
    ];
    for (field, value) in expected {
        assert_eq!(gave_up.get(field), Some(value), "{field} of {gave_up:?}");
    }
    // 10 ms + 20 ms of waits on the paused clock; the refused connects take no time.
    assert_eq!(gave_up.get("duration_ms"), Some("30"));
    assert_eq!(gave_up.get("trace_id"), Some(last.span_context.trace_id().to_string().as_str()));
    assert_eq!(gave_up.get("span_id"), Some(last.span_context.span_id().to_string().as_str()));
}

#[tokio::test(start_paused = true)]
async fn the_status_is_a_field_of_its_own_on_the_retry_and_the_give_up() {
    let service = Service::start();
    let _ = (|| async { Err::<(), _>(503u16) })
        .retry(policy(2))
        .classify(|r: &Result<(), u16>| match r {
            Ok(()) => Verdict::Success,
            Err(code) => Verdict::retryable(ErrorType::Status(*code)),
        })
        .observe(OtelObserver::global())
        .dependency("payments")
        .await;
    let retry = &service.log.events(names::BACKOFF_EVENT)[0];
    assert_eq!(
        (retry.get("http.response.status_code"), retry.get("retryscope.retry.reason")),
        (Some("503"), Some("503"))
    );
    let gave_up = &service.log.events(names::GAVE_UP_EVENT)[0];
    assert_eq!(gave_up.get("http.response.status_code"), Some("503"));
}

#[tokio::test(start_paused = true)]
async fn a_grpc_code_is_logged_by_number() {
    let service = Service::start();
    let _ = (|| async { Err::<(), _>("unavailable") })
        .retry(policy(2))
        .classify(|r: &Result<(), &str>| match r {
            Ok(()) => Verdict::Success,
            Err(_) => Verdict::retryable(ErrorType::Kind("UNAVAILABLE")),
        })
        .observe(OtelObserver::global())
        .await;
    let retry = &service.log.events(names::BACKOFF_EVENT)[0];
    assert_eq!(retry.get("rpc.grpc.status_code"), Some("14"));
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_that_fails_for_good_is_an_answer_not_a_give_up() {
    let service = Service::start();
    let result = (|| async { Err::<(), _>(std::io::Error::from(std::io::ErrorKind::PermissionDenied)) })
        .retry(policy(3))
        .observe(OtelObserver::global())
        .await;
    assert_eq!(result.expect_err("denied").attempts(), 1);
    assert!(service.log.events(names::GAVE_UP_EVENT).is_empty());
    assert!(service.log.events(names::BACKOFF_EVENT).is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_log_alone_stays_on_without_spans_or_metrics_and_names_the_callers_trace() {
    let service = Service::start();
    let address = closed_port();
    let request = tracing::info_span!("handle request");
    let caller = {
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        request.context().span().span_context().clone()
    };
    let _ = tracing::Instrument::instrument(
        (|| tokio::net::TcpStream::connect(address))
            .retry(policy(2))
            .observe(RetryLog::new())
            .dependency("ledger")
            .into_future(),
        request,
    )
    .await;
    assert!(service.attempts().is_empty(), "no attempt spans without the OtelObserver");
    let retry = &service.log.events(names::BACKOFF_EVENT)[0];
    let gave_up = &service.log.events(names::GAVE_UP_EVENT)[0];
    for event in [retry, gave_up] {
        assert_eq!(event.get("retryscope.dependency"), Some("ledger"));
        assert_eq!(event.get("trace_id"), Some(caller.trace_id().to_string().as_str()));
        assert_eq!(event.get("span_id"), Some(caller.span_id().to_string().as_str()));
    }
    assert_eq!(gave_up.get("retryscope.stop_reason"), Some("attempts_exhausted"));
}

/// A call the pacer holds: an INFO line that says why and how long, an event
/// of the caller's span (no attempt has run yet); a call it refuses gives up as
/// `rate_limited`.
#[tokio::test(start_paused = true)]
async fn a_held_call_is_logged_and_a_refused_one_gives_up_rate_limited() {
    use retryscope::pace::{PaceSignal, Quota};
    let service = Service::start();
    let pacer = retryscope::Pacer::new();
    pacer.learn(&PaceSignal {
        quota: Some(Quota { remaining: 0, reset: Duration::from_secs(2), policy: None }),
        ..PaceSignal::none()
    });
    let ok = (|| async { Ok::<_, std::io::Error>(()) })
        .retry(policy(2))
        .dependency(&Dependency::new("quota").with_pacer(pacer.clone()))
        .observe(OtelObserver::global())
        .into_future()
        .instrument(tracing::info_span!("caller"))
        .await;
    assert!(ok.is_ok());
    let held = service.log.events(names::HELD_EVENT);
    assert_eq!(held.len(), 1, "{held:#?}");
    assert_eq!(held[0].level, tracing::Level::INFO);
    assert_eq!(held[0].get("retryscope.dependency"), Some("quota"));
    assert_eq!(held[0].get("retryscope.attempt"), Some("1"));
    assert_eq!(held[0].get("retryscope.pace.source"), Some("rate_limit"));
    let held_ms: u64 = held[0].get("retryscope.pace.held_ms").and_then(|v| v.parse().ok()).expect("held_ms");
    assert!((2_000..=2_400).contains(&held_ms), "{held_ms}");
    let caller = service
        .spans
        .get_finished_spans()
        .unwrap_or_default()
        .into_iter()
        .find(|s| s.name == "caller")
        .expect("the caller's span");
    assert!(caller.events.iter().any(|e| e.name == names::HELD_EVENT), "{:?}", caller.events);

    pacer.learn(&PaceSignal {
        quota: Some(Quota { remaining: 0, reset: Duration::from_secs(60), policy: None }),
        ..PaceSignal::none()
    });
    let short = Policy::builder().max_attempts(2).deadline(Duration::from_secs(1)).build().expect("policy");
    let refused = (|| async { Ok::<_, std::io::Error>(()) })
        .retry(short)
        .dependency(&Dependency::new("quota").with_pacer(pacer.clone()))
        .observe(OtelObserver::global())
        .await;
    assert!(matches!(refused.map_err(|e| e.reason()), Err(retryscope::StopReason::RateLimited { .. })));
    let gave_up = service.log.events(names::GAVE_UP_EVENT);
    assert_eq!(gave_up.len(), 1, "{gave_up:#?}");
    assert_eq!(gave_up[0].get("retryscope.stop_reason"), Some("rate_limited"));
    assert_eq!(gave_up[0].get("retryscope.outcome"), Some("throttled"));
    assert_eq!(gave_up[0].get("retryscope.attempts"), Some("0"));
}

/// An attempt-span maker that knows the request's id, as the HTTP
/// integrations' do (they read it from `x-request-id`).
#[derive(Clone)]
struct WithRequestId(&'static str);

impl retryscope_otel::MakeAttemptSpan for WithRequestId {
    fn make_span(&self, info: &retryscope_otel::AttemptInfo<'_>) -> tracing::Span {
        retryscope_otel::default_attempt_span(info)
    }

    fn request_id(&self) -> Option<&str> {
        Some(self.0)
    }
}

#[tokio::test(start_paused = true)]
async fn the_request_id_the_attempt_spans_know_is_on_the_retry_and_the_give_up() {
    let service = Service::start();
    let address = closed_port();
    let _ = (|| tokio::net::TcpStream::connect(address))
        .retry(policy(2))
        .observe(OtelObserver::global().with_attempt_spans(WithRequestId("req-7f3a")))
        .dependency("ledger")
        .await;
    let retry = &service.log.events(names::BACKOFF_EVENT)[0];
    let gave_up = &service.log.events(names::GAVE_UP_EVENT)[0];
    assert_eq!(retry.get("request_id"), Some("req-7f3a"));
    assert_eq!(gave_up.get("request_id"), Some("req-7f3a"));
}

#[tokio::test(start_paused = true)]
async fn a_request_id_too_long_or_not_visible_ascii_is_not_logged() {
    let long: &'static str = Box::leak("x".repeat(names::MAX_REQUEST_ID_LEN + 1).into_boxed_str());
    for refused in [long, "two words", "line\nbreak", ""] {
        let service = Service::start();
        let address = closed_port();
        let _ = (|| tokio::net::TcpStream::connect(address))
            .retry(policy(2))
            .observe(OtelObserver::global().with_attempt_spans(WithRequestId(refused)))
            .dependency("ledger")
            .await;
        let retry = &service.log.events(names::BACKOFF_EVENT)[0];
        assert_eq!(retry.get("request_id"), None, "{refused:?}");
    }
    assert_eq!(retryscope_otel::request_id(&long[1..]), Some(&long[1..]), "128 bytes are an id");
}

/// A program that attaches OpenTelemetry contexts itself, with no
/// tracing-opentelemetry layer: the log takes the ids from the current context.
#[tokio::test(start_paused = true)]
async fn without_the_opentelemetry_layer_the_ids_come_from_the_current_context() {
    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState};
    let log = Capture::default();
    let _guard =
        retryscope_test_support::telemetry::set_default(tracing_subscriber::registry().with(log.clone()));
    let remote = SpanContext::new(
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("hex"),
        SpanId::from_hex("00f067aa0ba902b7").expect("hex"),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let _attached = opentelemetry::Context::current().with_remote_span_context(remote).attach();
    let address = closed_port();
    // The current-thread test runtime polls the call on this thread, where the
    // context is attached.
    let _ = (|| tokio::net::TcpStream::connect(address))
        .retry(policy(2))
        .observe(RetryLog::new())
        .dependency("ledger")
        .await;
    let _ = (|| tokio::net::TcpStream::connect(address))
        .retry(policy(2))
        .observe(OtelObserver::global())
        .dependency("ledger")
        .await;
    let events = [log.events(names::BACKOFF_EVENT), log.events(names::GAVE_UP_EVENT)].concat();
    assert_eq!(events.len(), 4, "{events:#?}");
    for event in &events {
        assert_eq!(event.get("trace_id"), Some("4bf92f3577b34da6a3ce929d0e0e4736"), "{event:?}");
        assert_eq!(event.get("span_id"), Some("00f067aa0ba902b7"), "{event:?}");
    }
}

/// `service` is the name the resource was built with; the observers built
/// after the setup carry it.
#[cfg(feature = "otlp")]
#[tokio::test(start_paused = true)]
async fn the_service_is_the_name_the_setup_built_its_resource_with() {
    let telemetry = retryscope_otel::OtlpConfig::default()
        .endpoint("http://127.0.0.1:4318")
        .service_name("retry-log-checkout")
        .build()
        .expect("builds without a collector");
    let service = Service::start();
    let address = closed_port();
    let _ = (|| tokio::net::TcpStream::connect(address))
        .retry(policy(2))
        .observe(OtelObserver::global())
        .dependency("ledger")
        .await;
    let _ = (|| tokio::net::TcpStream::connect(address))
        .retry(policy(2))
        .observe(RetryLog::new())
        .dependency("ledger")
        .await;
    let events =
        [service.log.events(names::BACKOFF_EVENT), service.log.events(names::GAVE_UP_EVENT)].concat();
    assert_eq!(events.len(), 4, "{events:#?}");
    for event in &events {
        assert_eq!(event.get("service"), Some("retry-log-checkout"), "{event:?}");
    }
    drop(telemetry);
}
