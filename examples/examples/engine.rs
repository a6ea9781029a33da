//! The retry engine on its own: a flaky dependency, a policy, and what happens.
//!
//! ```text
//! cargo run -p examples --example engine
//! ```
//!
//! A simulated dependency fails its first calls with transient errors, then
//! recovers. The engine retries with exponential backoff and full jitter, and
//! the `notify` hook prints every wait.

use retryscope::{Jitter, Policy, Retryable};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A dependency that fails its first `failures` calls.
struct FlakyService {
    calls: AtomicU32,
    failures: u32,
}

#[derive(Debug)]
enum ServiceError {
    Unavailable,
    NotFound,
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::Unavailable => f.write_str("503 service unavailable"),
            ServiceError::NotFound => f.write_str("404 not found"),
        }
    }
}

impl std::error::Error for ServiceError {}

impl FlakyService {
    async fn get(&self, key: &str) -> Result<String, ServiceError> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        tokio::time::sleep(Duration::from_millis(5)).await; // the call itself
        match (key, n <= self.failures) {
            ("missing", _) => Err(ServiceError::NotFound),
            (_, true) => Err(ServiceError::Unavailable),
            (_, false) => Ok(format!("value of {key} (call {n})")),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let policy = Policy::builder()
        .max_attempts(5)
        .base_delay(Duration::from_millis(50))
        .max_delay(Duration::from_secs(1))
        .jitter(Jitter::Full)
        .deadline(Duration::from_secs(3))
        .build()?;
    let service = FlakyService { calls: AtomicU32::new(0), failures: 3 };
    let started = Instant::now();

    println!("calling a dependency that fails 3 times, then recovers:");
    let value = (|| service.get("greeting"))
        .retry(policy)
        .when(|e: &ServiceError| matches!(e, ServiceError::Unavailable))
        .notify(|e: &ServiceError, delay: Duration| println!("  {e}; retrying in {delay:?}"))
        .await?;
    println!("  got {value:?} after {:?}\n", started.elapsed());

    println!("calling for a key that does not exist (a permanent error):");
    let err = (|| service.get("missing"))
        .retry(policy)
        .when(|e: &ServiceError| matches!(e, ServiceError::Unavailable))
        .await
        .expect_err("404 is permanent");
    println!("  {err}");
    Ok(())
}
