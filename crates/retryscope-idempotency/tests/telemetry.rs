//! What the layer reports: `retryscope.idempotency.requests` by outcome and
//! route, and the outcome on the server's span — through a real axum server
//! with the layer as a `route_layer` (so axum's matched route names it).

mod support;

use std::time::Duration;

use axum::Router;
use axum::extract::{MatchedPath, Request};
use axum::middleware::{Next, from_fn};
use axum::routing::post;
use retryscope_idempotency::telemetry::{OUTCOME, Outcome, REQUESTS};
use retryscope_idempotency::{IdempotencyLayer, MemoryStore};
use retryscope_test_support::telemetry::{Telemetry, attr};
use support::{send, send_with, serve};
use tracing::Instrument;

/// The server's own span around each request, as a tracing middleware makes it.
async fn server_span(request: Request, next: Next) -> axum::response::Response {
    let span = tracing::info_span!("POST /orders/{id}");
    next.run(request).instrument(span).await
}

// A current-thread runtime: the server's tasks see this thread's subscriber.
#[tokio::test]
async fn outcomes_are_counted_per_route_and_set_on_the_server_span() {
    let telemetry = Telemetry::install();
    let layer = IdempotencyLayer::new(MemoryStore::default())
        .meter(&telemetry.meter)
        .route(|parts| parts.extensions.get::<MatchedPath>().map(|path| path.as_str().to_owned()));
    let router = Router::new()
        .route("/orders/{id}", post(|| async { "created" }))
        .route_layer(layer)
        .layer(from_fn(server_span));
    let addr = serve(router).await;

    assert_eq!(send(addr, "/orders/1", Some("\"a\""), "x").await.status, 200);
    assert!(send(addr, "/orders/1", Some("\"a\""), "x").await.replayed());
    assert_eq!(send(addr, "/orders/1", Some("\"a\""), "y").await.status, 422);
    assert_eq!(send(addr, "/orders/2", Some("bare"), "x").await.status, 400);
    assert_eq!(send(addr, "/orders/3", None, "x").await.status, 200);
    assert_eq!(send_with(addr, http::Method::PUT, "/orders/3", vec![], "").await.status, 405);

    let route = ("http.route", "/orders/{id}");
    for (outcome, count) in [
        (Outcome::Executed, 1),
        (Outcome::Replayed, 1),
        (Outcome::Mismatch, 1),
        (Outcome::InvalidKey, 1),
        (Outcome::Unkeyed, 1),
        (Outcome::Conflict, 0),
    ] {
        let seen = telemetry.counter(REQUESTS, &[(OUTCOME, outcome.as_str()), route]);
        assert_eq!(seen, count, "{outcome:?}");
    }
    tokio::time::sleep(Duration::from_millis(50)).await; // the last span ends after its response
    let outcomes: Vec<String> = telemetry.spans().iter().filter_map(|span| attr(span, OUTCOME)).collect();
    assert_eq!(outcomes, ["executed", "replayed", "mismatch", "invalid_key", "unkeyed"]);
}

#[test]
fn every_outcome_has_a_distinct_snake_case_value() {
    let values: std::collections::BTreeSet<&str> =
        Outcome::ALL.iter().map(|outcome| outcome.as_str()).collect();
    assert_eq!(values.len(), Outcome::ALL.len());
    assert!(values.iter().all(|value| value.chars().all(|c| c.is_ascii_lowercase() || c == '_')));
}
