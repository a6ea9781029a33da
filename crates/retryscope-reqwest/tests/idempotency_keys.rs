//! The `.idempotency_keys()` lines of docs/guide/idempotency.md, as written there, against a real
//! HTTP server on 127.0.0.1 that loses the first response. What the option
//! does is specified once for both integrations, in retryscope-conformance's
//! `tests/idempotency_keys.rs`. Paused clock: the claims are about which
//! requests go out, not about time.

use retryscope::Policy;
use retryscope_reqwest::RetryMiddleware;
use retryscope_reqwest::prelude::*;
use retryscope_test_support::keys::uuid_v4_in_sf_string;
use retryscope_test_support::{Reply, Server};

/// The `header` of every request the server saw at `path`, in order.
fn keys_seen(server: &Server, path: &str, header: &str) -> Vec<Option<String>> {
    server.seen().into_iter().filter(|s| s.path == path).map(|s| s.headers.get(header).cloned()).collect()
}

#[tokio::test(start_paused = true)]
async fn the_readme_snippet_retries_a_lost_order_with_one_key() -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::start().await;
    server.script("/orders", [Reply::DropMidResponse, Reply::ok("created").into()]);
    let url = server.url("/orders");
    // The guide's lines, with the server's address in place of 127.0.0.1:8080.
    let middleware = RetryMiddleware::builder(Policy::interactive()).idempotency_keys().build();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(middleware).build();
    let response = client.post(&url).body(r#"{"sku":7}"#).send().await?;
    assert_eq!(response.text().await?, "created");
    let keys = keys_seen(&server, "/orders", "idempotency-key");
    assert_eq!(keys.len(), 2);
    assert!(keys[0].as_deref().and_then(uuid_v4_in_sf_string).is_some(), "{keys:?}");
    assert_eq!(keys[0], keys[1]);
    Ok(())
}
