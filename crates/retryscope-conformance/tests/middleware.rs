//! One HTTP call with retries, for both integrations, against a real HTTP
//! server on 127.0.0.1 with tokio's paused clock (backoff waits and
//! Retry-After take no real time): which calls run again, what their spans,
//! metrics and errors say.

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry_sdk::trace::SpanData;
use retryscope::{CircuitBreaker, ErrorType, Jitter, Policy, RetryBudget, StopReason, Verdict};
use retryscope_test_support::net::closed_port;
use retryscope_test_support::telemetry::{Telemetry, attr};
use retryscope_test_support::{Reply, Server};
use retryscope_tower::{ResponseRule, RetryOptions, rule_fn};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Instrument;

mod common;

use common::{BOTH, Call, Client, Integration, Setup};

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(100))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid policy")
}

/// A client of `integration` with `policy`, reporting to `telemetry`.
fn client(integration: Integration, telemetry: &Telemetry, policy: Policy) -> Client {
    integration.client(Setup::new(policy).meter(telemetry))
}

/// The attempt (CLIENT) spans, in the order they started.
fn attempt_spans(telemetry: &Telemetry) -> Vec<SpanData> {
    let mut spans: Vec<SpanData> =
        telemetry.spans().into_iter().filter(|s| s.span_kind == SpanKind::Client).collect();
    spans.sort_by_key(|s| s.start_time);
    spans
}

/// The `url.full` an integration reports for `url`, whose query is
/// `page=2`. The two differ today: reqwest redacts the values of known
/// sensitive keys (`redact.rs`), tower every value, as it cannot know which
/// are (`spans.rs`).
fn reported(integration: Integration, url: &str) -> String {
    match integration {
        Integration::Reqwest => url.to_owned(),
        Integration::Tower => url.replace("page=2", "page=REDACTED"),
    }
}

#[tokio::test(start_paused = true)]
async fn two_503s_then_200_take_three_attempts_with_spans_and_metrics() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/flaky", [Reply::status(503), Reply::status(503), Reply::ok("fine")]);

        let started = Instant::now();
        let client = client(integration, &t, policy());
        let call = client.send(Call::get(server.url("/flaky?page=2")));
        let response = call.instrument(tracing::info_span!("caller")).await.expect("response");
        assert_eq!(response.status, 200, "{integration:?}");
        assert_eq!(response.text().await, "fine", "{integration:?}");
        assert_eq!(server.seen().len(), 3, "{integration:?}");
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(300),
            "{integration:?}: 100 ms + 200 ms of backoff"
        );

        // No operation span: three sibling CLIENT spans under the caller's span.
        let spans = t.spans();
        let caller = spans.iter().find(|s| s.name == "caller").expect("the caller's span");
        let internal = |s: &&SpanData| s.span_kind == SpanKind::Internal && s.name != "caller";
        assert!(!spans.iter().any(|s| internal(&s)), "{integration:?}: {spans:#?}");
        let dependency = format!("127.0.0.1:{}", server.addr.port());

        let mut attempts: Vec<_> = spans.iter().filter(|s| s.span_kind == SpanKind::Client).collect();
        attempts.sort_by_key(|s| attr(s, "retryscope.attempt"));
        assert_eq!(attempts.len(), 3, "{integration:?}");
        // One backoff event per retry, on the attempt that failed.
        let backoffs = |s: &SpanData| s.events.iter().filter(|e| e.name == "retryscope.backoff").count();
        assert_eq!(attempts.iter().map(|s| backoffs(s)).collect::<Vec<_>>(), [1, 1, 0], "{integration:?}");
        let port = server.addr.port().to_string();
        for (i, span) in attempts.iter().enumerate() {
            assert_eq!(span.name, "GET", "{integration:?}");
            assert_eq!(span.parent_span_id, caller.span_context.span_id(), "{integration:?}");
            assert_eq!(span.span_context.trace_id(), caller.span_context.trace_id(), "{integration:?}");
            assert_eq!(attr(span, "retryscope.attempt"), Some((i + 1).to_string()), "{integration:?}");
            let grouped = attr(span, "retryscope.dependency");
            assert_eq!(grouped, Some(dependency.clone()), "{integration:?}: what groups them");
            assert_eq!(attr(span, "http.request.method").as_deref(), Some("GET"), "{integration:?}");
            assert_eq!(attr(span, "server.address").as_deref(), Some("127.0.0.1"), "{integration:?}");
            assert_eq!(attr(span, "server.port"), Some(port.clone()), "{integration:?}");
            let url = reported(integration, &server.url("/flaky?page=2"));
            assert_eq!(attr(span, "url.full"), Some(url), "{integration:?}");
            let resend = (i > 0).then(|| i.to_string());
            assert_eq!(attr(span, "http.request.resend_count"), resend, "{integration:?}");
        }
        for failed in &attempts[..2] {
            let status = attr(failed, "http.response.status_code");
            assert_eq!(status.as_deref(), Some("503"), "{integration:?}");
            assert_eq!(attr(failed, "error.type").as_deref(), Some("503"), "{integration:?}");
            assert!(matches!(failed.status, Status::Error { .. }), "{integration:?}: {:?}", failed.status);
        }
        let status = attr(attempts[2], "http.response.status_code");
        assert_eq!(status.as_deref(), Some("200"), "{integration:?}");
        assert_eq!(attr(attempts[2], "error.type"), None, "{integration:?}");

        // Each attempt carried its own span's context on the wire.
        for (seen, span) in server.seen().iter().zip(&attempts) {
            let expected = format!("00-{}-{}-01", span.span_context.trace_id(), span.span_context.span_id());
            assert_eq!(seen.headers.get("traceparent"), Some(&expected), "{integration:?}");
        }

        let requests = t.counter("retryscope.requests", &[("retryscope.dependency", &dependency)]);
        assert_eq!(requests, 1, "{integration:?}");
        let retries = [("retryscope.dependency", dependency.as_str()), ("retryscope.retry.reason", "503")];
        assert_eq!(t.counter("retryscope.retries", &retries), 2, "{integration:?}");
        let failed = t.histogram_count("retryscope.attempt.duration", &[("error.type", "503")]);
        assert_eq!(failed, 2, "{integration:?}");
        let calls = t.histogram_count("retryscope.request.duration", &[("retryscope.outcome", "success")]);
        assert_eq!(calls, 1, "{integration:?}");
        server.assert_no_unsafe_request_ran_twice();
    }
}

#[tokio::test(start_paused = true)]
async fn operation_spans_put_one_internal_span_over_the_attempts() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/flaky", [Reply::status(503), Reply::ok("fine")]);
        let client = integration.client(Setup::new(policy()).meter(&t).operation_spans());
        let call = client.send(Call::get(server.url("/flaky")));
        let response = call.instrument(tracing::info_span!("caller")).await.expect("response");
        assert_eq!(response.status, 200, "{integration:?}");

        let spans = t.spans();
        let caller = spans.iter().find(|s| s.name == "caller").expect("the caller's span");
        let operations: Vec<_> =
            spans.iter().filter(|s| s.span_kind == SpanKind::Internal && s.name != "caller").collect();
        let [operation] = operations[..] else { panic!("{integration:?}: one operation span: {spans:#?}") };
        assert_eq!(operation.parent_span_id, caller.span_context.span_id(), "{integration:?}");
        let attempts: Vec<_> = spans.iter().filter(|s| s.span_kind == SpanKind::Client).collect();
        assert_eq!(attempts.len(), 2, "{integration:?}");
        assert!(
            attempts.iter().all(|a| a.parent_span_id == operation.span_context.span_id()),
            "{integration:?}: {spans:#?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_waited_never_earlier_and_at_most_a_fifth_later() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/limited", [Reply::with_header(429, "retry-after", "1"), Reply::ok("now")]);
        let started = Instant::now();
        let response = client(integration, &t, policy()).send(Call::get(server.url("/limited"))).await;
        assert_eq!(response.expect("response").status, 200, "{integration:?}");
        // Never earlier than the server asked; at most a fifth later (the spread).
        let waited = started.elapsed();
        let asked = Duration::from_secs(1)..=Duration::from_millis(1_200);
        assert!(asked.contains(&waited), "{integration:?}: {waited:?}");
        let seen = server.seen();
        assert!(
            seen[1].at - seen[0].at >= Duration::from_secs(1),
            "{integration:?}: {:?}",
            seen[1].at - seen[0].at
        );
        let hinted =
            t.histogram_count("retryscope.backoff.delay", &[("retryscope.delay.source", "retry_after")]);
        assert_eq!(hinted, 1, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_absurd_retry_after_gives_up_at_once_naming_the_hint() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/away", [Reply::with_header(429, "retry-after", "100000")]);
        let started = Instant::now();
        let failure = client(integration, &t, policy()).send(Call::get(server.url("/away"))).await;
        let failure = failure.expect_err("gives up");
        assert_eq!(started.elapsed(), Duration::ZERO, "{integration:?}");
        assert_eq!(server.seen().len(), 1, "{integration:?}");
        let reason = failure.stopped.as_ref().map(|s| s.reason);
        assert!(
            matches!(reason, Some(StopReason::HintTooLong { hint, .. }) if hint.delay == Duration::from_secs(100_000)),
            "{integration:?}: {reason:?}"
        );
        let message = &failure.chain[0];
        assert!(message.contains("asked to wait 100000s (retry_after)"), "{integration:?}: {message}");
        assert!(message.contains("429"), "{integration:?}: {message}");
    }
}

#[tokio::test(start_paused = true)]
async fn client_errors_are_never_retried() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        let client = client(integration, &t, policy());
        for code in [400, 401, 403, 404, 422] {
            let path = format!("/client-error-{code}");
            server.script(&path, [Reply::status(code), Reply::ok("must not be reached")]);
            let response = client.send(Call::get(server.url(&path))).await.expect("response");
            assert_eq!(response.status, code, "{integration:?}");
        }
        assert_eq!(server.seen().len(), 5, "{integration:?}: one attempt each");
        assert_eq!(t.counter("retryscope.retries", &[]), 0, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_without_an_idempotency_key_runs_exactly_once() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/orders", [Reply::status(503), Reply::ok("created")]);
        let post = Call::post(server.url("/orders")).header("x-request-id", "order-1").body("{}");
        let response = client(integration, &t, policy()).send(post).await.expect("response");
        assert_eq!(response.status, 503, "{integration:?}: the caller sees the server's answer");
        assert_eq!(server.seen().len(), 1, "{integration:?}");
        assert_eq!(server.executions("order-1"), 1, "{integration:?}");
        server.assert_no_unsafe_request_ran_twice();
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_with_an_idempotency_key_is_retried() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/payments", [Reply::status(503), Reply::ok("paid")]);
        let client = client(integration, &t, policy());
        let keyed = |id: &str| {
            let post = Call::post(server.url("/payments")).header("x-request-id", id);
            post.header("idempotency-key", "7f9c").body("{}")
        };
        assert_eq!(client.send(keyed("pay-1")).await.expect("response").status, 200, "{integration:?}");
        assert_eq!(server.executions("pay-1"), 2, "{integration:?}");

        // Three attempts, all 503: the last one comes back.
        server.script("/payments", [Reply::status(503), Reply::status(503), Reply::status(503)]);
        assert_eq!(client.send(keyed("pay-2")).await.expect("retried").status, 503, "{integration:?}");
        assert_eq!(server.executions("pay-2"), 3, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_marked_safe_is_retried_with_its_whole_body_each_time() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/search", [Reply::status(502), Reply::ok("results")]);
        let post = Call::post(server.url("/search"))
            .header("x-request-id", "search-1")
            .header("x-marked-safe", "1")
            .extension(RetryOptions::new().idempotent().operation("search"))
            .body("{}");
        let response = client(integration, &t, policy()).send(post).await.expect("response");
        assert_eq!(response.status, 200, "{integration:?}");
        assert_eq!(server.executions("search-1"), 2, "{integration:?}");
        let seen = server.seen();
        assert!(seen.iter().all(|s| s.method == "POST" && s.body_len == 2), "{integration:?}: {seen:?}");
        let searches = t.counter("retryscope.requests", &[("retryscope.operation", "search")]);
        assert_eq!(searches, 1, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_retried_even_for_a_post() {
    for integration in BOTH {
        let t = Telemetry::install();
        let port = closed_port().await;
        let post = Call::post(format!("http://127.0.0.1:{port}/orders")).body("{}");
        let failure = client(integration, &t, policy()).send(post).await.expect_err("nothing listens");
        let stopped = failure.stopped.as_ref().unwrap_or_else(|| panic!("{integration:?}: {failure:?}"));
        assert_eq!((stopped.reason, stopped.attempts), (StopReason::AttemptsExhausted, 3), "{integration:?}");
        assert_eq!(stopped.error_type, Some(ErrorType::CONNECT), "{integration:?}");
        assert!(stopped.last_error_is_connect, "{integration:?}: {:?}", stopped.last_error);
        let retries = t.counter("retryscope.retries", &[("retryscope.retry.reason", "connect")]);
        assert_eq!(retries, 2, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_give_up_prints_the_last_error_once_in_its_chain() {
    for integration in BOTH {
        let t = Telemetry::install();
        let port = closed_port().await;
        let get = Call::get(format!("http://127.0.0.1:{port}/orders"));
        let failure = client(integration, &t, policy()).send(get).await.expect_err("nothing listens");
        let last = failure.stopped.as_ref().and_then(|s| s.last_error.clone());
        let last =
            last.unwrap_or_else(|| panic!("{integration:?}: a give-up with a last error: {failure:?}"));

        let links = &failure.chain;
        assert_eq!(
            links[0], "gave up after 3 attempt(s): all attempts failed; last failure: connect",
            "{integration:?}: {links:#?}"
        );
        assert_eq!(links[1], last, "{integration:?}: the last error is the give-up's source: {links:#?}");
        let joined = links.join(": ");
        assert_eq!(joined.matches(&last).count(), 1, "{integration:?}: {joined}");
    }
}

/// What `NotRetried` (one type, retryscope-http's, in both integrations) says
/// of a streamed body, and how each integration's transport error starts.
fn not_retried(integration: Integration) -> (&'static str, &'static str) {
    let says = "not retried: the request body cannot be sent again, so it was sent once";
    match integration {
        Integration::Reqwest => (says, "error sending request"),
        Integration::Tower => (says, "client error"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_that_cannot_connect_fails_with_a_reason() {
    for integration in BOTH {
        let t = Telemetry::install();
        let port = closed_port().await;
        let put = Call::put(format!("http://127.0.0.1:{port}/upload")).streamed(&["{\"a\":", "1}"]);
        let failure = client(integration, &t, policy()).send(put).await.expect_err("nothing listens");
        assert!(failure.not_retried, "{integration:?}: says why it was not retried: {failure:?}");
        let (says, transport) = not_retried(integration);
        assert_eq!(failure.chain[0], says, "{integration:?}");
        let source =
            failure.chain.get(1).unwrap_or_else(|| panic!("{integration:?}: no source: {failure:?}"));
        assert!(source.contains(transport), "{integration:?}: the transport error is the source: {source}");
        assert_eq!(attempt_spans(&t).len(), 1, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_that_was_not_retried_prints_its_failure_once() {
    for integration in BOTH {
        let t = Telemetry::install();
        let port = closed_port().await;
        let put = Call::put(format!("http://127.0.0.1:{port}/upload")).streamed(&["{\"a\":", "1}"]);
        let failure = client(integration, &t, policy()).send(put).await.expect_err("nothing listens");
        let links = &failure.chain;
        let (says, transport) = not_retried(integration);
        assert_eq!(links[0], says, "{integration:?}: {links:#?}");
        assert!(links.len() > 1, "{integration:?}: the failure is the source: {links:#?}");
        assert!(links[1].contains(transport), "{integration:?}: {links:#?}");
        let joined = links.join(": ");
        assert_eq!(joined.matches(&links[1]).count(), 1, "{integration:?}: {joined}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_is_sent_once_and_the_reason_is_visible() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/upload", [Reply::status(503), Reply::ok("must not be reached")]);
        let put =
            Call::put(server.url("/upload")).header("x-request-id", "upload-1").streamed(&["{\"a\":", "1}"]);
        let response = client(integration, &t, policy()).send(put).await.expect("response");
        assert_eq!(response.status, 503, "{integration:?}");
        assert_eq!(server.executions("upload-1"), 1, "{integration:?}");
        let spans = attempt_spans(&t);
        let said: Vec<String> = spans[0].events.iter().map(|e| e.name.to_string()).collect();
        assert!(said.iter().any(|e| e.contains("sent once and never retried")), "{integration:?}: {said:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_connection_dropped_mid_response_is_retried_for_a_get() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/report", [Reply::DropMidResponse, Reply::ok("complete").into()]);
        let response = client(integration, &t, policy()).send(Call::get(server.url("/report"))).await;
        assert_eq!(response.expect("response").text().await, "complete", "{integration:?}");
        assert_eq!(server.seen().len(), 2, "{integration:?}");
        let retries = t.counter("retryscope.retries", &[("retryscope.retry.reason", "incomplete")]);
        assert_eq!(retries, 1, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_stalled_server_hits_the_attempt_timeout_then_the_retry_succeeds() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/slow", [Reply::Stall, Reply::ok("eventually").into()]);
        let policy = policy().to_builder().attempt_timeout(Duration::from_secs(2)).build().expect("valid");
        let started = Instant::now();
        let response = client(integration, &t, policy).send(Call::get(server.url("/slow"))).await;
        assert_eq!(response.expect("response").text().await, "eventually", "{integration:?}");
        let took = started.elapsed();
        assert_eq!(took, Duration::from_millis(2_100), "{integration:?}: 2 s timeout + 100 ms backoff");
        let retries = t.counter("retryscope.retries", &[("retryscope.retry.reason", "timeout")]);
        assert_eq!(retries, 1, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_stalled_post_is_not_retried_after_its_timeout() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/transfer", [Reply::Stall, Reply::ok("must not be reached").into()]);
        let policy = policy().to_builder().attempt_timeout(Duration::from_secs(2)).build().expect("valid");
        let post = Call::post(server.url("/transfer")).header("x-request-id", "transfer-1").body("{}");
        let failure = client(integration, &t, policy).send(post).await.expect_err("times out");
        let stopped = failure.stopped.as_ref().unwrap_or_else(|| panic!("{integration:?}: {failure:?}"));
        assert_eq!((stopped.attempts, stopped.reason), (1, StopReason::Unrepeatable), "{integration:?}");
        assert_eq!(stopped.last_error, None, "{integration:?}: a timeout has no underlying error");
        let message = &failure.chain[0];
        assert!(
            message.contains("not safe to run again; last failure: timeout"),
            "{integration:?}: {message}"
        );
        assert_eq!(server.executions("transfer-1"), 1, "{integration:?}");
        server.assert_no_unsafe_request_ran_twice();
    }
}

#[tokio::test(start_paused = true)]
async fn failures_that_are_not_retried_still_trip_the_breaker() {
    fn breaker() -> CircuitBreaker {
        CircuitBreaker::builder().min_calls(2).failure_ratio(0.5).build().expect("valid settings")
    }
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/orders", [Reply::status(503), Reply::status(503), Reply::status(503)]);
        let client = integration.client(Setup::new(policy()).meter(&t).breaker_per_dependency(breaker));
        for i in 0..2 {
            let post = Call::post(server.url("/orders")).header("x-request-id", format!("o{i}"));
            assert_eq!(client.send(post).await.expect("the server's answer").status, 503, "{integration:?}");
        }
        // Two 503s to POSTs: not retried, but the host is clearly failing.
        let failure = client.send(Call::post(server.url("/orders"))).await.expect_err("the breaker is open");
        let reason = failure.stopped.map(|s| s.reason);
        assert_eq!(reason, Some(StopReason::CircuitOpen), "{integration:?}");
        assert_eq!(server.seen().len(), 2, "{integration:?}: the third request never reached the server");
        server.assert_no_unsafe_request_ran_twice();
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_the_client_frees_its_guards_and_ends_its_gauges() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        // The factories are owned by the client's guards; this token, captured
        // by one, shows when they are freed.
        let token = Arc::new(());
        let captured = Arc::clone(&token);
        let setup = Setup::new(Policy::interactive())
            .meter(&t)
            .budget_per_dependency(move || {
                let _keep = &captured;
                RetryBudget::default()
            })
            .breaker_per_dependency(CircuitBreaker::default);
        let client = integration.client(setup);
        client.send(Call::get(server.url("/"))).await.expect("response");

        let dependency = format!("127.0.0.1:{}", server.addr.port());
        for gauge in ["retryscope.budget.available", "retryscope.breaker.state"] {
            let (names, _) = t.series(gauge, "retryscope.dependency");
            let expected = BTreeSet::from([dependency.clone()]);
            assert_eq!(names, expected, "{integration:?}: {gauge} while the client lives");
        }
        assert_eq!(Arc::strong_count(&token), 2, "{integration:?}: the client holds the factory");

        drop(client);
        assert_eq!(Arc::strong_count(&token), 1, "{integration:?}: the guards and their factories are freed");
        for gauge in ["retryscope.budget.available", "retryscope.breaker.state"] {
            let (_, series) = t.series(gauge, "retryscope.dependency");
            assert_eq!(series, 0, "{integration:?}: {gauge} reports nothing once the client is gone");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_during_its_backoff_sends_no_more_attempts() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/", [Reply::with_header(503, "retry-after", "5")]);
        let client = client(integration, &t, policy());
        let call = client.send(Call::get(server.url("/")));
        assert!(
            tokio::time::timeout(Duration::from_secs(1), call).await.is_err(),
            "{integration:?}: still waiting"
        );
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(server.seen().len(), 1, "{integration:?}: no attempt after the drop");
    }
}

#[tokio::test(start_paused = true)]
async fn extension_methods_keep_span_names_bounded() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        let purge = http::Method::from_bytes(b"PURGE").expect("a valid extension method");
        let response = client(integration, &t, policy()).send(Call::new(purge, server.url("/cache"))).await;
        assert_eq!(response.expect("response").status, 200, "{integration:?}");
        assert_eq!(server.seen()[0].method, "PURGE", "{integration:?}: sent as it was");

        let spans = attempt_spans(&t);
        assert_eq!(spans[0].name, "HTTP", "{integration:?}");
        assert_eq!(attr(&spans[0], "http.request.method").as_deref(), Some("_OTHER"), "{integration:?}");
        let original = attr(&spans[0], "http.request.method_original");
        assert_eq!(original.as_deref(), Some("PURGE"), "{integration:?}");

        // QUERY is one the conventions know: reported as it is.
        let query = http::Method::from_bytes(b"QUERY").expect("a valid method");
        let response = client(integration, &t, policy()).send(Call::new(query, server.url("/search"))).await;
        assert_eq!(response.expect("response").status, 200, "{integration:?}");
        let spans = attempt_spans(&t);
        let span = spans.iter().find(|s| s.name == "QUERY").expect("a span named QUERY");
        assert_eq!(attr(span, "http.request.method").as_deref(), Some("QUERY"), "{integration:?}");
        assert_eq!(attr(span, "http.request.method_original"), None, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn retries_tell_the_server_which_attempt_they_are() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/flaky", [Reply::status(503), Reply::status(503), Reply::ok("fine")]);
        let response = client(integration, &t, policy()).send(Call::get(server.url("/flaky"))).await;
        assert_eq!(response.expect("response").status, 200, "{integration:?}");
        let announced: Vec<_> =
            server.seen().iter().map(|s| s.headers.get("retry-attempt").cloned()).collect();
        let expected = [None, Some("2".to_owned()), Some("3".to_owned())];
        assert_eq!(announced, expected, "{integration:?}: the first attempt says nothing");
    }
}

/// The error type a rule names for a response its server marked for a retry.
const MARKED: ErrorType = ErrorType::Kind("x_retry");

/// A rule in trait form: a 200 carrying `x-retry: please` is a retryable
/// failure; anything else is left to the built-in rules.
struct RetryWhenAsked;

impl ResponseRule for RetryWhenAsked {
    fn verdict(&self, status: http::StatusCode, headers: &http::HeaderMap) -> Option<Verdict> {
        let asked = headers.get("x-retry").is_some_and(|v| v == "please");
        (status == http::StatusCode::OK && asked).then_some(Verdict::retryable(MARKED))
    }
}

#[tokio::test(start_paused = true)]
async fn a_rule_in_trait_form_retries_a_200_carrying_x_retry_please_and_returns_the_next_answer() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/report", [Reply::with_header(200, "x-retry", "please"), Reply::ok("the report")]);
        let client = integration.client(Setup::new(policy()).meter(&t).retry_rule(RetryWhenAsked));
        let response = client.send(Call::get(server.url("/report"))).await.expect("response");
        assert_eq!(response.status, 200, "{integration:?}");
        assert_eq!(response.text().await, "the report", "{integration:?}");
        assert_eq!(server.seen().len(), 2, "{integration:?}");
        let retries = t.counter("retryscope.retries", &[("retryscope.retry.reason", "x_retry")]);
        assert_eq!(retries, 1, "{integration:?}: the rule's error type");
    }
}

#[tokio::test(start_paused = true)]
async fn a_rule_made_with_rule_fn_makes_a_503_permanent_returned_after_one_attempt() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/maintenance", [Reply::status(503), Reply::ok("must not be reached")]);
        let rule = rule_fn(|status, _| {
            (status == http::StatusCode::SERVICE_UNAVAILABLE)
                .then_some(Verdict::permanent(ErrorType::Status(503)))
        });
        let client = integration.client(Setup::new(policy()).meter(&t).retry_rule(rule));
        let response = client.send(Call::get(server.url("/maintenance"))).await.expect("response");
        assert_eq!(response.status, 503, "{integration:?}: the server's answer, at once");
        assert_eq!(server.seen().len(), 1, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_rule_cannot_make_a_post_run_twice_after_it_was_sent() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/orders", [Reply::with_header(200, "x-retry", "please"), Reply::ok("a second order")]);
        // A closure with typed arguments is a rule without `rule_fn`.
        let rule = |_: http::StatusCode, headers: &http::HeaderMap| {
            headers.contains_key("x-retry").then_some(Verdict::retryable(MARKED))
        };
        let client = integration.client(Setup::new(policy()).meter(&t).retry_rule(rule));
        let post = Call::post(server.url("/orders")).header("x-request-id", "order-7").body("{}");
        let response = client.send(post).await.expect("response");
        assert_eq!(response.status, 200, "{integration:?}: the first answer, as it came");
        assert!(response.headers.contains_key("x-retry"), "{integration:?}");
        assert_eq!(server.seen().len(), 1, "{integration:?}");
        assert_eq!(server.executions("order-7"), 1, "{integration:?}");
        server.assert_no_unsafe_request_ran_twice();
    }
}
