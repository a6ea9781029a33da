//! What the transaction and statement helpers share: the engine's verdict on
//! each attempt, and the retry run with the database's guards and telemetry.

use crate::database::Database;
use crate::error::Failure;
use crate::spans::{DbAttemptSpan, record_sqlstate};
use retryscope::classify::Classify;
use retryscope::{ErrorType, Policy, RetryError, Retryable, Verdict};
use retryscope_config as config;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};

/// The future of the caller's work on a transaction or a connection: boxed,
/// so that it may borrow what it is given and still be `Send`.
pub type WorkFuture<'t, T> = Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 't>>;

/// One attempt's future, boxed: the engine's future holds it, and a spawned
/// call needs that to be `Send`, which the compiler cannot see through an
/// unboxed future borrowing the helper's state (rust-lang/rust#110338).
pub(crate) type AttemptFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, Failure>> + Send + 'a>>;

/// Whether the running attempt is at a point where being cut short (by the
/// attempt timeout or the deadline) leaves its effect unknown.
#[derive(Debug, Default)]
pub(crate) struct Exposure(AtomicBool);

impl Exposure {
    pub(crate) fn set(&self, exposed: bool) {
        self.0.store(exposed, Ordering::Relaxed);
    }

    fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The engine's view of an attempt's [`Failure`].
pub(crate) struct Judge<'a> {
    /// Whether the work may run again after a lost connection.
    pub(crate) repeatable: bool,
    pub(crate) exposure: &'a Exposure,
    /// What an attempt cut short while exposed is reported as.
    pub(crate) exposed_cut: ErrorType,
}

impl<T> Classify<T, Failure> for Judge<'_> {
    fn classify(&mut self, result: &Result<T, Failure>) -> Verdict {
        match result {
            Ok(_) => Verdict::Success,
            Err(failure) => failure.verdict(self.repeatable),
        }
    }

    fn timeout(&mut self) -> Verdict {
        if self.exposure.get() {
            Verdict::unrepeatable(self.exposed_cut)
        } else {
            Verdict::retryable(ErrorType::TIMEOUT)
        }
    }
}

/// A failure made from sqlx's error, its SQLSTATE recorded on the attempt's span.
pub(crate) fn failure(make: fn(sqlx::Error) -> Failure) -> impl Fn(sqlx::Error) -> Failure {
    move |error| {
        record_sqlstate(&error);
        make(error)
    }
}

/// The policies a call names: the one it was made with, and the one
/// `override_policy` gave it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallPolicy {
    pub(crate) given: Policy,
    pub(crate) own: Option<Policy>,
}

impl CallPolicy {
    pub(crate) fn new(given: Policy) -> Self {
        Self { given, own: None }
    }
}

/// Runs `attempt` under the call's policy with the database's budget,
/// breaker and telemetry. On a database built with `config`, the policy is
/// resolved here, once per call, from the snapshot in force when the call
/// starts: the file's replaces the one the call was made with, a policy the
/// call overrides with wins over the file, the kill switch over both.
pub(crate) async fn run<T, Op, Fut>(
    db: &Database,
    policy: CallPolicy,
    operation: Option<&str>,
    judge: Judge<'_>,
    attempt: Op,
) -> Result<T, RetryError<Failure>>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let inner = &db.inner;
    let (policy, hash) = match &inner.config {
        None => (policy.own.unwrap_or(policy.given), None),
        Some(handle) => {
            let generation = handle.generation();
            let snapshot = handle.snapshot();
            let target = &inner.target;
            // Matched as an HTTP client's call to the same host and port is,
            // with no path: a rule naming a path or a gRPC service never
            // matches a database.
            let settings = snapshot.resolve(&config::Target::http(&target.address, Some(target.port), ""));
            if settings.own_guard_keys().any() {
                unapplied_guards(db, generation, settings);
            }
            (settings.call_policy(policy.own), Some(snapshot.hash_str().clone()))
        }
    };
    // Skipped for the call when nothing it does could be seen (no meter
    // provider, no subscriber), as an HTTP client's is.
    let observer = inner.observer.as_ref().filter(|o| o.is_heard()).map(|o| {
        o.clone().with_config_hash(hash).with_attempt_spans(DbAttemptSpan { target: &inner.target })
    });
    // The database's budget and breaker (it has no pacer).
    let retry = attempt
        .retry(policy)
        .with_classifier(judge)
        .observe((observer, inner.retry_log.clone()))
        .dependency(&*inner.guards);
    match operation {
        Some(operation) => retry.operation(operation).await,
        None => retry.await,
    }
}

/// The file writes guard keys in the block of the dependency the database
/// matches, and the database keeps its builder's guards: said once for each
/// version of the file (`generation`), so that no setting is ignored
/// silently. The defaults' keys are the HTTP clients' and are not reported.
#[cold]
#[inline(never)]
fn unapplied_guards(db: &Database, generation: u64, settings: &config::DependencySettings) {
    if db.inner.warned_generation.swap(generation, Ordering::Relaxed) == generation {
        return;
    }
    let keys = settings.own_guard_keys();
    let written = [
        ("budget", keys.budget),
        ("breaker", keys.breaker),
        ("pacer", keys.pacer),
        ("in_flight_budget", keys.in_flight_budget),
    ];
    let written: Vec<&str> = written.iter().filter(|(_, set)| *set).map(|(key, _)| *key).collect();
    tracing::warn!(
        target: retryscope_otel::names::TARGET,
        dependency = settings.name().unwrap_or_default(),
        keys = %written.join(", "),
        "the database keeps the guards its builder gave it: these keys of its dependency in the configuration file are not applied to it",
    );
}
