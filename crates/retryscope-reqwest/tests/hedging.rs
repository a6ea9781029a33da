//! The "Hedging over HTTP" lines of docs/guide/hedging.md, as written there, against a real
//! HTTP/1.1 server on 127.0.0.1, on the wall clock. What hedging does is
//! specified once for both integrations, in retryscope-conformance's
//! `tests/hedging.rs`.

use retryscope_reqwest::prelude::*;
use retryscope_test_support::{Reply, Server};
use std::time::{Duration, Instant};

/// Waits (up to 5 s) until the server has seen `n` stalled connections closed.
async fn closed(server: &Server, n: usize) -> Vec<String> {
    let until = Instant::now() + Duration::from_secs(5);
    while server.closed().len() < n && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.closed()
}

/// The "Hedging over HTTP" lines of docs/guide/hedging.md, as written there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_hedging_example_works_as_written() -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::start().await;
    server.script("/inventory", [Reply::StallUntilClosed, Reply::ok("in stock").into()]);

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

/// The caller's own timeout is the whole hedged call's deadline, as it is a
/// retried call's: against a server that never answers, a hedged GET with a
/// 300 ms timeout ends after 300 ms with the deadline as its reason. Before,
/// reqwest applied the timeout to each copy, and the call ran one timeout per
/// copy (600 ms for two).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedged_requests_own_timeout_bounds_the_whole_call() -> Result<(), Box<dyn std::error::Error>> {
    use retryscope::hedge::{HedgeDelay, HedgePolicy};
    use retryscope::{RetryError, StopReason};

    let server = Server::start().await;
    server.script("/stalled", [Reply::Stall, Reply::Stall, Reply::Stall]);
    // A second copy after 200 ms; each copy allowed 5 s, the call 15 s.
    let hedge =
        HedgePolicy::builder().max_copies(2).delay(HedgeDelay::Fixed(Duration::from_millis(200))).build()?;
    let middleware = retryscope_reqwest::RetryMiddleware::builder(retryscope::Policy::interactive())
        .no_telemetry()
        .hedge(hedge)
        .build();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(middleware).build();

    let started = Instant::now();
    let result = client.get(server.url("/stalled")).timeout(Duration::from_millis(300)).send().await;
    let took = started.elapsed();
    let Err(reqwest_middleware::Error::Middleware(error)) = result else { panic!("no answer: {result:?}") };
    let gave_up = error.downcast_ref::<RetryError<reqwest_middleware::Error>>().expect("the engine's error");
    assert_eq!(gave_up.reason(), StopReason::DeadlineExceeded, "{gave_up}");
    assert!(took >= Duration::from_millis(300) && took < Duration::from_millis(500), "{took:?}");
    assert_eq!(server.seen().len(), 2, "the second copy went at 200 ms, within the deadline");
    Ok(())
}
