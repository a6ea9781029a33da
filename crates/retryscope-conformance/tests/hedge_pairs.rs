//! Hedging where it meets the body rule and the operation spans, for both
//! integrations, on real loopback servers and the wall clock (a copy after
//! its delay is a claim about real time, so the bounds are generous).

use bytes::Bytes;
use opentelemetry::trace::SpanKind;
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope::{ErrorType, Policy, Verdict};
use retryscope_test_support::body_server::{Answer as Serve, BodyServer, feed};
use retryscope_test_support::telemetry::{Telemetry, attr};
use retryscope_test_support::{Reply, Server};
use retryscope_tower::{BodyLimit, BodyRule};
use std::time::{Duration, Instant};
use tracing::Instrument;

mod common;

use common::{BOTH, Call, Setup};

const TRY_AGAIN: ErrorType = ErrorType::Kind("try_again");

/// Reads JSON 200s; retries those whose body says "try again".
struct TryAgain;

impl BodyRule for TryAgain {
    fn wants_body(&self, status: http::StatusCode, headers: &http::HeaderMap) -> bool {
        let json = headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
        status == http::StatusCode::OK && json
    }

    fn verdict(&self, _: http::StatusCode, _: &http::HeaderMap, body: &[u8]) -> Option<Verdict> {
        body.windows(9).any(|w| w == b"try again").then_some(Verdict::retryable(TRY_AGAIN))
    }
}

/// Up to three copies, the next one `delay` after the last.
fn hedge(delay: Duration) -> HedgePolicy {
    HedgePolicy::builder()
        .max_copies(3)
        .delay(HedgeDelay::Fixed(delay))
        .build()
        .expect("valid hedging policy")
}

/// A hedged GET whose first copy answers a 200 that says "try again" in its
/// body: the rule reads it inside the copy, the copy counts as failed (the
/// next copy goes at once, not after the 60 s hedge delay), and the caller
/// gets the second copy's body whole, never the first's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedged_get_whose_first_body_says_try_again_sends_the_next_copy_at_once() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = BodyServer::start(vec![
            Serve::Json(r#"{"status":"try again"}"#),
            Serve::Json(r#"{"status":"ok"}"#),
        ])
        .await;
        let setup = Setup::new(Policy::interactive())
            .hedge(hedge(Duration::from_secs(60)))
            .retry_on_body(BodyLimit::new(1024).expect("a valid limit"), TryAgain)
            .meter(&t);
        let client = integration.client(setup);
        let started = Instant::now();
        let response = client.send(Call::get(server.url("/report"))).await.expect("the second copy answers");
        let took = started.elapsed();
        assert_eq!(response.status, 200, "{integration:?}");
        assert_eq!(response.text().await, r#"{"status":"ok"}"#, "{integration:?}");
        eprintln!("{integration:?}: try-again copy replaced in {took:?}");
        assert!(took < Duration::from_secs(5), "{integration:?}: waited for the hedge delay: {took:?}");
        assert_eq!(server.methods().len(), 2, "{integration:?}");

        let mut copies: Vec<_> = t.spans().into_iter().filter(|s| s.span_kind == SpanKind::Client).collect();
        copies.sort_by_key(|s| s.start_time);
        assert_eq!(copies.len(), 2, "{integration:?}: {copies:#?}");
        assert_eq!(attr(&copies[0], "error.type").as_deref(), Some("try_again"), "{integration:?}");
        assert_eq!(attr(&copies[1], "error.type"), None, "{integration:?}");
        assert_eq!(attr(&copies[1], "retryscope.hedge.outcome").as_deref(), Some("won"), "{integration:?}");
    }
}

/// A hedged GET whose first copy's selected body stalls after the head: the
/// read belongs to the copy, so the hedge delay still sends the second copy,
/// which wins; the stalled copy is cancelled, and its half-read body never
/// reaches the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedged_get_whose_first_body_stalls_is_answered_by_the_next_copy() {
    for integration in BOTH {
        let t = Telemetry::install();
        let (sender, receiver) = feed();
        let server =
            BodyServer::start(vec![Serve::Fed("application/json", receiver), Serve::Json(r#"{"n":2}"#)])
                .await;
        sender.send(Bytes::from_static(b"{\"n\":")).await.expect("the first chunk");
        let setup = Setup::new(Policy::interactive())
            .hedge(hedge(Duration::from_millis(200)))
            .retry_on_body(BodyLimit::new(1024).expect("a valid limit"), TryAgain)
            .meter(&t);
        let client = integration.client(setup);
        let started = Instant::now();
        let response = client.send(Call::get(server.url("/report"))).await.expect("the second copy answers");
        let took = started.elapsed();
        assert_eq!(response.text().await, r#"{"n":2}"#, "{integration:?}");
        eprintln!("{integration:?}: stalled body replaced in {took:?}");
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(5),
            "{integration:?}: {took:?}"
        );
        let outcomes: Vec<_> = t
            .spans()
            .iter()
            .filter(|s| s.span_kind == SpanKind::Client)
            .map(|s| attr(s, "retryscope.hedge.outcome"))
            .collect();
        assert!(
            outcomes.contains(&Some("won".into())) && outcomes.contains(&Some("cancelled".into())),
            "{integration:?}: {outcomes:?}"
        );
        drop(sender);
    }
}

/// With operation spans, a hedged call has one INTERNAL operation span under
/// the caller's span, and every copy's CLIENT span — the winner's and the
/// cancelled one's — is its child, in the caller's trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedged_call_has_one_operation_span_over_its_copies() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/item", [Reply::StallUntilClosed, Reply::ok("second").into()]);
        let setup = Setup::new(Policy::interactive())
            .hedge(hedge(Duration::from_millis(100)))
            .meter(&t)
            .operation_spans();
        let client = integration.client(setup);
        let call = client.send(Call::get(server.url("/item")));
        let response = call.instrument(tracing::info_span!("caller")).await.expect("the second copy answers");
        assert_eq!(response.text().await, "second", "{integration:?}");

        let spans = t.spans();
        let caller = spans.iter().find(|s| s.name == "caller").expect("the caller's span");
        let operations: Vec<_> =
            spans.iter().filter(|s| s.span_kind == SpanKind::Internal && s.name != "caller").collect();
        let [operation] = operations[..] else { panic!("{integration:?}: one operation span: {spans:#?}") };
        assert_eq!(operation.parent_span_id, caller.span_context.span_id(), "{integration:?}");
        let copies: Vec<_> = spans.iter().filter(|s| s.span_kind == SpanKind::Client).collect();
        assert_eq!(copies.len(), 2, "{integration:?}: {spans:#?}");
        for copy in &copies {
            assert_eq!(copy.parent_span_id, operation.span_context.span_id(), "{integration:?}: {copy:#?}");
            assert_eq!(copy.span_context.trace_id(), caller.span_context.trace_id(), "{integration:?}");
            assert_eq!(attr(copy, "retryscope.hedge").as_deref(), Some("true"), "{integration:?}");
        }
        // The traceparent each copy sent names its own span.
        let sent: Vec<String> = server
            .seen()
            .iter()
            .filter_map(|s| {
                s.headers.get("traceparent").and_then(|tp| tp.split('-').nth(2)).map(str::to_owned)
            })
            .collect();
        let ids: Vec<String> = copies.iter().map(|c| c.span_context.span_id().to_string()).collect();
        assert_eq!(sent.len(), 2, "{integration:?}: {sent:?}");
        assert!(sent.iter().all(|id| ids.contains(id)), "{integration:?}: {sent:?} vs {ids:?}");
    }
}
