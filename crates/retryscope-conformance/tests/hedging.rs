//! Hedged HTTP requests, for both integrations, against a real HTTP/1.1 server
//! on 127.0.0.1, on the wall clock: a copy after its delay is a claim about
//! real time, so the bounds are generous.

use opentelemetry::trace::SpanKind;
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope::{Policy, RetryBudget};
use retryscope_test_support::telemetry::{Telemetry, attr};
use retryscope_test_support::{Reply, Server};
use std::time::{Duration, Instant};

mod common;

use common::{BOTH, Call, Client, Integration, Setup};

/// Up to three copies, the next one `delay` after the last.
fn hedge(delay: Duration) -> HedgePolicy {
    HedgePolicy::builder()
        .max_copies(3)
        .delay(HedgeDelay::Fixed(delay))
        .build()
        .expect("valid hedging policy")
}

/// A client of `integration` that hedges with `hedge`.
fn client(integration: Integration, telemetry: &Telemetry, hedge: HedgePolicy) -> Client {
    integration.client(Setup::new(Policy::interactive()).hedge(hedge).meter(telemetry))
}

/// Waits (up to 5 s) until the server has seen `n` stalled connections closed.
async fn closed(server: &Server, n: usize) -> Vec<String> {
    let until = Instant::now() + Duration::from_secs(5);
    while server.closed().len() < n && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.closed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_get_is_answered_by_its_second_copy_and_the_first_connection_is_closed() {
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let server = Server::start().await;
        server.script("/item", [Reply::StallUntilClosed, Reply::ok("from the second copy").into()]);

        let started = Instant::now();
        let client = client(integration, &telemetry, hedge(Duration::from_millis(200)));
        let response = client.send(Call::get(server.url("/item"))).await.expect("the second copy answers");
        assert_eq!(response.text().await, "from the second copy", "{integration:?}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(5),
            "{integration:?}: {took:?}"
        );

        assert_eq!(server.seen().len(), 2, "{integration:?}");
        // The second copy says which attempt it is; the first says nothing.
        let attempts: Vec<Option<String>> =
            server.seen().iter().map(|s| s.headers.get("retry-attempt").cloned()).collect();
        assert_eq!(attempts, [None, Some("2".to_owned())], "{integration:?}");
        // Cancelling an HTTP/1.1 request closes its connection: the server sees it.
        assert_eq!(closed(&server, 1).await, ["/item"], "{integration:?}");

        let spans: Vec<_> =
            telemetry.spans().into_iter().filter(|s| s.span_kind == SpanKind::Client).collect();
        assert_eq!(spans.len(), 2, "{integration:?}: {spans:#?}");
        for span in &spans {
            assert_eq!(attr(span, "retryscope.hedge").as_deref(), Some("true"), "{integration:?}: {span:#?}");
            assert_eq!(attr(span, "http.request.method").as_deref(), Some("GET"), "{integration:?}");
        }
        let outcomes: Vec<Option<String>> =
            spans.iter().map(|s| attr(s, "retryscope.hedge.outcome")).collect();
        assert!(
            outcomes.contains(&Some("won".into())) && outcomes.contains(&Some("cancelled".into())),
            "{integration:?}: {outcomes:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_sends_the_next_copy_at_once_and_a_404_ends_the_call() {
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let server = Server::start().await;
        server.script("/item", [Reply::status(503), Reply::ok("second")]);
        server.script("/gone", [Reply::status(404)]);
        let client = client(integration, &telemetry, hedge(Duration::from_secs(60)));

        let started = Instant::now();
        let response = client.send(Call::get(server.url("/item"))).await;
        assert_eq!(response.expect("the second copy answers").status, 200, "{integration:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "{integration:?}: {:?}", started.elapsed());

        let response = client.send(Call::get(server.url("/gone"))).await;
        assert_eq!(response.expect("a 404 is an answer").status, 404, "{integration:?}");
        assert_eq!(server.seen().iter().filter(|s| s.path == "/gone").count(), 1, "{integration:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_is_hedged_a_post_never_is_and_a_keyed_post_is_retried_instead() {
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let server = Server::start().await;
        let client = client(integration, &telemetry, hedge(Duration::from_millis(200)));

        // Slow enough that a hedged request would have had its second copy.
        server.script("/orders", [Reply::StallUntilClosed]);
        let post = client.send(Call::post(server.url("/orders")).header("x-request-id", "order-1"));
        let outcome = tokio::time::timeout(Duration::from_secs(1), post).await;
        assert!(outcome.is_err(), "{integration:?}: the stalled POST is still waiting on its only attempt");
        assert_eq!(server.seen().len(), 1, "{integration:?}: one POST, never a copy");
        assert_eq!(server.executions("order-1"), 1, "{integration:?}");
        server.assert_no_unsafe_request_ran_twice();

        server.script("/orders/7", [Reply::StallUntilClosed, Reply::ok("replaced").into()]);
        let put = client.send(Call::put(server.url("/orders/7"))).await;
        assert_eq!(put.expect("the PUT's second copy answers").status, 200, "{integration:?}");
        assert_eq!(server.seen().iter().filter(|s| s.path == "/orders/7").count(), 2, "{integration:?}");

        server.script("/payments", [Reply::StallUntilClosed, Reply::ok("paid").into()]);
        let keyed = Call::post(server.url("/payments")).header("idempotency-key", "pay-1");
        let paid = client.send(keyed).await;
        assert_eq!(paid.expect("a keyed POST is retried").status, 200, "{integration:?}");
        // Retried after its attempt timeout, never hedged: a copy beside a
        // running keyed POST would only meet the server's 409.
        let payments: Vec<_> = server.seen().into_iter().filter(|s| s.path == "/payments").collect();
        let attempts: Vec<Option<&str>> =
            payments.iter().map(|s| s.headers.get("retry-attempt").map(String::as_str)).collect();
        assert_eq!(attempts, [None, Some("2")], "{integration:?}");
        let keyed_spans: Vec<_> = telemetry
            .spans()
            .into_iter()
            .filter(|s| s.span_kind == SpanKind::Client)
            .filter(|s| attr(s, "url.full").is_some_and(|url| url.ends_with("/payments")))
            .collect();
        assert_eq!(keyed_spans.len(), 2, "{integration:?}: {keyed_spans:#?}");
        assert!(
            keyed_spans.iter().all(|s| attr(s, "retryscope.hedge").is_none()),
            "{integration:?}: a keyed POST is not hedged: {keyed_spans:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_dependency_is_hedged_only_within_its_retry_budget() {
    // Hedges are charged like retries: at most 10 % of requests here (no
    // reserve, so that the share is all there is).
    fn budget() -> RetryBudget {
        RetryBudget::builder().ratio(0.1).min_per_second(0).build().expect("valid budget")
    }
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let server = Server::start().await;
        server.script("/item", vec![Reply::status(503); 400]);
        let setup = Setup::new(Policy::interactive())
            .hedge(hedge(Duration::from_millis(10)))
            .budget_per_dependency(budget)
            .no_breaker()
            .meter(&telemetry);
        let client = integration.client(setup);

        let calls = 100;
        for _ in 0..calls {
            let response = client.send(Call::get(server.url("/item"))).await.expect("a 503 is an answer");
            assert_eq!(response.status, 503, "{integration:?}");
        }
        let hedges = server.seen().len() - calls;
        eprintln!("{integration:?}: {hedges} hedges for {calls} calls to a dead dependency");
        // Without the budget every call would send 3 copies (200 hedges in all).
        assert!(hedges > 0 && hedges <= 11, "{integration:?}: {hedges} hedges for {calls} calls");
    }
}
