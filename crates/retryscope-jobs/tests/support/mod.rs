//! A queue of the test's own on the real nats-server (`RETRYSCOPE_NATS_URL`),
//! a test error, and waiting for counts.

#![allow(dead_code, unreachable_pub)]

use retryscope::{ErrorType, Jitter, Policy, Transient, Verdict};
use retryscope_jobs::nats::{NatsQueue, NatsQueueConfig};
use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub fn nats_url() -> Option<String> {
    retryscope_test_support::external::required("RETRYSCOPE_NATS_URL", "a nats-server 2.9+ with -js")
}

/// A name no other test (or earlier run) shares.
pub fn unique(test: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{test}_{nanos}")
}

pub struct TestQueue {
    pub queue: NatsQueue,
    pub client: async_nats::Client,
    pub subject: String,
    pub stream: String,
}

pub async fn queue(url: &str, test: &str, ack_wait: Duration) -> TestQueue {
    let client = async_nats::connect(url).await.expect("nats-server answers");
    let stream = unique(test).to_uppercase();
    let subject = format!("{}.work", stream.to_lowercase());
    let config = NatsQueueConfig::new(&stream, [subject.to_string()], "workers")
        .ack_wait(ack_wait)
        .dead_letters(format!("{stream}_DEAD"), format!("dead_{}", stream.to_lowercase()));
    let queue = NatsQueue::open(client.clone(), config).await.expect("streams and consumer");
    TestQueue { queue, client, subject, stream }
}

/// A fast policy: 10 ms base, 50 ms cap, no jitter, `attempts` attempts.
pub fn fast_policy(attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(50))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("a valid policy")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestError {
    Busy,
    Invalid,
}

impl fmt::Display for TestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TestError::Busy => f.write_str("the dependency is busy"),
            TestError::Invalid => f.write_str("the order is invalid"),
        }
    }
}

impl Transient for TestError {
    fn verdict(&self) -> Verdict {
        match self {
            TestError::Busy => Verdict::retryable(ErrorType::Status(503)),
            TestError::Invalid => Verdict::permanent(ErrorType::Status(422)),
        }
    }
}

/// Waits up to `limit` for `done` to hold.
pub async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

/// A worker running on a task of its own until [`Running::stop`].
pub struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// Runs what `run` makes of the shutdown signal (`|stopped| worker.run(stopped)`)
/// on its own task.
pub fn start<F>(run: impl FnOnce(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> F) -> Running
where
    F: Future<Output = ()> + Send + 'static,
{
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run(Box::pin(async {
        let _ = stopped.await;
    })));
    Running { stop, task }
}

impl Running {
    /// Signals the shutdown and waits until the worker has stopped.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.expect("the worker stops");
    }
}
