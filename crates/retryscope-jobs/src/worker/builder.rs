//! Building a worker: the broker, the policy, the handler, and settings that
//! all have bounded defaults.

use super::keys::Keys;
use super::{Inner, Worker};
use crate::broker::Broker;
use crate::job::{Handler, WorkerStats};
use retryscope::dependency::Dependency;
use retryscope::jobs::JobPolicy;
use retryscope::{Policy, PolicyError, Transient, Verdict};
use retryscope_config::ConfigHandle;
use retryscope_idempotency::{IdempotencyStore, MemoryStore};
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
    guards: Option<Arc<Dependency>>,
    keys: Option<S>,
    key_ttl: Duration,
    concurrency: usize,
    timeout: Duration,
    hold: Duration,
    fetch_wait: Duration,
    grace: Duration,
    depth_every: Duration,
    config: Option<ConfigHandle>,
    own: Option<Policy>,
    job_keyed_calls: bool,
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
            config: None,
            own: None,
            job_keyed_calls: true,
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
    /// HTTP clients that call it (`Dependencies::get`): its breaker,
    /// pacer and budget hold jobs back while it is down, without the hold
    /// counting as an attempt.
    pub fn guards(mut self, guards: Arc<Dependency>) -> Self {
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
            config: self.config,
            own: self.own,
            job_keyed_calls: self.job_keyed_calls,
        }
    }

    /// How long a completed key is remembered (default a day).
    pub fn key_ttl(mut self, ttl: Duration) -> Self {
        self.key_ttl = ttl;
        self
    }

    /// Whether the HTTP calls a job's handler makes through retryscope's
    /// reqwest or tower clients carry idempotency keys derived from the job's
    /// key (default on, for every job that has a key): a POST, PATCH or other
    /// non-idempotent request with a body that can be sent again, and no key
    /// of its own, gets `"<job key>/<n>"` for the handler's *n*-th such call
    /// (see `retryscope_http::job_call_key`), whether or not the client was
    /// built with `.idempotency_keys()`, and is then retried as any keyed
    /// request is. A server that stores keys (`retryscope-idempotency`)
    /// replays a call that completed before a worker crashed, so the re-run
    /// handler's effect happens once.
    ///
    /// The keys are stable while the handler makes its keyed calls in the same
    /// order on every run; calls made in a spawned task get none, and
    /// reordered, conditional or concurrent calls may swap keys
    /// ([`retryscope::jobs`] says why). A caller's own key (a header, a
    /// `KeyChoice`) wins, and `KeyChoice::suppress()` leaves a request without
    /// one. `false` turns derivation off for this worker's jobs.
    pub fn job_keyed_calls(mut self, on: bool) -> Self {
        self.job_keyed_calls = on;
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

    /// Takes each execution's policy — `attempts`, `backoff`, `jitter`,
    /// `deadline`, `attempt_timeout` — and kill switch from the configuration
    /// `handle` holds (`retryscope-config`: the same handle and file as the
    /// HTTP clients' and the database's `config`), resolved once per
    /// execution from the snapshot in force when it starts (after its run-at
    /// and any hold, before the handler runs). A reload reaches the next
    /// execution, never one running; a job's retry is a new message, so each
    /// attempt of one job is resolved again, from the configuration in force
    /// then.
    ///
    /// A job is matched by the subject it was published to: a dependency
    /// written `subject = "orders.*"` (a NATS subject pattern) serves the jobs
    /// of `orders.created`; a rule matching by `host`, `path_prefix` or
    /// `service` never matches a job; a job no `subject` rule matches takes
    /// the file's `defaults` (their `attempts`, `backoff`, `jitter`,
    /// `deadline` and, where written, `attempt_timeout`).
    ///
    /// - The file's policy replaces the one the worker was built with
    ///   ([`Worker::builder`]); [`override_policy`](Self::override_policy)
    ///   wins over the file; the kill switch (`enabled = false`) wins over
    ///   both: one attempt, so a job's first transient failure is
    ///   dead-lettered (`attempts_exhausted`) — never lost, never run twice.
    /// - `attempt_timeout`, where the file writes it (in the rule or in
    ///   `defaults`), replaces [`attempt_timeout`](Self::attempt_timeout) for
    ///   that execution, and the processed key's lease follows it (the
    ///   timeout plus the consumer's AckWait), so no other worker takes a job
    ///   still running. Where the file does not write it, the builder's stays.
    /// - Each attempt's span carries `retryscope.config.hash`.
    ///
    /// A `subject` rule refuses (at load, with its line) the keys a worker
    /// does not apply: `retry_statuses`, `body_rule`, `hedging`,
    /// `idempotency_keys`, `pacer`, `fallback`, `priority`, `budget` and
    /// `breaker` — the worker's guards are [`guards`](Self::guards), in
    /// code. The same keys in `defaults` serve HTTP and gRPC calls: a job
    /// taking the defaults ignores them, and a `subject` rule does not
    /// inherit them. Durations are bounded as in every file (a day at most);
    /// a job policy longer than that is built in code
    /// ([`PolicyBuilder::build_for_jobs`](retryscope::PolicyBuilder::build_for_jobs)) and given to a
    /// worker without `config`.
    pub fn config(mut self, handle: ConfigHandle) -> Self {
        self.config = Some(handle);
        self
    }

    /// With [`config`](Self::config): every execution runs under `policy`'s
    /// attempts, backoff, jitter and deadline, whatever the file says for
    /// its subject — except the kill switch, which still leaves one attempt.
    /// The code's last word, as a call's `override_policy` is for the HTTP
    /// clients and the database. (The per-attempt timeout stays the file's
    /// where it writes one, else [`attempt_timeout`](Self::attempt_timeout).)
    /// Without `config` it replaces the policy the worker was built with.
    pub fn override_policy(mut self, policy: Policy) -> Self {
        self.own = Some(policy);
        self
    }

    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// [`WorkerError::OutOfRange`] for a zero concurrency, hold or fetch wait,
    /// a dead-letter depth interval outside 100 ms to 1 h, or a broker whose
    /// `max_deliver` is below [`MAX_DELIVER`](crate::MAX_DELIVER) (it would
    /// leave no spare deliveries for holds and crashes).
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
            && max < super::MAX_DELIVER
        {
            return Err(WorkerError::OutOfRange {
                setting: "max_deliver",
                limit: "at least MAX_DELIVER (5)",
            });
        }
        let attempt_policy = super::execution::one_attempt(self.timeout).map_err(WorkerError::Policy)?;
        let ack_wait = self.broker.ack_wait();
        let telemetry = crate::telemetry::JobTelemetry::global();
        Ok(Worker {
            inner: Arc::new(Inner {
                broker: self.broker,
                handler: self.handler,
                classify: self.classify,
                policy: self.own.map_or(self.policy, JobPolicy::from),
                attempt_policy,
                timeout: self.timeout,
                config: self.config,
                own: self.own,
                job_keyed_calls: self.job_keyed_calls,
                guards: self.guards,
                keys: Keys {
                    store: self.keys,
                    renew_every: super::keys::renewal_period(ack_wait),
                    ttl: self.key_ttl,
                },
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
