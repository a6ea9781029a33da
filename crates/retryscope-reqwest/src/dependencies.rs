//! One budget and one breaker per host, shared by every clone of the client.
//!
//! A budget protects one dependency from one client's retries: sharing it across
//! hosts would let a failing host spend the retries of a healthy one, and a
//! per-request budget would protect nothing.

use opentelemetry::metrics::{Meter, ObservableGauge};
use retryscope::{CircuitBreaker, RetryBudget};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

/// Hosts tracked one by one; further hosts share the guards of [`OVERFLOW`], so
/// that a client calling unboundedly many hosts (a crawler, per-tenant
/// subdomains) keeps bounded memory and bounded metric series.
pub(crate) const MAX_HOSTS: usize = 1_000;

/// The dependency name of the hosts beyond [`MAX_HOSTS`].
pub(crate) const OVERFLOW: &str = "_OTHER";

/// Makes a budget or a breaker for a newly seen host.
pub(crate) type Factory<T> = Arc<dyn Fn() -> T + Send + Sync>;

/// The guards of one host.
pub(crate) struct Guards {
    pub(crate) budget: Option<RetryBudget>,
    pub(crate) breaker: Option<CircuitBreaker>,
    // Kept so the gauges report as long as the host's guards exist.
    _gauges: (Option<ObservableGauge<f64>>, Option<ObservableGauge<i64>>),
}

/// Every host's guards, created on first use.
pub(crate) struct Dependencies {
    hosts: RwLock<HashMap<String, Arc<Guards>>>,
    budget: Option<Factory<RetryBudget>>,
    breaker: Option<Factory<CircuitBreaker>>,
    meter: Option<Meter>,
}

impl Dependencies {
    pub(crate) fn new(
        budget: Option<Factory<RetryBudget>>,
        breaker: Option<Factory<CircuitBreaker>>,
        meter: Option<Meter>,
    ) -> Self {
        Self { hosts: RwLock::default(), budget, breaker, meter }
    }

    /// The guards of `host`, created on first use.
    pub(crate) fn get(&self, host: &str) -> Arc<Guards> {
        // A poisoned lock only means another request panicked while inserting;
        // the map itself is still consistent.
        if let Some(guards) = self.hosts.read().unwrap_or_else(PoisonError::into_inner).get(host) {
            return Arc::clone(guards);
        }
        let mut hosts = self.hosts.write().unwrap_or_else(PoisonError::into_inner);
        let key = if hosts.len() < MAX_HOSTS || hosts.contains_key(host) { host } else { OVERFLOW };
        let guards = hosts.entry(key.to_owned()).or_insert_with(|| Arc::new(self.make(key)));
        Arc::clone(guards)
    }

    fn make(&self, host: &str) -> Guards {
        let budget = self.budget.as_ref().map(|make| make());
        let breaker = self.breaker.as_ref().map(|make| make());
        let gauges = match &self.meter {
            Some(meter) => (
                budget.clone().map(|b| {
                    retryscope_otel::register_budget_gauge(meter, host, move || {
                        retryscope::throttle::Throttle::available(&b)
                    })
                }),
                breaker.clone().map(|b| {
                    retryscope_otel::register_breaker_gauge(meter, host, move || b.state().as_gauge())
                }),
            ),
            None => (None, None),
        };
        Guards { budget, breaker, _gauges: gauges }
    }
}

impl fmt::Debug for Dependencies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hosts = self.hosts.read().map(|h| h.len()).unwrap_or_default();
        f.debug_struct("Dependencies")
            .field("hosts", &hosts)
            .field("budget", &self.budget.is_some())
            .field("breaker", &self.breaker.is_some())
            .finish()
    }
}
