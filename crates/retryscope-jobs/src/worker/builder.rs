//! Building a worker: the broker, the policy, the handler, and settings that
//! all have bounded defaults.

use super::keys::Keys;
use super::{Inner, Worker};
use crate::broker::Broker;
use crate::job::{Handler, WorkerStats};
use retryscope::jobs::JobPolicy;
use retryscope::{Jitter, Policy, PolicyError, RetryBudget, Transient, Verdict};
use retryscope_idempotency::{IdempotencyStore, MemoryStore};
use retryscope_otel::Guards;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// How a handler's error is judged: the engine's [`Verdict`].
pub type Classifier<E> = Arc<dyn Fn(&E) -> Verdict + Send + Sync>;

/// Settings of a [`Worker`]; `build` checks them.
#[must_use = "a worker builder does nothing until `build` is called"]
pub struct WorkerBuilder<B: Broker, E, S = MemoryStore> {
    broker: B,
    handler: Box<dyn Handler<E>>,
    classify: Classifier<E>,
    policy: JobPolicy,
    guards: Option<Arc<Guards<RetryBudget>>>,
    keys: Option<S>,
    key_ttl: Duration,
    concurrency: usize,
    timeout: Duration,
    hold: Duration,
    fetch_wait: Duration,
    grace: Duration,
    depth_every: Duration,
}

/// The shortest and longest interval at which a worker reads the dead-letter depth.
const DEPTH_EVERY: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(3_600));

/// A setting out of range, refused by [`WorkerBuilder::build`].
#[derive(Debug)]
#[non_exhaustive]
pub enum WorkerError {
    /// A setting is out of its range.
    OutOfRange {
        /// The setting.
        setting: &'static str,
        /// Why.
        limit: &'static str,
    },
    /// The per-attempt policy could not be built.
    Policy(PolicyError),
}

impl fmt::Display for WorkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerError::OutOfRange { setting, limit } => {
                write!(f, "worker setting `{setting}` is out of range: {limit}")
            }
            WorkerError::Policy(_) => f.write_str("the worker's per-attempt policy is invalid"),
        }
    }
}

impl std::error::Error for WorkerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WorkerError::Policy(e) => Some(e),
            WorkerError::OutOfRange { .. } => None,
        }
    }
}

impl<B: Broker, E: Transient + 'static> Worker<B, E, MemoryStore> {
    /// A worker taking jobs from `broker`, running `handler` and retrying
    /// under `policy` (a [`Policy`] or a [`JobPolicy`]); errors are judged by
    /// their [`Transient`] verdict.
    pub fn builder(broker: B, policy: impl Into<JobPolicy>, handler: impl Handler<E>) -> WorkerBuilder<B, E> {
        WorkerBuilder::new(broker, policy.into(), Box::new(handler), Arc::new(|e: &E| e.verdict()))
    }
}

impl<B: Broker, E: 'static> Worker<B, E, MemoryStore> {
    /// As [`builder`](Self::builder), judging errors with `classify`.
    pub fn builder_with(
        broker: B,
        policy: impl Into<JobPolicy>,
        handler: impl Handler<E>,
        classify: impl Fn(&E) -> Verdict + Send + Sync + 'static,
    ) -> WorkerBuilder<B, E> {
        WorkerBuilder::new(broker, policy.into(), Box::new(handler), Arc::new(classify))
    }
}

impl<B: Broker, E: 'static> WorkerBuilder<B, E, MemoryStore> {
    fn new(broker: B, policy: JobPolicy, handler: Box<dyn Handler<E>>, classify: Classifier<E>) -> Self {
        Self {
            broker,
            handler,
            classify,
            policy,
            guards: None,
            keys: None,
            key_ttl: Duration::from_secs(24 * 60 * 60),
            concurrency: 16,
            timeout: Duration::from_secs(5 * 60),
            hold: Duration::from_secs(1),
            fetch_wait: Duration::from_secs(1),
            grace: Duration::from_secs(10),
            depth_every: Duration::from_secs(15),
        }
    }
}

impl<B: Broker, E: 'static, S> WorkerBuilder<B, E, S> {
    /// Retries only the errors `predicate` accepts; the others are permanent.
    pub fn when(mut self, predicate: impl Fn(&E) -> bool + Send + Sync + 'static) -> Self {
        self.classify = Arc::new(move |e| {
            if predicate(e) {
                Verdict::retryable(retryscope::ErrorType::OTHER)
            } else {
                Verdict::permanent(retryscope::ErrorType::OTHER)
            }
        });
        self
    }

    /// Judges errors with `classify`.
    pub fn classify(mut self, classify: impl Fn(&E) -> Verdict + Send + Sync + 'static) -> Self {
        self.classify = Arc::new(classify);
        self
    }

    /// The guards of the dependency the handler calls, shared with the
    /// HTTP clients that call it (`DependencyGuards::get`): its breaker,
    /// pacer and budget hold jobs back while it is down, without the hold
    /// counting as an attempt.
    pub fn guards(mut self, guards: Arc<Guards<RetryBudget>>) -> Self {
        self.guards = Some(guards);
        self
    }

    /// Records completed job keys in `store` (for one process, a
    /// [`MemoryStore`]; for a fleet, a `RedisStore`): a job whose ack was lost
    /// is acked, not run again. Keys are kept for a day by default.
    pub fn processed_keys<S2: IdempotencyStore>(self, store: S2) -> WorkerBuilder<B, E, S2> {
        WorkerBuilder {
            broker: self.broker,
            handler: self.handler,
            classify: self.classify,
            policy: self.policy,
            guards: self.guards,
            keys: Some(store),
            key_ttl: self.key_ttl,
            concurrency: self.concurrency,
            timeout: self.timeout,
            hold: self.hold,
            fetch_wait: self.fetch_wait,
            grace: self.grace,
            depth_every: self.depth_every,
        }
    }

    /// How long a completed key is remembered (default a day).
    pub fn key_ttl(mut self, ttl: Duration) -> Self {
        self.key_ttl = ttl;
        self
    }

    /// How many jobs run at once (default 16).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// How long one attempt may run (default 5 min); a slower one is a
    /// transient `timeout` failure.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long a hold lasts when the guard that held the job does not say
    /// (a budget refusal, a closed pacer gate); default 1 s, spread by up to 20 %.
    pub fn hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// How long one pull waits for jobs (default 1 s).
    pub fn fetch_wait(mut self, wait: Duration) -> Self {
        self.fetch_wait = wait;
        self
    }

    /// How long jobs in hand may finish after shutdown (default 10 s).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How often the worker reads how many dead letters are kept, for the
    /// `retryscope.job.dead_letter.depth` gauge (default 15 s, a Prometheus
    /// scrape; 100 ms to 1 h). The gauge reports the last value read: reading
    /// it never waits on the broker.
    pub fn dead_letter_depth_every(mut self, every: Duration) -> Self {
        self.depth_every = every;
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// [`WorkerError::OutOfRange`] for a zero concurrency, hold or fetch wait,
    /// a dead-letter depth interval outside 100 ms to 1 h, or a broker whose `max_deliver` is lower than the policy needs (the
    /// broker would drop jobs the policy still retries).
    pub fn build(self) -> Result<Worker<B, E, S>, WorkerError> {
        if self.concurrency == 0 || self.concurrency > 10_000 {
            return Err(WorkerError::OutOfRange { setting: "concurrency", limit: "1 to 10000" });
        }
        if self.hold.is_zero() || self.fetch_wait.is_zero() {
            return Err(WorkerError::OutOfRange { setting: "hold/fetch_wait", limit: "above zero" });
        }
        if !(DEPTH_EVERY.0..=DEPTH_EVERY.1).contains(&self.depth_every) {
            return Err(WorkerError::OutOfRange {
                setting: "dead_letter_depth_every",
                limit: "100 ms to 1 h",
            });
        }
        if let Some(max) = self.broker.max_deliver()
            && max < super::max_deliver_for(&self.policy)
        {
            return Err(WorkerError::OutOfRange {
                setting: "max_deliver",
                limit: "at least max_deliver_for(policy)",
            });
        }
        let attempt_policy = Policy::builder()
            .max_attempts(1)
            .jitter(Jitter::None)
            .deadline(self.timeout)
            .build()
            .map_err(WorkerError::Policy)?;
        let ack_wait = self.broker.ack_wait();
        let telemetry = crate::telemetry::JobTelemetry::global();
        Ok(Worker {
            inner: Arc::new(Inner {
                broker: self.broker,
                handler: self.handler,
                classify: self.classify,
                policy: self.policy,
                attempt_policy,
                guards: self.guards,
                keys: Keys { store: self.keys, lease: self.timeout + ack_wait, ttl: self.key_ttl },
                concurrency: self.concurrency,
                hold: self.hold,
                fetch_wait: self.fetch_wait,
                grace: self.grace,
                depth_every: self.depth_every,
                stats: Arc::new(WorkerStats::default()),
                warned_bare: AtomicBool::new(false),
                abandon: tokio::sync::watch::channel(false).0,
                telemetry,
            }),
        })
    }
}
