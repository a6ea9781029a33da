//! Plain HTTP retries through a hyper-util client against a real hyper server
//! on 127.0.0.1, on tokio's paused clock.

use retryscope_test_support as support;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_sdk::trace::SpanData;
use retryscope::{ErrorType, Policy, StopReason};
use retryscope_tower::{BoxError, GaveUp, NotRetried, RetryLayer, RetryOptions};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use support::http_server::HttpServer;
use support::telemetry::{Telemetry, attr};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

fn policy() -> Policy {
    support::quick_policy()
}

fn layer(telemetry: &Telemetry) -> RetryLayer {
    RetryLayer::builder(policy()).meter(&telemetry.meter).build()
}

fn hyper_client<B>() -> Client<HttpConnector, B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    Client::builder(TokioExecutor::new()).build_http()
}

async fn send<S, B>(service: &mut S, request: Request<B>) -> Result<S::Response, BoxError>
where
    S: Service<Request<B>, Error = BoxError>,
{
    service.ready().await?.call(request).await
}

fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::default()).expect("valid request")
}

fn attempt_spans(telemetry: &Telemetry) -> Vec<SpanData> {
    let mut spans: Vec<SpanData> = telemetry
        .spans()
        .into_iter()
        .filter(|s| s.span_kind == opentelemetry::trace::SpanKind::Client)
        .collect();
    spans.sort_by_key(|s| s.start_time);
    spans
}

#[tokio::test(start_paused = true)]
async fn two_503s_then_200_take_three_attempts_with_http_spans() {
    let telemetry = Telemetry::install();
    let server = HttpServer::start(&[503, 503]).await;
    // As the crate documentation composes it.
    let mut client = ServiceBuilder::new().layer(layer(&telemetry)).service(hyper_client());

    let response =
        send(&mut client, get(&server.url("/stock?sku=42"))).await.expect("third attempt succeeds");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.into_body().collect().await.expect("body").to_bytes(), "done");

    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    let spans = attempt_spans(&telemetry);
    assert_eq!(spans.len(), 3);
    let statuses: Vec<Option<String>> = spans.iter().map(|s| attr(s, "http.response.status_code")).collect();
    assert_eq!(statuses, [Some("503".into()), Some("503".into()), Some("200".into())]);
    let resends: Vec<Option<String>> = spans.iter().map(|s| attr(s, "http.request.resend_count")).collect();
    assert_eq!(resends, [None, Some("1".into()), Some("2".into())]);
    for (span, request) in spans.iter().zip(&seen) {
        assert_eq!(span.name, "GET");
        assert_eq!(attr(span, "url.full"), Some(server.url("/stock?sku=REDACTED")));
        let traceparent =
            request.headers.get("traceparent").and_then(|v| v.to_str().ok()).expect("traceparent");
        assert!(traceparent.contains(&span.span_context.span_id().to_string()), "{traceparent}");
    }
    let dependency = server.addr.to_string();
    let retries = [("retryscope.dependency", dependency.as_str()), ("retryscope.retry.reason", "503")];
    assert_eq!(telemetry.counter("retryscope.retries", &retries), 2);
}

#[tokio::test(start_paused = true)]
async fn a_post_runs_once_unless_it_is_idempotent() {
    let telemetry = Telemetry::install();
    let server = HttpServer::start(&[503, 503, 503, 503, 503]).await;
    let mut client = layer(&telemetry).layer(hyper_client());
    let post = || Request::post(server.url("/invoices")).body(Full::from("{}")).expect("valid request");

    let response = send(&mut client, post()).await.expect("the 503 comes back");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.seen().len(), 1);

    let mut keyed = post();
    keyed.headers_mut().insert("idempotency-key", http::HeaderValue::from_static("8e03978e"));
    // Three attempts, all 503: the last one comes back.
    assert_eq!(send(&mut client, keyed).await.expect("retried").status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.seen().len(), 4);

    let mut marked = post();
    marked.extensions_mut().insert(RetryOptions::new().idempotent());
    assert_eq!(send(&mut client, marked).await.expect("retried").status(), StatusCode::OK);
    assert_eq!(server.seen().len(), 6);
    assert!(server.seen().iter().all(|s| s.method == "POST" && s.body_len == 2));
}

#[tokio::test(start_paused = true)]
async fn retry_after_replaces_the_computed_delay() {
    let telemetry = Telemetry::install();
    let server = HttpServer::start_with(vec![(503, vec![("retry-after", "2")])]).await;
    let mut client = layer(&telemetry).layer(hyper_client());
    send(&mut client, get(&server.url("/"))).await.expect("succeeds");
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[1].at - seen[0].at >= Duration::from_secs(2), "{:?}", seen[1].at - seen[0].at);
}

#[tokio::test(start_paused = true)]
async fn a_body_over_the_replay_limit_is_sent_once_in_full() {
    let telemetry = Telemetry::install();
    let server = HttpServer::start(&[503, 503, 503]).await;
    let mut client = layer(&telemetry).layer(hyper_client());
    let big = Bytes::from(vec![1u8; 300 * 1024]);
    let put = Request::put(server.url("/blob")).body(Full::new(big)).expect("valid request");
    let response = send(&mut client, put).await.expect("the 503 comes back");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "sent once");
    assert_eq!(seen[0].body_len, 300 * 1024, "and in full");
    let spans = attempt_spans(&telemetry);
    let said: Vec<String> = spans[0].events.iter().map(|e| e.name.to_string()).collect();
    assert!(said.iter().any(|e| e.contains("sent once and never retried")), "{said:?}");

    // Under the limit, every attempt carries the whole body again.
    let small =
        Request::put(server.url("/blob")).body(Full::new(Bytes::from(vec![2u8; 1024]))).expect("valid");
    assert_eq!(send(&mut client, small).await.expect("succeeds").status(), StatusCode::OK);
    assert_eq!(server.seen()[1..].iter().map(|s| s.body_len).collect::<Vec<_>>(), [1024, 1024, 1024]);
}

use support::net::closed_port;

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_retried_even_for_a_post() {
    let telemetry = Telemetry::install();
    let port = closed_port().await;
    let mut client = layer(&telemetry).layer(hyper_client());
    let post = Request::post(format!("http://127.0.0.1:{port}/")).body(Full::from("x")).expect("valid");
    let error = send(&mut client, post).await.expect_err("nobody listens");
    let gave_up = error.downcast_ref::<GaveUp>().expect("the layer gave up");
    assert_eq!(gave_up.reason(), StopReason::AttemptsExhausted);
    assert_eq!(gave_up.attempts(), 3);
    assert_eq!(gave_up.error_type(), Some(ErrorType::Kind("connect")));
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_is_sent_once_and_the_error_says_why() {
    let telemetry = Telemetry::install();
    let port = closed_port().await;
    let mut client = layer(&telemetry).layer(hyper_client::<BoxBody<Bytes, BoxError>>());
    // A stream the caller is still producing: not there at once.
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, BoxError>>(1);
    let stream = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(receiver));
    let request =
        Request::put(format!("http://127.0.0.1:{port}/upload")).body(BoxBody::new(stream)).expect("valid");
    let error = send(&mut client, request).await.expect_err("nobody listens");
    let not_retried = error.downcast_ref::<NotRetried>().expect("says why it was not retried");
    assert!(not_retried.to_string().contains("sent once"), "{not_retried}");
    assert_eq!(attempt_spans(&telemetry).len(), 1);
    drop(sender);
}

/// Every error of the chain, outermost first, as anyhow's `{:#}` and eyre print them.
fn chain(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    std::iter::successors(Some(error), |&e| e.source()).map(ToString::to_string).collect()
}

#[tokio::test(start_paused = true)]
async fn a_give_up_prints_the_last_error_once_in_its_chain() {
    let telemetry = Telemetry::install();
    let port = closed_port().await;
    let mut client = layer(&telemetry).layer(hyper_client());
    let error =
        send(&mut client, get(&format!("http://127.0.0.1:{port}/"))).await.expect_err("nobody listens");
    let gave_up = error.downcast_ref::<GaveUp>().expect("the layer gave up");
    let last = gave_up.last_error().expect("the connect error").to_string();

    let links = chain(&*error);
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
    let telemetry = Telemetry::install();
    let port = closed_port().await;
    let mut client = layer(&telemetry).layer(hyper_client::<BoxBody<Bytes, BoxError>>());
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, BoxError>>(1);
    let stream = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(receiver));
    let request =
        Request::put(format!("http://127.0.0.1:{port}/upload")).body(BoxBody::new(stream)).expect("valid");
    let error = send(&mut client, request).await.expect_err("nobody listens");

    let links = chain(&*error);
    assert_eq!(
        links[0], "not retried: the request body cannot be sent again, so it was sent once",
        "{links:#?}"
    );
    assert!(links.len() > 1, "the failure is the source: {links:#?}");
    let joined = links.join(": ");
    assert_eq!(joined.matches(&links[1]).count(), 1, "{joined}");
    drop(sender);
}

/// Counts readiness checks and calls, and notes any call made on a clone that
/// was not made ready first.
#[derive(Clone)]
struct ReadinessCheck<S> {
    inner: S,
    ready: bool,
    polls: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
    unready_calls: Arc<AtomicUsize>,
}

impl<S: Service<R>, R> Service<R> for ReadinessCheck<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.polls.fetch_add(1, Ordering::Relaxed);
        let ready = self.inner.poll_ready(cx);
        self.ready = matches!(ready, Poll::Ready(Ok(())));
        ready
    }

    fn call(&mut self, request: R) -> S::Future {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if !std::mem::take(&mut self.ready) {
            self.unready_calls.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.call(request)
    }
}

#[tokio::test(start_paused = true)]
async fn every_attempt_is_made_ready_afresh() {
    let telemetry = Telemetry::install();
    let server = HttpServer::start(&[503, 503]).await;
    let check = ReadinessCheck {
        inner: hyper_client::<Full<Bytes>>(),
        ready: false,
        polls: Arc::default(),
        calls: Arc::default(),
        unready_calls: Arc::default(),
    };
    let (calls, unready) = (Arc::clone(&check.calls), Arc::clone(&check.unready_calls));
    let mut client = layer(&telemetry).layer(check);
    send(&mut client, get(&server.url("/"))).await.expect("succeeds");
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    assert_eq!(unready.load(Ordering::Relaxed), 0, "every call followed a poll_ready on its own clone");
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_mid_wait_cancels_it() {
    let telemetry = Telemetry::install();
    let server = HttpServer::start_with(vec![(503, vec![("retry-after", "5")])]).await;
    let mut client = layer(&telemetry).layer(hyper_client());
    let call = send(&mut client, get(&server.url("/")));
    assert!(tokio::time::timeout(Duration::from_secs(1), call).await.is_err(), "still waiting");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(server.seen().len(), 1, "no attempt after the drop");
}

#[tokio::test(start_paused = true)]
async fn other_methods_keep_their_names_bounded() {
    let telemetry = Telemetry::install();
    let server = HttpServer::start(&[]).await;
    let mut client = layer(&telemetry).layer(hyper_client());
    let method = Method::from_bytes(b"PURGE").expect("valid method");
    let request =
        Request::builder().method(method).uri(server.url("/")).body(Full::default()).expect("valid");
    send(&mut client, request).await.expect("succeeds");
    let spans = attempt_spans(&telemetry);
    assert_eq!(spans[0].name, "HTTP");
    assert_eq!(attr(&spans[0], "http.request.method").as_deref(), Some("_OTHER"));
    assert_eq!(attr(&spans[0], "http.request.method_original").as_deref(), Some("PURGE"));
}

/// The error type the rules below name.
const MARKED: ErrorType = ErrorType::Kind("x_retry");

/// A rule in trait form: a 200 carrying `x-retry: please` is a retryable
/// failure; anything else is left to the built-in rules.
struct RetryWhenAsked;

impl retryscope_tower::ResponseRule for RetryWhenAsked {
    fn verdict(&self, status: StatusCode, headers: &http::HeaderMap) -> Option<retryscope::Verdict> {
        let asked = headers.get("x-retry").is_some_and(|v| v == "please");
        (status == StatusCode::OK && asked).then_some(retryscope::Verdict::retryable(MARKED))
    }
}

#[tokio::test(start_paused = true)]
async fn a_rule_in_trait_form_retries_a_200_carrying_x_retry_please() {
    let telemetry = Telemetry::install();
    let server = support::Server::start().await;
    server.script(
        "/report",
        [support::Reply::with_header(200, "x-retry", "please"), support::Reply::ok("the report")],
    );
    let layer = RetryLayer::builder(policy()).meter(&telemetry.meter).retry_rule(RetryWhenAsked).build();
    let mut client = ServiceBuilder::new().layer(layer).service(hyper_client());

    let response = send(&mut client, get(&server.url("/report"))).await.expect("second attempt succeeds");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.into_body().collect().await.expect("body").to_bytes(), "the report");
    assert_eq!(server.seen().len(), 2);
    let retries = telemetry.counter("retryscope.retries", &[("retryscope.retry.reason", "x_retry")]);
    assert_eq!(retries, 1, "the rule's error type");
}

#[tokio::test(start_paused = true)]
async fn a_rule_made_with_rule_fn_makes_a_503_permanent_returned_after_one_attempt() {
    let telemetry = Telemetry::install();
    let server = support::Server::start().await;
    server.script("/maintenance", [support::Reply::status(503), support::Reply::ok("must not be reached")]);
    let rule = retryscope_tower::rule_fn(|status, _| {
        (status == StatusCode::SERVICE_UNAVAILABLE)
            .then_some(retryscope::Verdict::permanent(ErrorType::Status(503)))
    });
    let layer = RetryLayer::builder(policy()).meter(&telemetry.meter).retry_rule(rule).build();
    let mut client = ServiceBuilder::new().layer(layer).service(hyper_client());

    let response = send(&mut client, get(&server.url("/maintenance"))).await.expect("the server's answer");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.seen().len(), 1);
}
