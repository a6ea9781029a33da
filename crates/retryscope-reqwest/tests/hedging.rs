//! Hedged requests through the middleware against a real HTTP/1.1 server on
//! 127.0.0.1, on the wall clock: a copy after its delay is a claim about real
//! time, so the bounds are generous.

use retryscope_test_support as support;

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope::{Policy, RetryBudget};
use retryscope_reqwest::RetryMiddleware;
use std::time::{Duration, Instant};
use support::telemetry::{Telemetry, attr};
use support::{Reply, Server};

fn hedge(delay: Duration) -> HedgePolicy {
    HedgePolicy::builder()
        .max_copies(3)
        .delay(HedgeDelay::fixed(delay))
        .build()
        .expect("valid hedging policy")
}

fn client(telemetry: &Telemetry, hedge: HedgePolicy) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    let middleware =
        RetryMiddleware::builder(Policy::interactive()).hedge(hedge).meter(&telemetry.meter).build();
    ClientBuilder::new(inner).with(middleware).build()
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
    let telemetry = Telemetry::install();
    let server = Server::start().await;
    server.script("/item", [Reply::StallUntilClosed, Reply::ok("second copy")]);

    let started = Instant::now();
    let response = client(&telemetry, hedge(Duration::from_millis(200)))
        .get(server.url("/item"))
        .send()
        .await
        .expect("the second copy answers");
    assert_eq!(response.text().await.expect("body"), "second copy");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(200) && took < Duration::from_secs(5), "{took:?}");

    assert_eq!(server.seen().len(), 2);
    // reqwest closes an HTTP/1.1 connection whose request was dropped.
    assert_eq!(closed(&server, 1).await, ["/item"]);

    let spans: Vec<_> = telemetry
        .spans()
        .into_iter()
        .filter(|s| s.span_kind == opentelemetry::trace::SpanKind::Client)
        .collect();
    assert_eq!(spans.len(), 2, "{spans:#?}");
    for span in &spans {
        assert_eq!(attr(span, "retryscope.hedge").as_deref(), Some("true"), "{span:#?}");
        assert_eq!(attr(span, "http.request.method").as_deref(), Some("GET"));
    }
    let outcomes: Vec<Option<String>> = spans.iter().map(|s| attr(s, "retryscope.hedge.outcome")).collect();
    assert!(
        outcomes.contains(&Some("won".into())) && outcomes.contains(&Some("cancelled".into())),
        "{outcomes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_without_an_idempotency_key_is_sent_once() {
    let telemetry = Telemetry::install();
    let server = Server::start().await;
    server.script("/orders", [Reply::StallUntilClosed]);
    let client = client(&telemetry, hedge(Duration::from_millis(100)));

    let post = client.post(server.url("/orders")).header("x-request-id", "order-1").send();
    assert!(tokio::time::timeout(Duration::from_secs(1), post).await.is_err(), "still on its only attempt");
    assert_eq!(server.executions("order-1"), 1);
    server.assert_no_unsafe_request_ran_twice();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_dependency_is_hedged_only_within_its_retry_budget() {
    let telemetry = Telemetry::install();
    let server = Server::start().await;
    server.script("/item", vec![Reply::status(503); 400]);
    // Hedges are charged like retries: at most 10 % of requests here (no
    // reserve, so that the share is all there is).
    let budget = || RetryBudget::builder().ratio(0.1).min_per_second(0).build().expect("valid budget");
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    let middleware = RetryMiddleware::builder(Policy::interactive())
        .hedge(hedge(Duration::from_millis(10)))
        .budget_per_dependency(budget)
        .no_breaker()
        .meter(&telemetry.meter)
        .build();
    let client = ClientBuilder::new(inner).with(middleware).build();

    let calls = 100;
    for _ in 0..calls {
        let response = client.get(server.url("/item")).send().await.expect("a 503 is an answer");
        assert_eq!(response.status(), 503);
    }
    let sent = server.seen().len();
    let hedges = sent - calls;
    eprintln!("{hedges} hedges for {calls} calls to a dead dependency");
    // Without the budget every call would send 3 copies (200 hedges in all).
    assert!(hedges > 0 && hedges <= 11, "{hedges} hedges for {calls} calls");
}

/// The README's "Hedging over HTTP" lines, as written there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_hedging_example_works_as_written() -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::start().await;
    server.script("/inventory", [Reply::StallUntilClosed, Reply::ok("in stock")]);

    use retryscope::hedge::{HedgeDelay, HedgePolicy};

    let hedge = HedgePolicy::builder().max_copies(2).delay(HedgeDelay::percentile(0.95)).build()?;
    let middleware =
        retryscope_reqwest::RetryMiddleware::builder(retryscope::Policy::interactive()).hedge(hedge).build();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(middleware).build();

    // Nothing measured yet: the percentile delay's fallback sends the second copy.
    let body = client.get(server.url("/inventory")).send().await?.text().await?;
    assert_eq!(body, "in stock");
    assert_eq!(server.seen().len(), 2);
    assert_eq!(closed(&server, 1).await, ["/inventory"]);
    Ok(())
}
