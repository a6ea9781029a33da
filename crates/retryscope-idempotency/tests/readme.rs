//! The README's section "Idempotency keys: the server side", as written there
//! (the Redis URL from `RETRYSCOPE_REDIS_URL`), served on 127.0.0.1 and called
//! the way a retrying client calls it.

mod support;

use axum::{Router, routing::post};
use retryscope_idempotency::{IdempotencyLayer, MemoryStore};
use support::{send, serve};

async fn create_order(body: String) -> String {
    format!("created {body}")
}

#[tokio::test]
async fn the_readme_memory_store_runs_a_keyed_post_once() {
    let app: Router = Router::new()
        .route("/orders", post(create_order))
        .layer(IdempotencyLayer::new(MemoryStore::default()).require_key());

    let addr = serve(app).await;
    let first = send(addr, "/orders", Some("\"7c1f\""), "book").await;
    let retry = send(addr, "/orders", Some("\"7c1f\""), "book").await;
    assert_eq!((first.status, first.body.as_str(), first.replayed()), (200, "created book", false));
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (200, "created book", true));
    assert_eq!(send(addr, "/orders", None, "book").await.status, 400);
    assert_eq!(send(addr, "/orders", Some("\"7c1f\""), "pen").await.status, 422);
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn the_readme_redis_store_runs_a_keyed_post_once() -> Result<(), Box<dyn std::error::Error>> {
    use retryscope_idempotency::RedisStore;

    let Some(url) = retryscope_test_support::external::required("RETRYSCOPE_REDIS_URL", "a Redis 7") else {
        return Ok(());
    };
    let client = redis::Client::open(url.as_str())?;
    let store = RedisStore::connect(client).await?;
    let app: Router =
        Router::new().route("/orders", post(create_order)).layer(IdempotencyLayer::new(store).require_key());

    let addr = serve(app).await;
    // A key no earlier run used (the README's store keeps keys 24 h).
    let key = format!(
        "\"readme-{}\"",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos()
    );
    let first = send(addr, "/orders", Some(&key), "book").await;
    let retry = send(addr, "/orders", Some(&key), "book").await;
    assert_eq!((first.status, first.replayed()), (200, false));
    assert_eq!((retry.status, retry.body.as_str(), retry.replayed()), (200, "created book", true));
    Ok(())
}
