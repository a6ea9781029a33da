//! What only reqwest does to a URL before the middleware sees it, and where a
//! middleware below it starts its spans, against a real HTTP server on
//! 127.0.0.1 with tokio's paused clock (the wall clock for a hedged call, whose
//! second copy after its delay is a claim about real time). Everything the
//! middleware shares with the tower layer is specified once for both, in
//! retryscope-conformance's `tests/middleware.rs`.

use opentelemetry::trace::SpanKind;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope::{Jitter, Policy};
use retryscope_reqwest::RetryMiddleware;
use retryscope_reqwest::prelude::*;
use retryscope_test_support::telemetry::{Telemetry, assert_hedged_copies_own_their_spans, attr};
use retryscope_test_support::{Reply, Server};
use std::time::Duration;
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

/// A middleware below the retry middleware that starts a span of its own
/// around the rest of the chain, as a tracing middleware does.
struct SpanBelow;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for SpanBelow {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let span = tracing::info_span!("below");
        tracing::Instrument::instrument(next.run(request, extensions), span).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_middleware_below_starts_its_spans_in_the_attempt_span() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/", [Reply::status(503), Reply::ok("ok")]);
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    let client = ClientBuilder::new(inner)
        .with(RetryMiddleware::builder(policy()).meter(&t.meter).build())
        .with(SpanBelow)
        .build();
    let response = client.get(format!("http://{}/", server.addr)).send().await.expect("response");
    assert_eq!(response.status(), 200);
    // The attempt's closure is not run in its span (`BUILDS_IN_SPAN`), but
    // the chain below is the attempt's future, polled in it.
    let spans = t.spans();
    let mut attempts: Vec<_> = spans.iter().filter(|s| s.span_kind == SpanKind::Client).collect();
    attempts.sort_by_key(|s| s.start_time);
    let mut below: Vec<_> = spans.iter().filter(|s| s.name == "below").collect();
    below.sort_by_key(|s| s.start_time);
    assert_eq!((attempts.len(), below.len()), (2, 2), "two attempts, each with its span below");
    for (attempt, below) in attempts.iter().zip(&below) {
        assert_eq!(
            below.parent_span_id,
            attempt.span_context.span_id(),
            "the span below is the attempt's child"
        );
    }
}

/// "Hedging × operation spans" (docs/guide/where-features-meet.md) with a
/// middleware below: the copies of a hedged call overlap, and each polls the
/// chain below in its own attempt span, never the caller's or the operation's,
/// though the closure that builds a copy runs outside it (`BUILDS_IN_SPAN`).
/// The first copy stalls; the second, 250 ms later (long enough for the first
/// to have reached the server over loopback), answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedged_copy_s_inner_spans_hang_under_that_copy_s_attempt_span_and_its_traceparent_names_it() {
    let t = Telemetry::install();
    let server = Server::start().await;
    server.script("/", [Reply::StallUntilClosed, Reply::ok("second").into()]);
    let hedge = HedgePolicy::builder().max_copies(2).delay(HedgeDelay::Fixed(Duration::from_millis(250)));
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    let client = ClientBuilder::new(inner)
        .with(RetryMiddleware::builder(policy()).meter(&t.meter).hedge(hedge.build().expect("valid")).build())
        .with(SpanBelow)
        .build();
    let call = client.get(server.url("/")).send().instrument(tracing::info_span!("caller"));
    let response =
        tokio::time::timeout(Duration::from_secs(5), call).await.expect("in time").expect("answer");
    assert_eq!(response.text().await.expect("body"), "second");

    assert_hedged_copies_own_their_spans(&t.spans(), &server.seen());
}
