//! What only the tower layer does to plain HTTP calls, through a hyper-util
//! client against a real hyper server on 127.0.0.1, on tokio's paused clock:
//! the replay limit of a request body, readiness, and where the layers below
//! start their spans (for a hedged call, against the scripted server that
//! stalls, on the wall clock: its second copy after its delay is a claim about
//! real time). Everything it shares with the reqwest middleware is specified
//! once for both, in retryscope-conformance's `tests/middleware.rs`.

use retryscope_test_support as support;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_sdk::trace::SpanData;
use retryscope::Policy;
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope_tower::prelude::*;
use retryscope_tower::{BoxError, RetryLayer};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use support::http_server::HttpServer;
use support::telemetry::{Telemetry, assert_hedged_copies_own_their_spans};
use support::{Reply, Server};
use tower::{Layer, Service, ServiceExt};
use tracing::Instrument;

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

/// A layer below the retry layer that starts a span of its own in `call`,
/// as a tracing layer does.
#[derive(Clone)]
struct SpanInCall<S>(S);

impl<S: Service<R>, R> Service<R> for SpanInCall<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = tracing::instrument::Instrumented<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        tracing::Instrument::instrument(self.0.call(request), tracing::info_span!("below"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_layer_below_starts_its_spans_in_the_attempt_span() {
    let telemetry = Telemetry::install();
    let server = HttpServer::start(&[503]).await;
    let mut client = layer(&telemetry).layer(SpanInCall(hyper_client::<Full<Bytes>>()));
    send(&mut client, get(&server.url("/"))).await.expect("succeeds");
    // The attempt's closure is not run in its span (`BUILDS_IN_SPAN`), but
    // the inner service's `call` is the future's, polled in it.
    let attempts = attempt_spans(&telemetry);
    let mut below: Vec<SpanData> = telemetry.spans().into_iter().filter(|s| s.name == "below").collect();
    below.sort_by_key(|s| s.start_time);
    assert_eq!((attempts.len(), below.len()), (2, 2), "two attempts, each with its span below");
    for (attempt, below) in attempts.iter().zip(below.iter()) {
        assert_eq!(
            below.parent_span_id,
            attempt.span_context.span_id(),
            "the span below is the attempt's child"
        );
    }
}

/// "Hedging × operation spans" (docs/guide/where-features-meet.md) with a
/// layer below: the copies of a hedged call overlap, and each calls the inner
/// service in its own attempt span, never the caller's or the operation's,
/// though the closure that builds a copy runs outside it (`BUILDS_IN_SPAN`).
/// The first copy stalls; the second, 250 ms later (long enough for the first
/// to have reached the server over loopback), answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedged_copy_s_inner_spans_hang_under_that_copy_s_attempt_span_and_its_traceparent_names_it() {
    let telemetry = Telemetry::install();
    let server = Server::start().await;
    server.script("/", [Reply::StallUntilClosed, Reply::ok("second").into()]);
    let hedge = HedgePolicy::builder().max_copies(2).delay(HedgeDelay::Fixed(Duration::from_millis(250)));
    let layer = RetryLayer::builder(policy()).meter(&telemetry.meter).hedge(hedge.build().expect("valid"));
    let mut client = layer.build().layer(SpanInCall(hyper_client::<Full<Bytes>>()));
    let call = send(&mut client, get(&server.url("/"))).instrument(tracing::info_span!("caller"));
    let response =
        tokio::time::timeout(Duration::from_secs(5), call).await.expect("in time").expect("answer");
    assert_eq!(response.into_body().collect().await.expect("body").to_bytes(), "second");

    assert_hedged_copies_own_their_spans(&telemetry.spans(), &server.seen());
}
