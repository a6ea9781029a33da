//! The README's "Hedging over HTTP" lines, as written there, against a real
//! HTTP/1.1 server on 127.0.0.1, on the wall clock. What hedging does is
//! specified once for both integrations, in retryscope-conformance's
//! `tests/hedging.rs`.

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
