//! A queue of the test's own on the real nats-server (`RETRYSCOPE_NATS_URL`),
//! a test error, and waiting for counts.

#![allow(dead_code, unreachable_pub)]

pub mod own_nats;

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
    let queue = NatsQueue::open(client.clone(), queue_config(&stream, &subject, ack_wait))
        .await
        .expect("streams and consumer");
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

/// The crash tests' AckWait: claims are renewed every 500 ms and last 1.5 s.
pub const CRASH_ACK_WAIT: Duration = Duration::from_millis(1500);
/// A third of [`CRASH_ACK_WAIT`]: how often a running job's claim is renewed.
pub const CRASH_RENEWAL: Duration = Duration::from_millis(500);

/// The Redis server the crash tests share their key store on.
pub fn redis_url() -> Option<String> {
    retryscope_test_support::external::required("RETRYSCOPE_REDIS_URL", "a redis-server 7+")
}

/// A Redis key store whose keys start with `prefix` (one per test).
pub async fn redis_store(redis_url: &str, prefix: &str) -> retryscope_idempotency::RedisStore {
    let client = redis::Client::open(redis_url).expect("a valid Redis URL");
    retryscope_idempotency::RedisStore::connect(client)
        .await
        .expect("redis-server answers")
        .prefix(format!("{prefix}:"))
}

/// The configuration [`queue`] opened `stream` with, for a worker process to
/// open the same queue.
pub fn queue_config(stream: &str, subject: &str, ack_wait: Duration) -> NatsQueueConfig {
    NatsQueueConfig::new(stream, [subject.to_owned()], "workers")
        .ack_wait(ack_wait)
        .dead_letters(format!("{stream}_DEAD"), format!("dead_{}", stream.to_lowercase()))
}

/// Resolves once `child` prints a line containing `marker` on its stdout
/// (which must be piped): how a crash test knows its worker process got to
/// the point it is killed at.
pub fn said_on_stdout(
    child: &mut std::process::Child,
    marker: &'static str,
) -> tokio::sync::oneshot::Receiver<()> {
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("the child's stdout is piped");
    let (said, heard) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut said = Some(said);
        for line in std::io::BufReader::new(stdout).lines() {
            if line.is_ok_and(|l| l.contains(marker))
                && let Some(said) = said.take()
            {
                let _ = said.send(());
            }
        }
    });
    heard
}

/// This test binary again, to run only `test` — a worker of its own when
/// `child_var` is set, here to `q`'s stream — on `q`'s subject (`CHILD_SUBJECT`),
/// keyed in Redis under `prefix` (`CHILD_PREFIX`), its stdout piped for
/// [`said_on_stdout`]. Add what else it needs, then spawn it.
pub fn worker_process(
    test: &str,
    child_var: &str,
    q: &TestQueue,
    prefix: &str,
    nats_url: &str,
    redis_url: &str,
) -> std::process::Command {
    let exe = std::env::current_exe().expect("the test binary");
    let mut command = std::process::Command::new(exe);
    command
        .args(["--exact", test, "--nocapture"])
        .env(child_var, &q.stream)
        .env("CHILD_SUBJECT", &q.subject)
        .env("CHILD_PREFIX", prefix)
        .env("RETRYSCOPE_NATS_URL", nats_url)
        .env("RETRYSCOPE_REDIS_URL", redis_url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    command
}

/// `DeadLetterStore` for a broker in front of another (`$front<B>`, holding
/// it as `inner`): every call is the inner broker's. For the tests' brokers
/// that fail one thing and pass the rest through.
#[allow(unused_macros, reason = "not every test binary has such a broker")]
macro_rules! dead_letters_of_inner {
    ($front:ident) => {
        impl<B: retryscope_jobs::DeadLetterStore> retryscope_jobs::DeadLetterStore for $front<B> {
            async fn list_dead(
                &self,
                from: u64,
                limit: usize,
            ) -> Result<Vec<retryscope_jobs::broker::StoredDead>, retryscope_jobs::BrokerError> {
                self.inner.list_dead(from, limit).await
            }

            async fn get_dead(
                &self,
                id: u64,
            ) -> Result<Option<retryscope_jobs::broker::StoredDead>, retryscope_jobs::BrokerError> {
                self.inner.get_dead(id).await
            }

            async fn remove_dead(&self, id: u64) -> Result<bool, retryscope_jobs::BrokerError> {
                self.inner.remove_dead(id).await
            }

            async fn dead_depth(&self) -> Result<u64, retryscope_jobs::BrokerError> {
                self.inner.dead_depth().await
            }

            fn dead_letters_name(&self) -> &str {
                self.inner.dead_letters_name()
            }
        }
    };
}
#[allow(unused_imports, reason = "not every test binary has such a broker")]
pub(crate) use dead_letters_of_inner;
