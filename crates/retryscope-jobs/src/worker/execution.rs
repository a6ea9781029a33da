//! What one execution of a job runs under — its job policy, its per-attempt
//! timeout and the configuration it was resolved from — decided once, when
//! the execution starts: from the worker's settings, or, on a worker built
//! with `config`, from the configuration snapshot in force then.

use super::Inner;
use crate::broker::Broker;
use retryscope::jobs::JobPolicy;
use retryscope::{Jitter, Policy, PolicyError};
use retryscope_config::Target;
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct Execution {
    /// Schedules the next attempt or the dead letter after a transient failure.
    pub(crate) policy: JobPolicy,
    /// Runs the one attempt: one try, the per-attempt timeout as its deadline.
    pub(crate) attempt_policy: Policy,
    /// The configuration's hash, on a configured worker.
    pub(crate) config_hash: Option<Arc<str>>,
}

impl Execution {
    pub(crate) fn resolve<B: Broker, E, S>(inner: &Inner<B, E, S>, subject: &str) -> Self {
        let Some(handle) = &inner.config else {
            return Self { policy: inner.policy, attempt_policy: inner.attempt_policy, config_hash: None };
        };
        let snapshot = handle.snapshot();
        let settings = snapshot.resolve(&Target::job(subject));
        // The file's policy, `override_policy` over it, the kill switch over both.
        let policy = JobPolicy::from(settings.call_policy(inner.own));
        let attempt_policy = match settings.written_attempt_timeout() {
            Some(t) if t != inner.timeout => match one_attempt(t) {
                Ok(p) => p,
                // Cannot happen: the file's timeout passed the same check when it loaded.
                Err(_) => inner.attempt_policy,
            },
            _ => inner.attempt_policy,
        };
        Self { policy, attempt_policy, config_hash: Some(Arc::clone(snapshot.hash_str())) }
    }
}

/// The engine's policy for one attempt that may run for `timeout`.
pub(crate) fn one_attempt(timeout: Duration) -> Result<Policy, PolicyError> {
    Policy::builder().max_attempts(1).jitter(Jitter::None).deadline(timeout).build()
}
