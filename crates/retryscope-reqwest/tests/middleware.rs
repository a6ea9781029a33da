//! The middleware against a real HTTP server on 127.0.0.1, with tokio's paused
//! clock: backoff waits and Retry-After take no real time.

use retryscope_test_support as support;

use opentelemetry::trace::{SpanKind, Status};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use retryscope::{CircuitBreaker, Jitter, Policy, RetryBudget, RetryError, StopReason};
use retryscope_reqwest::{NotRetried, RetryMiddleware, RetryOptions};
use std::sync::Arc;
use std::time::Duration;
use support::telemetry::{Telemetry, attr};
use support::{Reply, Server};
use tokio::time::Instant;
use tracing::Instrument;

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(100))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid policy")
}

fn client(telemetry: &Telemetry, policy: Policy) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    ClientBuilder::new(inner).with(RetryMiddleware::builder(policy).meter(&telemetry.meter).build()).build()
}

/// The `RetryError` inside a middleware error, if that is what it is.
fn retry_error(error: &reqwest_middleware::Error) -> Option<&RetryError<reqwest_middleware::Error>> {
    match error {
        reqwest_middleware::Error::Middleware(e) => e.downcast_ref(),
        reqwest_middleware::Error::Reqwest(_) => None,
    }
}

#[tokio::test(start_paused = true)]
async fn two_503s_then_200_take_three_attempts_with_spans_and_metrics() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/flaky", [Reply::status(503), Reply::status(503), Reply::ok("fine")]);

    let started = Instant::now();
    let response = client(&t, policy())
        .get(server.url("/flaky?page=2"))
        .send()
        .instrument(tracing::info_span!("caller"))
        .await
        .expect("response");
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.expect("body"), "fine");
    assert_eq!(server.seen().len(), 3);
    assert_eq!(started.elapsed(), Duration::from_millis(300), "100 ms + 200 ms of backoff");

    // No operation span: three sibling CLIENT spans under the caller's span.
    let spans = t.spans();
    let caller = spans.iter().find(|s| s.name == "caller").expect("the caller's span");
    assert!(spans.iter().all(|s| s.span_kind != SpanKind::Internal || s.name == "caller"), "{spans:#?}");
    let dependency = format!("127.0.0.1:{}", server.addr.port());

    let mut attempts: Vec<_> = spans.iter().filter(|s| s.span_kind == SpanKind::Client).collect();
    attempts.sort_by_key(|s| attr(s, "retryscope.attempt"));
    assert_eq!(attempts.len(), 3);
    // One backoff event per retry, on the attempt that failed.
    let backoffs = |s: &opentelemetry_sdk::trace::SpanData| {
        s.events.iter().filter(|e| e.name == "retryscope.backoff").count()
    };
    assert_eq!(attempts.iter().map(|s| backoffs(s)).collect::<Vec<_>>(), [1, 1, 0]);
    let port = server.addr.port().to_string();
    for (i, span) in attempts.iter().enumerate() {
        assert_eq!(span.name, "GET");
        assert_eq!(span.parent_span_id, caller.span_context.span_id());
        assert_eq!(span.span_context.trace_id(), caller.span_context.trace_id());
        assert_eq!(attr(span, "retryscope.attempt"), Some((i + 1).to_string()));
        assert_eq!(attr(span, "retryscope.dependency"), Some(dependency.clone()), "what groups them");
        assert_eq!(attr(span, "http.request.method").as_deref(), Some("GET"));
        assert_eq!(attr(span, "server.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(attr(span, "server.port"), Some(port.clone()));
        assert_eq!(attr(span, "url.full"), Some(server.url("/flaky?page=2")));
        let resend = (i > 0).then(|| i.to_string());
        assert_eq!(attr(span, "http.request.resend_count"), resend);
    }
    for failed in &attempts[..2] {
        assert_eq!(attr(failed, "http.response.status_code").as_deref(), Some("503"));
        assert_eq!(attr(failed, "error.type").as_deref(), Some("503"));
        assert!(matches!(failed.status, Status::Error { .. }), "{:?}", failed.status);
    }
    assert_eq!(attr(attempts[2], "http.response.status_code").as_deref(), Some("200"));
    assert_eq!(attr(attempts[2], "error.type"), None);

    // Each attempt carried its own span's context on the wire.
    for (seen, span) in server.seen().iter().zip(&attempts) {
        let expected = format!("00-{}-{}-01", span.span_context.trace_id(), span.span_context.span_id());
        assert_eq!(seen.headers.get("traceparent"), Some(&expected));
    }

    assert_eq!(t.counter("retryscope.requests", &[("retryscope.dependency", &dependency)]), 1);
    assert_eq!(t.counter("retryscope.retries", &[("retryscope.retry.reason", "503")]), 2);
    assert_eq!(t.histogram_count("retryscope.attempt.duration", &[("error.type", "503")]), 2);
    assert_eq!(t.histogram_count("retryscope.request.duration", &[("retryscope.outcome", "success")]), 1);
    server.assert_no_unsafe_request_ran_twice();
}

#[tokio::test(start_paused = true)]
async fn operation_spans_put_one_internal_span_over_the_attempts() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/flaky", [Reply::status(503), Reply::ok("fine")]);
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    let middleware = RetryMiddleware::builder(policy()).meter(&t.meter).operation_spans().build();
    let client = ClientBuilder::new(inner).with(middleware).build();

    let response = client
        .get(server.url("/flaky"))
        .send()
        .instrument(tracing::info_span!("caller"))
        .await
        .expect("response");
    assert_eq!(response.status(), 200);

    let spans = t.spans();
    let caller = spans.iter().find(|s| s.name == "caller").expect("the caller's span");
    let operations: Vec<_> =
        spans.iter().filter(|s| s.span_kind == SpanKind::Internal && s.name != "caller").collect();
    let [operation] = operations[..] else { panic!("one operation span: {spans:#?}") };
    assert_eq!(operation.parent_span_id, caller.span_context.span_id());
    let attempts: Vec<_> = spans.iter().filter(|s| s.span_kind == SpanKind::Client).collect();
    assert_eq!(attempts.len(), 2);
    assert!(attempts.iter().all(|a| a.parent_span_id == operation.span_context.span_id()), "{spans:#?}");
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/limited", [Reply::with_header(429, "retry-after", "1"), Reply::ok("now")]);
    let started = Instant::now();
    let response = client(&t, policy()).get(server.url("/limited")).send().await.expect("response");
    assert_eq!(response.status(), 200);
    // Never earlier than the server asked; at most a fifth later (the spread).
    let waited = started.elapsed();
    assert!((Duration::from_secs(1)..=Duration::from_millis(1_200)).contains(&waited), "{waited:?}");
    assert_eq!(
        t.histogram_count("retryscope.backoff.delay", &[("retryscope.delay.source", "retry_after")]),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn an_absurd_retry_after_gives_up_at_once_naming_the_hint() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/away", [Reply::with_header(429, "retry-after", "100000")]);
    let started = Instant::now();
    let error = client(&t, policy()).get(server.url("/away")).send().await.expect_err("gives up");
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(server.seen().len(), 1);
    let retry = retry_error(&error).expect("a RetryError");
    assert!(
        matches!(retry.reason(), StopReason::HintTooLong { hint, .. } if hint.delay == Duration::from_secs(100_000))
    );
    let message = error.to_string();
    assert!(message.contains("asked to wait 100000s (retry_after)"), "{message}");
    assert!(message.contains("429"), "{message}");
}

#[tokio::test(start_paused = true)]
async fn client_errors_are_never_retried() {
    let t = Telemetry::install();
    let server = Server::start().await;
    let client = client(&t, policy());
    for code in [400, 401, 403, 404, 422] {
        let path = format!("/client-error-{code}");
        server.script(&path, [Reply::status(code), Reply::ok("must not be reached")]);
        let response = client.get(server.url(&path)).send().await.expect("response");
        assert_eq!(response.status(), code);
    }
    assert_eq!(server.seen().len(), 5, "one attempt each");
    assert_eq!(t.counter("retryscope.retries", &[]), 0);
}

#[tokio::test(start_paused = true)]
async fn a_post_without_idempotency_key_runs_exactly_once() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/orders", [Reply::status(503), Reply::ok("created")]);
    let response = client(&t, policy())
        .post(server.url("/orders"))
        .header("x-request-id", "order-1")
        .body("{}")
        .send()
        .await
        .expect("response");
    assert_eq!(response.status(), 503, "the caller sees the server's answer");
    assert_eq!(server.executions("order-1"), 1);
    server.assert_no_unsafe_request_ran_twice();
}

#[tokio::test(start_paused = true)]
async fn a_post_with_an_idempotency_key_is_retried() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/payments", [Reply::status(503), Reply::ok("paid")]);
    let response = client(&t, policy())
        .post(server.url("/payments"))
        .header("x-request-id", "pay-1")
        .header("idempotency-key", "7f9c")
        .body("{}")
        .send()
        .await
        .expect("response");
    assert_eq!(response.status(), 200);
    assert_eq!(server.executions("pay-1"), 2);
}

#[tokio::test(start_paused = true)]
async fn a_post_marked_safe_is_retried() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/search", [Reply::status(502), Reply::ok("results")]);
    let response = client(&t, policy())
        .post(server.url("/search"))
        .header("x-request-id", "search-1")
        .header("x-marked-safe", "1")
        .with_extension(RetryOptions::new().idempotent().operation("search"))
        .body("{}")
        .send()
        .await
        .expect("response");
    assert_eq!(response.status(), 200);
    assert_eq!(server.executions("search-1"), 2);
    assert_eq!(t.counter("retryscope.requests", &[("retryscope.operation", "search")]), 1);
}

use support::net::closed_port;

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_retried_even_for_a_post() {
    let t = Telemetry::install();
    let port = closed_port().await;
    let error = client(&t, policy())
        .post(format!("http://127.0.0.1:{port}/orders"))
        .body("{}")
        .send()
        .await
        .expect_err("nothing listens");
    let retry = retry_error(&error).expect("a RetryError");
    assert_eq!((retry.reason(), retry.attempts()), (StopReason::AttemptsExhausted, 3));
    let last = retry.last_error().expect("the last error");
    assert!(last.is_connect(), "{last:?}");
    assert_eq!(t.counter("retryscope.retries", &[("retryscope.retry.reason", "connect")]), 2);
}

/// Every error of the chain, outermost first, as anyhow's `{:#}` and eyre print them.
fn chain(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    std::iter::successors(Some(error), |&e| e.source()).map(ToString::to_string).collect()
}

#[tokio::test(start_paused = true)]
async fn a_give_up_prints_the_last_error_once_in_its_chain() {
    let t = Telemetry::install();
    let port = closed_port().await;
    let error = client(&t, policy())
        .get(format!("http://127.0.0.1:{port}/orders"))
        .send()
        .await
        .expect_err("nothing listens");
    let last = retry_error(&error).and_then(RetryError::last_error).expect("a RetryError with a last error");
    let last = last.to_string();

    let links = chain(&error);
    assert_eq!(
        links[0], "gave up after 3 attempt(s): all attempts failed; last failure: connect",
        "{links:#?}"
    );
    assert_eq!(links[1], last, "the last error is the give-up's source: {links:#?}");
    let joined = links.join(": ");
    assert_eq!(joined.matches(&last).count(), 1, "{joined}");
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_that_was_not_retried_prints_its_failure_once() {
    let t = Telemetry::install();
    let port = closed_port().await;
    let error = client(&t, policy())
        .put(format!("http://127.0.0.1:{port}/upload"))
        .body(streaming_body())
        .send()
        .await
        .expect_err("nothing listens");
    let links = chain(&error);
    assert_eq!(
        links[0], "not retried: the request body cannot be sent again, so it was sent once",
        "{links:#?}"
    );
    assert!(links[1].contains("error sending request"), "{links:#?}");
    let joined = links.join(": ");
    assert_eq!(joined.matches(&links[1]).count(), 1, "{joined}");
}

#[tokio::test(start_paused = true)]
async fn a_connection_dropped_mid_response_is_retried_for_a_get() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/report", [Reply::DropMidResponse, Reply::ok("complete")]);
    let response = client(&t, policy()).get(server.url("/report")).send().await.expect("response");
    assert_eq!(response.text().await.expect("body"), "complete");
    assert_eq!(server.seen().len(), 2);
    assert_eq!(t.counter("retryscope.retries", &[("retryscope.retry.reason", "incomplete")]), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_server_hits_the_attempt_timeout_then_the_retry_succeeds() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/slow", [Reply::Stall, Reply::ok("eventually")]);
    let policy = policy().to_builder().attempt_timeout(Duration::from_secs(2)).build().expect("valid");
    let started = Instant::now();
    let response = client(&t, policy).get(server.url("/slow")).send().await.expect("response");
    assert_eq!(response.text().await.expect("body"), "eventually");
    assert_eq!(started.elapsed(), Duration::from_millis(2_100), "2 s timeout + 100 ms backoff");
    assert_eq!(t.counter("retryscope.retries", &[("retryscope.retry.reason", "timeout")]), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_post_is_not_retried_after_its_timeout() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/transfer", [Reply::Stall, Reply::ok("must not be reached")]);
    let policy = policy().to_builder().attempt_timeout(Duration::from_secs(2)).build().expect("valid");
    let error = client(&t, policy)
        .post(server.url("/transfer"))
        .header("x-request-id", "transfer-1")
        .body("{}")
        .send()
        .await
        .expect_err("times out");
    let retry = retry_error(&error).expect("a RetryError");
    assert_eq!((retry.attempts(), retry.reason()), (1, StopReason::Unrepeatable));
    assert!(retry.last_error().is_none(), "a timeout has no underlying error");
    assert!(error.to_string().contains("not safe to run again; last failure: timeout"), "{error}");
    assert_eq!(server.executions("transfer-1"), 1);
    server.assert_no_unsafe_request_ran_twice();
}

#[tokio::test(start_paused = true)]
async fn credentials_and_signatures_never_reach_a_span() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/signed", [Reply::status(503), Reply::ok("ok")]);
    let url =
        format!("http://alice:hunter2@{}/signed?sig=s3cr3t&X-Amz-Signature=deadbeef&page=1", server.addr);
    let response = client(&t, policy()).get(&url).send().await.expect("response");
    assert_eq!(response.status(), 200);
    let spans = t.spans();
    assert!(!spans.is_empty());
    let exported = format!("{spans:?}");
    for secret in ["alice", "hunter2", "s3cr3t", "deadbeef"] {
        assert!(!exported.contains(secret), "{secret} leaked into {exported}");
    }
    let attempt = spans.iter().find(|s| s.span_kind == SpanKind::Client).expect("attempt span");
    assert_eq!(
        attr(attempt, "url.full"),
        // reqwest moves userinfo into an Authorization header before middleware
        // runs; the redaction of userinfo itself is unit-tested in redact.rs.
        Some(format!("http://{}/signed?sig=REDACTED&X-Amz-Signature=REDACTED&page=1", server.addr))
    );
}

fn streaming_body() -> reqwest::Body {
    let chunks: Vec<Result<&'static str, std::io::Error>> = vec![Ok("{\"a\":"), Ok("1}")];
    reqwest::Body::wrap_stream(futures_stream(chunks))
}

/// A stream over `items`, without pulling in a stream crate.
fn futures_stream<T: Send + 'static>(items: Vec<T>) -> impl futures_core::Stream<Item = T> + Send + 'static {
    struct Iter<T>(std::vec::IntoIter<T>);
    impl<T> futures_core::Stream for Iter<T> {
        type Item = T;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<T>> {
            std::task::Poll::Ready(self.0.next())
        }
    }
    impl<T> Unpin for Iter<T> {}
    Iter(items.into_iter())
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_is_sent_once_and_the_reason_is_visible() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/upload", [Reply::status(503), Reply::ok("must not be reached")]);
    let response = client(&t, policy())
        .put(server.url("/upload"))
        .header("x-request-id", "upload-1")
        .body(streaming_body())
        .send()
        .await
        .expect("response");
    assert_eq!(response.status(), 503);
    assert_eq!(server.executions("upload-1"), 1);
    let spans = t.spans();
    let attempt = spans.iter().find(|s| s.span_kind == SpanKind::Client).expect("attempt span");
    assert!(
        attempt.events.iter().any(|e| e.name.contains("sent once and never retried")),
        "{:?}",
        attempt.events
    );
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_that_cannot_connect_fails_with_a_reason() {
    let t = Telemetry::install();
    let port = closed_port().await;
    let error = client(&t, policy())
        .put(format!("http://127.0.0.1:{port}/upload"))
        .body(streaming_body())
        .send()
        .await
        .expect_err("nothing listens");
    let reqwest_middleware::Error::Middleware(inner) = &error else { panic!("{error:?}") };
    let not_retried = inner.downcast_ref::<NotRetried>().expect("NotRetried");
    assert!(
        error.to_string().contains("not retried: the request body cannot be sent again, so it was sent once"),
        "{error}"
    );
    let source = std::error::Error::source(not_retried).expect("the transport error");
    assert!(source.to_string().contains("error sending request"), "{source}");
}

#[tokio::test(start_paused = true)]
async fn failures_that_are_not_retried_still_trip_the_breaker() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/orders", [Reply::status(503), Reply::status(503), Reply::status(503)]);
    let breaker = || {
        retryscope::CircuitBreaker::builder().min_calls(2).failure_ratio(0.5).build().expect("valid settings")
    };
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    let middleware =
        RetryMiddleware::builder(policy()).meter(&t.meter).breaker_per_dependency(breaker).build();
    let client = ClientBuilder::new(inner).with(middleware).build();
    for i in 0..2 {
        let response =
            client.post(server.url("/orders")).header("x-request-id", format!("o{i}")).send().await;
        assert_eq!(response.expect("the server's answer").status(), 503);
    }
    // Two 503s to POSTs: not retried, but the host is clearly failing.
    let error = client.post(server.url("/orders")).send().await.expect_err("the breaker is open");
    assert_eq!(retry_error(&error).map(RetryError::reason), Some(StopReason::CircuitOpen));
    assert_eq!(server.seen().len(), 2, "the third request never reached the server");
    server.assert_no_unsafe_request_ran_twice();
}

#[tokio::test(start_paused = true)]
async fn dropping_the_middleware_frees_its_guards_and_ends_its_gauges() {
    let t = Telemetry::install();
    let server = Server::start().await;
    // The factories are owned by the middleware's guards; this token, captured by
    // one, shows when they are freed.
    let token = Arc::new(());
    let captured = Arc::clone(&token);
    let middleware = RetryMiddleware::builder(Policy::interactive())
        .meter(&t.meter)
        .budget_per_dependency(move || {
            let _keep = &captured;
            RetryBudget::new()
        })
        .breaker_per_dependency(CircuitBreaker::new)
        .build();
    let client = ClientBuilder::new(reqwest::Client::builder().no_proxy().build().expect("client"))
        .with(middleware)
        .build();
    client.get(server.url("/")).send().await.expect("response");

    let dependency = format!("127.0.0.1:{}", server.addr.port());
    for gauge in ["retryscope.budget.available", "retryscope.breaker.state"] {
        let (names, _) = t.series(gauge, "retryscope.dependency");
        assert_eq!(
            names,
            std::collections::BTreeSet::from([dependency.clone()]),
            "{gauge} while the client lives"
        );
    }
    assert_eq!(Arc::strong_count(&token), 2, "the middleware holds the factory");

    drop(client);
    assert_eq!(Arc::strong_count(&token), 1, "the guards and their factories are freed");
    for gauge in ["retryscope.budget.available", "retryscope.breaker.state"] {
        let (_, series) = t.series(gauge, "retryscope.dependency");
        assert_eq!(series, 0, "{gauge} reports nothing once the client is gone");
    }
}

#[tokio::test(start_paused = true)]
async fn extension_methods_keep_span_names_bounded() {
    let t = Telemetry::install();
    let server = Server::start().await;
    let purge = reqwest::Method::from_bytes(b"PURGE").expect("a valid extension method");
    let response = client(&t, policy()).request(purge, server.url("/cache")).send().await.expect("response");
    assert_eq!(response.status(), 200);
    assert_eq!(server.seen()[0].method, "PURGE", "sent as it was");

    let spans = t.spans();
    let attempt = spans.iter().find(|s| s.span_kind == SpanKind::Client).expect("attempt span");
    assert_eq!(attempt.name, "HTTP");
    assert_eq!(attr(attempt, "http.request.method").as_deref(), Some("_OTHER"));
    assert_eq!(attr(attempt, "http.request.method_original").as_deref(), Some("PURGE"));
}

#[tokio::test(start_paused = true)]
async fn retries_tell_the_server_which_attempt_they_are() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/flaky", [Reply::status(503), Reply::status(503), Reply::ok("fine")]);
    let response = client(&t, policy()).get(server.url("/flaky")).send().await.expect("response");
    assert_eq!(response.status(), 200);
    let announced: Vec<_> = server.seen().iter().map(|s| s.headers.get("retry-attempt").cloned()).collect();
    assert_eq!(
        announced,
        [None, Some("2".to_owned()), Some("3".to_owned())],
        "the first attempt says nothing"
    );
}

/// The middleware of a service in the middle of a chain, retrying at one layer.
fn one_layer_client(t: &Telemetry) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    let middleware = RetryMiddleware::builder(policy()).meter(&t.meter).retry_at_one_layer().build();
    ClientBuilder::new(inner).with(middleware).build()
}

fn upstream(attempt: &str) -> retryscope_otel::Upstream {
    let mut headers = http::HeaderMap::new();
    headers.insert("retry-attempt", attempt.parse().expect("header value"));
    retryscope_otel::Upstream::new(retryscope_otel::IncomingAttempt::from_headers(&headers))
}

#[tokio::test(start_paused = true)]
async fn at_one_layer_a_request_that_is_itself_a_retry_is_not_retried_downstream() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/down", [Reply::status(503), Reply::status(503), Reply::status(503)]);
    let client = one_layer_client(&t);
    let response = upstream("2").scope(client.get(server.url("/down")).send()).await.expect("response");
    assert_eq!(response.status(), 503, "the downstream answer, as it came");
    assert_eq!(server.seen().len(), 1, "one attempt: the caller above retries");
    assert_eq!(t.counter("retryscope.throttled", &[("retryscope.throttle.reason", "upstream_retry")]), 1);
    assert_eq!(t.histogram_count("retryscope.request.duration", &[("retryscope.outcome", "throttled")]), 1);

    // The same request on a first attempt is retried as usual.
    server.script("/down", [Reply::status(503), Reply::ok("fine")]);
    let response = upstream("1").scope(client.get(server.url("/down")).send()).await.expect("response");
    assert_eq!(response.status(), 200);
}

#[tokio::test(start_paused = true)]
async fn at_one_layer_a_failure_already_retried_below_is_not_retried_and_exhaustion_is_passed_up() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/below", [Reply::with_header(503, "retry-exhausted", "4")]);
    let client = one_layer_client(&t);
    let served = upstream("1");
    let response = served.clone().scope(client.get(server.url("/below")).send()).await.expect("response");
    assert_eq!(
        (response.status().as_u16(), server.seen().len()),
        (503, 1),
        "the layer below already retried"
    );
    assert_eq!(t.counter("retryscope.throttled", &[("retryscope.throttle.reason", "upstream_retry")]), 1);
    assert_eq!(served.exhausted_below(), Some(4), "passed on, so that no layer above retries it either");

    // This layer retries and gives up: the request it serves learns it.
    let served = upstream("1");
    server.script("/flaky", [Reply::status(503), Reply::status(503), Reply::status(503)]);
    let response = served.clone().scope(client.get(server.url("/flaky")).send()).await.expect("response");
    assert_eq!((response.status().as_u16(), server.seen().len()), (503, 4));
    assert_eq!(served.exhausted_below(), Some(3));
}

/// The error type a rule names for a response its server marked for a retry.
const MARKED: retryscope::ErrorType = retryscope::ErrorType::Kind("x_retry");

/// A rule in trait form: a 200 carrying `x-retry: please` is a retryable
/// failure; anything else is left to the built-in rules.
struct RetryWhenAsked;

impl retryscope_reqwest::ResponseRule for RetryWhenAsked {
    fn verdict(&self, status: http::StatusCode, headers: &http::HeaderMap) -> Option<retryscope::Verdict> {
        let asked = headers.get("x-retry").is_some_and(|v| v == "please");
        (status == http::StatusCode::OK && asked).then_some(retryscope::Verdict::retryable(MARKED))
    }
}

fn client_with_rule(
    telemetry: &Telemetry,
    rule: impl retryscope_reqwest::ResponseRule,
) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    let middleware = RetryMiddleware::builder(policy()).meter(&telemetry.meter).retry_rule(rule).build();
    ClientBuilder::new(inner).with(middleware).build()
}

#[tokio::test(start_paused = true)]
async fn a_rule_retries_a_200_carrying_x_retry_please_and_returns_the_next_answer() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/report", [Reply::with_header(200, "x-retry", "please"), Reply::ok("the report")]);
    let response =
        client_with_rule(&t, RetryWhenAsked).get(server.url("/report")).send().await.expect("response");
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.expect("body"), "the report");
    assert_eq!(server.seen().len(), 2);
    assert_eq!(
        t.counter("retryscope.retries", &[("retryscope.retry.reason", "x_retry")]),
        1,
        "the rule's error type"
    );
}

#[tokio::test(start_paused = true)]
async fn a_rule_made_with_rule_fn_makes_a_503_permanent_returned_after_one_attempt() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/maintenance", [Reply::status(503), Reply::ok("must not be reached")]);
    let rule = retryscope_reqwest::rule_fn(|status, _| {
        (status == http::StatusCode::SERVICE_UNAVAILABLE)
            .then_some(retryscope::Verdict::permanent(retryscope::ErrorType::Status(503)))
    });
    let response = client_with_rule(&t, rule).get(server.url("/maintenance")).send().await.expect("response");
    assert_eq!(response.status(), 503, "the server's answer, at once");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_rule_cannot_make_a_post_run_twice_after_it_was_sent() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/orders", [Reply::with_header(200, "x-retry", "please"), Reply::ok("a second order")]);
    // A closure with typed arguments is a rule without `rule_fn`.
    let rule = |_: http::StatusCode, headers: &http::HeaderMap| {
        headers.contains_key("x-retry").then_some(retryscope::Verdict::retryable(MARKED))
    };
    let response = client_with_rule(&t, rule)
        .post(server.url("/orders"))
        .header("x-request-id", "order-7")
        .body("{}")
        .send()
        .await
        .expect("response");
    assert_eq!(response.status(), 200, "the first answer, as it came");
    assert!(response.headers().contains_key("x-retry"));
    assert_eq!(server.executions("order-7"), 1);
    server.assert_no_unsafe_request_ran_twice();
}
