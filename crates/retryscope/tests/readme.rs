//! The README's quickstart for the engine, as written there, run against a
//! dependency that resets the connection twice and then answers.

use std::sync::atomic::{AtomicU32, Ordering};

static CALLS: AtomicU32 = AtomicU32::new(0);

// ---- from README.md, "Quickstart", unchanged except `fetch`'s body ----
use retryscope::{Policy, RetryBudget, Retryable};
use std::io::Error;

async fn fetch() -> Result<String, Error> {
    // The README's `fetch` answers at once; this one fails twice first.
    if CALLS.fetch_add(1, Ordering::SeqCst) < 2 {
        Err(std::io::ErrorKind::ConnectionReset.into())
    } else {
        Ok("payload".into())
    }
}

async fn call(budget: &RetryBudget) -> Result<String, retryscope::RetryError<Error>> {
    (|| fetch())
        .retry(Policy::interactive()) // 4 attempts of ≤ 5 s, 200 ms → 5 s full jitter, 15 s in all;
        // only transient errors (io::Error is `Transient`)
        .budget(budget) // retries ≤ 10 % of requests (+ 10/s), one budget per dependency
        .dependency("inventory")
        .await
}
// ---- end of the README's code ----

#[tokio::test(start_paused = true)]
async fn the_quickstart_retries_a_reset_connection_and_returns_the_answer() {
    let budget = RetryBudget::new();
    assert_eq!(call(&budget).await.expect("answered on the third attempt"), "payload");
    assert_eq!(CALLS.load(Ordering::SeqCst), 3);
}
