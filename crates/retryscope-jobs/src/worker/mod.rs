//! The worker: pulls deliveries with bounded concurrency and settles each one
//! (see [`process`] for how a delivery is decided).

mod builder;
mod execution;
pub(crate) mod builder_error {
    pub use super::builder::WorkerError;
}
mod attempts;
mod keys;
mod process;
mod requeue;

pub use builder::{Classifier, WorkerBuilder};

use crate::broker::{Broker, DeadLetterStore};
use crate::job::{Handler, WorkerStats};
use crate::telemetry::{self, DeadLetterDepth};
use keys::Keys;
use retryscope::Policy;
use retryscope::dependency::Dependency;
use retryscope::jobs::JobPolicy;
use retryscope_config::ConfigHandle;
use retryscope_idempotency::IdempotencyStore;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// A job worker on a [`Broker`]: see the [crate docs](crate).
pub struct Worker<B: Broker, E, S = retryscope_idempotency::MemoryStore> {
    inner: Arc<Inner<B, E, S>>,
}

pub(crate) struct Inner<B: Broker, E, S> {
    pub(crate) broker: B,
    pub(crate) handler: Box<dyn Handler<E>>,
    pub(crate) classify: Classifier<E>,
    pub(crate) policy: JobPolicy,
    /// One delivery is one attempt: the engine runs it under the handler
    /// timeout, the dependency's guards and the classification.
    pub(crate) attempt_policy: Policy,
    /// The builder's per-attempt timeout (`attempt_policy`'s deadline).
    pub(crate) timeout: Duration,
    /// Where each execution's policy comes from, when configured (issue 35).
    pub(crate) config: Option<ConfigHandle>,
    /// `override_policy`: wins over the file, not over its kill switch.
    pub(crate) own: Option<Policy>,
    /// `job_keyed_calls`: each execution of a keyed job runs in its key's
    /// scope, from which its HTTP calls derive their idempotency keys.
    pub(crate) job_keyed_calls: bool,
    pub(crate) guards: Option<Arc<Dependency>>,
    pub(crate) keys: Keys<S>,
    pub(crate) concurrency: usize,
    pub(crate) hold: Duration,
    pub(crate) fetch_wait: Duration,
    pub(crate) grace: Duration,
    pub(crate) depth_every: Duration,
    pub(crate) stats: Arc<WorkerStats>,
    pub(crate) warned_bare: AtomicBool,
    /// Set when the shutdown grace period is over: a job still running is
    /// abandoned and its delivery put back at once.
    pub(crate) abandon: tokio::sync::watch::Sender<bool>,
    pub(crate) telemetry: crate::telemetry::JobTelemetry,
}

impl<B: Broker, E, S> Worker<B, E, S>
where
    E: std::fmt::Display + Send + 'static,
    S: IdempotencyStore,
{
    /// What this worker has done so far.
    pub fn stats(&self) -> Arc<WorkerStats> {
        Arc::clone(&self.inner.stats)
    }
}

impl<B: Broker + DeadLetterStore, E, S> Worker<B, E, S>
where
    E: std::fmt::Display + Send + 'static,
    S: IdempotencyStore,
{
    /// Runs until `shutdown` completes, then stops pulling and lets the jobs
    /// in hand finish for the grace period (default 10 s). A job still
    /// running after it is abandoned (its handler future dropped) and put
    /// back with a `Nak` without delay, its key released, so another worker
    /// takes it at once; one the broker could not be told of within 2 s more
    /// is delivered again after its AckWait. Either way the key store keeps a
    /// job that did complete from running twice.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let inner = self.inner;
        let depth = Arc::new(DeadLetterDepth::default());
        let _gauge = telemetry::register_depth(inner.broker.dead_letters_name(), Arc::downgrade(&depth));
        let refresh = tokio::spawn(refresh_depth(Arc::clone(&inner), Arc::clone(&depth)));
        let slots = Arc::new(Semaphore::new(inner.concurrency));
        let mut tasks = JoinSet::new();
        let mut failures = 0u32;
        tokio::pin!(shutdown);
        loop {
            while tasks.try_join_next().is_some() {}
            let first = tokio::select! {
                () = &mut shutdown => break,
                slot = Arc::clone(&slots).acquire_owned() => match slot { Ok(slot) => slot, Err(_) => break },
            };
            let free = 1 + slots.available_permits();
            let batch = tokio::select! {
                () = &mut shutdown => break,
                batch = inner.broker.fetch(free, inner.fetch_wait) => batch,
            };
            match batch {
                Ok(batch) => {
                    failures = 0;
                    let mut first = Some(first);
                    for delivery in batch {
                        let slot = match first.take() {
                            Some(slot) => slot,
                            None => match Arc::clone(&slots).acquire_owned().await {
                                Ok(slot) => slot,
                                Err(_) => break,
                            },
                        };
                        let inner = Arc::clone(&inner);
                        tasks.spawn(async move {
                            process::process(&inner, delivery).await;
                            drop(slot);
                        });
                    }
                }
                Err(error) => {
                    // A broker restart: back off (bounded), keep the worker alive.
                    failures = failures.saturating_add(1);
                    let wait = Duration::from_millis(50u64.saturating_mul(1 << failures.min(5)));
                    tracing::warn!(target: retryscope_otel::names::TARGET, error = %error, source = ?std::error::Error::source(&error), ?wait, "job fetch failed");
                    drop(first);
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
        let drained =
            tokio::time::timeout(inner.grace, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            // Give the jobs in hand back to the broker now (a `Nak` without delay,
            // their keys released), rather than leave them for AckWait to expire.
            tracing::warn!(target: retryscope_otel::names::TARGET,
                running = tasks.len(),
                "jobs still running after the shutdown grace period are abandoned and put back"
            );
            inner.abandon.send_replace(true);
            let put_back =
                tokio::time::timeout(ABANDON_WAIT, async { while tasks.join_next().await.is_some() {} })
                    .await;
            if put_back.is_err() {
                tracing::warn!(target: retryscope_otel::names::TARGET,
                    running = tasks.len(),
                    "jobs not put back in time are dropped unsettled: the broker delivers them again after AckWait"
                );
                tasks.abort_all();
            }
        }
        refresh.abort();
    }
}

/// How long abandoned jobs have to be put back after the grace period: one
/// broker round trip each, at once.
const ABANDON_WAIT: Duration = Duration::from_secs(2);

/// Reads the dead-letter depth every `depth_every`, each read bounded by the
/// same interval, for the gauge's callback to report without a broker round trip.
async fn refresh_depth<B: Broker + DeadLetterStore, E, S>(
    inner: Arc<Inner<B, E, S>>,
    depth: Arc<DeadLetterDepth>,
) {
    let every = inner.depth_every;
    let mut warned = false;
    loop {
        match tokio::time::timeout(every, inner.broker.dead_depth()).await {
            Ok(Ok(n)) => {
                depth.set(n);
                warned = false;
            }
            // Once per run of failures: a broker restart should not flood the log.
            Ok(Err(error)) if !warned => {
                warned = true;
                tracing::warn!(target: retryscope_otel::names::TARGET, error = %error, "the dead-letter depth could not be read; the gauge keeps the last value");
            }
            Err(_) if !warned => {
                warned = true;
                tracing::warn!(target: retryscope_otel::names::TARGET,
                    ?every,
                    "reading the dead-letter depth timed out; the gauge keeps the last value"
                );
            }
            _ => {}
        }
        tokio::time::sleep(every).await;
    }
}

/// The `max_deliver` of a consumer [`NatsQueue::open`](crate::nats::NatsQueue::open)
/// makes, and the least a worker's broker may have ([`WorkerBuilder::build`]
/// refuses less). It does not depend on the policy: a retry is a *new*
/// message (attempt + 1, its run-at in a header), so one message is
/// delivered once to run, plus the worker's own redeliveries of it — a
/// delivery before its run-at put back, a hold — and those of a crashed
/// worker, an expired AckWait or a shutdown that abandoned it. Four spare
/// deliveries absorb those; the worker republishes a held or early job as a
/// new message before it reaches the last, and on that last delivery
/// dead-letters the job ([`DeadReason::MaxDeliveries`](crate::DeadReason::MaxDeliveries))
/// instead of running it: JetStream never drops one silently. So a reload
/// of a worker's configuration that raises `attempts` needs no larger
/// `max_deliver`.
pub const MAX_DELIVER: u64 = 5;
