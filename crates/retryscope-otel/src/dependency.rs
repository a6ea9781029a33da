//! The guards kept per dependency: one registry per client, bounded by the
//! process's table of dependency names ([`bounded_dependency`]).

use crate::bounded::{MAX_DEPENDENCIES, bounded_dependency, dependency_name};
use crate::gauges;
use crate::guards::Guards;
use opentelemetry::metrics::Meter;
use retryscope::budget::BudgetShare;
use retryscope::hedge::HedgePolicy;
use retryscope::overload::{AdaptiveThrottle, ConcurrencyLimiter};
use retryscope::pace::PaceShare;
use retryscope::throttle::Throttle;
use retryscope::{CircuitBreaker, Pacer};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

/// How many ports of one host [`DependencyGuards::for_server`] remembers.
pub const MAX_PORTS_PER_HOST: usize = 16;

/// Makes a budget or a breaker for a newly seen dependency.
pub type Factory<T> = Arc<dyn Fn() -> T + Send + Sync>;

/// One budget, one breaker and one pacer per dependency, created on first use and shared
/// by every clone — what a client keeps so that a failing dependency cannot
/// spend the retries of a healthy one.
///
/// Dependencies are named through [`bounded_dependency`], so the registry holds
/// at most [`MAX_DEPENDENCIES`] + 1 entries whatever the traffic. Built with a
/// [`meter`](DependencyGuardsBuilder::meter), it publishes
/// `retryscope.budget.available`, `retryscope.breaker.state` and
/// `retryscope.pace.rate` for every dependency through one callback per gauge; the callbacks hold the registry
/// weakly, so dropping the last clone frees the guards and ends the reports,
/// although OpenTelemetry keeps callbacks for the meter provider's lifetime.
///
/// ```
/// use retryscope::{CircuitBreaker, RetryBudget};
/// use retryscope_otel::DependencyGuards;
///
/// let guards = DependencyGuards::builder()
///     .budget(RetryBudget::new)
///     .breaker(CircuitBreaker::new)
///     .meter(opentelemetry::global::meter("my-client"))
///     .build();
/// let payments = guards.get("payments:8443");
/// assert_eq!(payments.dependency(), "payments:8443");
/// assert!(payments.budget().is_some() && payments.breaker().is_some());
/// assert!(std::sync::Arc::ptr_eq(&payments, &guards.get("payments:8443")));
/// ```
pub struct DependencyGuards<T> {
    inner: Arc<Registry<T>>,
}

impl<T> Clone for DependencyGuards<T> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

/// Each host's guards, by the port in its dependency name (`None`: the scheme's).
type Servers<T> = HashMap<Box<str>, Vec<(Option<u16>, Arc<Guards<T>>)>>;

struct Registry<T> {
    guards: RwLock<HashMap<Arc<str>, Arc<Guards<T>>>>,
    /// The guards found for each server (host, then the port in its name), so
    /// that a request finds its dependency without building the name.
    servers: RwLock<Servers<T>>,
    budget: Option<Factory<T>>,
    breaker: Option<Factory<CircuitBreaker>>,
    pacer: Option<Factory<Pacer>>,
    /// The fleet each new pacer is shared with, if any.
    pace_share: Option<Arc<dyn PaceShare>>,
    /// The fleet each new budget's floor is divided among, if any.
    budget_share: Option<Arc<dyn BudgetShare>>,
    adaptive_throttle: Option<Factory<AdaptiveThrottle>>,
    concurrency_limit: Option<Factory<ConcurrencyLimiter>>,
    /// The client's hedging policy, of which each dependency gets a fresh copy.
    hedge: Option<HedgePolicy>,
}

/// Configures a [`DependencyGuards`]: which guards each dependency gets, and
/// where their gauges go.
#[must_use = "a builder does nothing until `build` is called"]
pub struct DependencyGuardsBuilder<T> {
    budget: Option<Factory<T>>,
    breaker: Option<Factory<CircuitBreaker>>,
    pacer: Option<Factory<Pacer>>,
    pace_share: Option<Arc<dyn PaceShare>>,
    budget_share: Option<Arc<dyn BudgetShare>>,
    adaptive_throttle: Option<Factory<AdaptiveThrottle>>,
    concurrency_limit: Option<Factory<ConcurrencyLimiter>>,
    hedge: Option<HedgePolicy>,
    meter: Option<Meter>,
}

impl<T> fmt::Debug for DependencyGuardsBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DependencyGuardsBuilder")
            .field("budget", &self.budget.is_some())
            .field("breaker", &self.breaker.is_some())
            .field("pacer", &self.pacer.is_some())
            .field("pace_share", &self.pace_share)
            .field("budget_share", &self.budget_share)
            .field("adaptive_throttle", &self.adaptive_throttle.is_some())
            .field("concurrency_limit", &self.concurrency_limit.is_some())
            .field("hedge", &self.hedge.is_some())
            .field("meter", &self.meter.is_some())
            .finish()
    }
}

impl<T: Throttle + 'static> DependencyGuardsBuilder<T> {
    /// Gives each dependency a budget made by `make`.
    pub fn budget(self, make: impl Fn() -> T + Send + Sync + 'static) -> Self {
        self.budget_factory(Some(Arc::new(make)))
    }

    /// Gives each dependency a breaker made by `make`.
    pub fn breaker(self, make: impl Fn() -> CircuitBreaker + Send + Sync + 'static) -> Self {
        self.breaker_factory(Some(Arc::new(make)))
    }

    /// Gives each dependency a pacer made by `make`.
    pub fn pacer(self, make: impl Fn() -> Pacer + Send + Sync + 'static) -> Self {
        self.pacer_factory(Some(Arc::new(make)))
    }

    /// Sets (or, with `None`, removes) the shared pacer factory.
    pub fn pacer_factory(mut self, make: Option<Factory<Pacer>>) -> Self {
        self.pacer = make;
        self
    }

    /// Shares each dependency's pacer with the other replicas of a fleet
    /// through `share` (or, with `None`, with none): see
    /// [`retryscope::pace::PaceShare`]. Without a pacer, nothing is shared.
    pub fn pace_share(mut self, share: Option<Arc<dyn PaceShare>>) -> Self {
        self.pace_share = share;
        self
    }

    /// Divides each dependency's budget floor among the replicas of a fleet
    /// through `share` (or, with `None`, keeps every floor whole): see
    /// [`retryscope::budget::BudgetShare`]. Without a budget, or with a
    /// throttle that has no floor ([`Throttle::share_floor`]), nothing is
    /// shared.
    pub fn budget_share(mut self, share: Option<Arc<dyn BudgetShare>>) -> Self {
        self.budget_share = share;
        self
    }

    /// Gives each dependency a client-side adaptive throttle made by `make`.
    pub fn adaptive_throttle(self, make: impl Fn() -> AdaptiveThrottle + Send + Sync + 'static) -> Self {
        self.adaptive_throttle_factory(Some(Arc::new(make)))
    }

    /// Sets (or, with `None`, removes) the shared adaptive throttle factory.
    pub fn adaptive_throttle_factory(mut self, make: Option<Factory<AdaptiveThrottle>>) -> Self {
        self.adaptive_throttle = make;
        self
    }

    /// Gives each dependency an adaptive concurrency limit made by `make`.
    pub fn concurrency_limit(self, make: impl Fn() -> ConcurrencyLimiter + Send + Sync + 'static) -> Self {
        self.concurrency_limit_factory(Some(Arc::new(make)))
    }

    /// Sets (or, with `None`, removes) the shared concurrency limit factory.
    pub fn concurrency_limit_factory(mut self, make: Option<Factory<ConcurrencyLimiter>>) -> Self {
        self.concurrency_limit = make;
        self
    }

    /// Sets (or, with `None`, removes) the shared budget factory.
    pub fn budget_factory(mut self, make: Option<Factory<T>>) -> Self {
        self.budget = make;
        self
    }

    /// Gives each dependency a hedging policy of its own made from
    /// `template` ([`HedgePolicy::fresh`]): the template's settings, a latency
    /// tracker per dependency, so that a percentile delay is learned per
    /// dependency rather than over every host a client calls.
    pub fn hedge(self, template: HedgePolicy) -> Self {
        self.hedge_template(Some(template))
    }

    /// Sets (or, with `None`, removes) the hedging policy each dependency's
    /// is made from.
    pub fn hedge_template(mut self, template: Option<HedgePolicy>) -> Self {
        self.hedge = template;
        self
    }

    /// Sets (or, with `None`, removes) the shared breaker factory.
    pub fn breaker_factory(mut self, make: Option<Factory<CircuitBreaker>>) -> Self {
        self.breaker = make;
        self
    }

    /// Publishes the budget and breaker gauges of every dependency on `meter`.
    /// With the global provider's meter and no provider installed, this costs
    /// nothing.
    pub fn meter(mut self, meter: Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// The registry, with its gauges registered.
    pub fn build(self) -> DependencyGuards<T> {
        let inner = Arc::new(Registry {
            guards: RwLock::default(),
            servers: RwLock::default(),
            budget: self.budget,
            breaker: self.breaker,
            pacer: self.pacer,
            pace_share: self.pace_share,
            budget_share: self.budget_share,
            adaptive_throttle: self.adaptive_throttle,
            concurrency_limit: self.concurrency_limit,
            hedge: self.hedge,
        });
        if let Some(meter) = &self.meter {
            register_gauges(meter, &inner);
        }
        DependencyGuards { inner }
    }
}

/// One callback per gauge, reading every dependency's guards at collection
/// time. The callbacks hold the registry weakly: see [`live`].
fn register_gauges<T: Throttle + 'static>(meter: &Meter, registry: &Arc<Registry<T>>) {
    if registry.budget.is_some() {
        let registry = Arc::downgrade(registry);
        gauges::budget_gauge(meter, move |observe| {
            for guards in live(&registry) {
                if let Some(budget) = &guards.budget {
                    observe(budget.available(), &guards.dependency);
                }
            }
        });
    }
    if registry.breaker.is_some() {
        let registry = Arc::downgrade(registry);
        gauges::breaker_gauge(meter, move |observe| {
            for guards in live(&registry) {
                if let Some(breaker) = &guards.breaker {
                    observe(breaker.state().as_gauge(), &guards.dependency);
                }
            }
        });
    }
    if registry.pacer.is_some() {
        let registry = Arc::downgrade(registry);
        gauges::pace_gauge(meter, move |observe| {
            for guards in live(&registry) {
                if let Some(rate) = guards.pacer.as_ref().and_then(Pacer::allowed_rate) {
                    observe(rate, &guards.dependency);
                }
            }
        });
    }
    if registry.adaptive_throttle.is_some() {
        let registry = Arc::downgrade(registry);
        gauges::accept_ratio_gauge(meter, move |observe| {
            for guards in live(&registry) {
                if let Some(ratio) =
                    guards.adaptive_throttle.as_ref().and_then(AdaptiveThrottle::accept_ratio)
                {
                    observe(ratio, &guards.dependency);
                }
            }
        });
    }
    if registry.concurrency_limit.is_some() {
        let limits = Arc::downgrade(registry);
        gauges::limit_gauge(meter, move |observe| {
            for guards in live(&limits) {
                if let Some(limiter) = &guards.concurrency_limit {
                    observe(u64::from(limiter.limit()), &guards.dependency);
                }
            }
        });
        let registry = Arc::downgrade(registry);
        gauges::in_flight_gauge(meter, move |observe| {
            for guards in live(&registry) {
                if let Some(limiter) = &guards.concurrency_limit {
                    observe(u64::from(limiter.in_flight()), &guards.dependency);
                }
            }
        });
    }
}

impl<T: Throttle + 'static> DependencyGuards<T> {
    /// A registry with no guards and no gauges yet: see the builder's methods.
    pub fn builder() -> DependencyGuardsBuilder<T> {
        DependencyGuardsBuilder {
            budget: None,
            breaker: None,
            pacer: None,
            pace_share: None,
            budget_share: None,
            adaptive_throttle: None,
            concurrency_limit: None,
            hedge: None,
            meter: None,
        }
    }

    /// The guards of `dependency`, created on first use. A name beyond the
    /// process's [`MAX_DEPENDENCIES`] gets the guards of [`OVERFLOW`](crate::OVERFLOW).
    pub fn get(&self, dependency: &str) -> Arc<Guards<T>> {
        if let Some(found) = self.find(dependency) {
            return found;
        }
        let name = bounded_dependency(dependency);
        if let Some(found) = self.find(&name) {
            return found;
        }
        let mut guards = self.inner.guards.write().unwrap_or_else(PoisonError::into_inner);
        let entry = guards.entry(Arc::clone(&name)).or_insert_with(|| Arc::new(self.inner.make(name)));
        Arc::clone(entry)
    }

    /// The guards of the server at `host` and `port`, named as
    /// [`dependency_name`] names it (`default_port` is the scheme's): the same
    /// guards as `get(&dependency_name(host, port, default_port))`, found
    /// without building the name once the server has been seen. At most
    /// [`MAX_DEPENDENCIES`] hosts and [`MAX_PORTS_PER_HOST`] ports per host are
    /// remembered; further servers are looked up by name, as [`get`](Self::get)
    /// does.
    ///
    /// ```
    /// use retryscope::RetryBudget;
    /// use retryscope_otel::DependencyGuards;
    ///
    /// let guards = DependencyGuards::builder().budget(RetryBudget::new).build();
    /// let server = guards.for_server("127.0.0.1", Some(8080), Some(80));
    /// assert_eq!(server.dependency(), "127.0.0.1:8080");
    /// assert!(std::sync::Arc::ptr_eq(&server, &guards.get("127.0.0.1:8080")));
    /// ```
    pub fn for_server(&self, host: &str, port: Option<u16>, default_port: Option<u16>) -> Arc<Guards<T>> {
        let named_port = port.filter(|port| Some(*port) != default_port);
        let find = |servers: &Servers<T>| {
            servers.get(host)?.iter().find(|(p, _)| *p == named_port).map(|(_, guards)| Arc::clone(guards))
        };
        if let Some(found) = find(&self.inner.servers.read().unwrap_or_else(PoisonError::into_inner)) {
            return found;
        }
        let guards = self.get(&dependency_name(host, port, default_port));
        let mut servers = self.inner.servers.write().unwrap_or_else(PoisonError::into_inner);
        if find(&servers).is_none() {
            let known = servers.len();
            match servers.get_mut(host) {
                Some(ports) if ports.len() < MAX_PORTS_PER_HOST => {
                    ports.push((named_port, Arc::clone(&guards)))
                }
                Some(_) => {}
                None if known < MAX_DEPENDENCIES => {
                    servers.insert(host.into(), vec![(named_port, Arc::clone(&guards))]);
                }
                None => {}
            }
        }
        guards
    }

    /// The hedging delay `dependency` has learned as of `now` (a percentile
    /// delay's, from that dependency's own latencies): `None` when the
    /// registry hedges with a fixed delay or not at all, or the dependency
    /// has not been called. For tests and dashboards; `now` must come from
    /// the clock the calls run on (tokio's, under a paused clock).
    ///
    /// ```
    /// use retryscope::RetryBudget;
    /// use retryscope::hedge::{HedgeDelay, HedgePolicy};
    /// use retryscope_otel::DependencyGuards;
    /// use std::time::{Duration, Instant};
    ///
    /// let template = HedgePolicy::builder().delay(HedgeDelay::percentile(0.9)).build()?;
    /// let guards = DependencyGuards::<RetryBudget>::builder().hedge(template).build();
    /// assert_eq!(guards.hedge_delay("payments", Instant::now()), None);
    /// let _ = guards.get("payments");
    /// // Nothing measured yet: the fallback.
    /// assert_eq!(guards.hedge_delay("payments", Instant::now()), Some(Duration::from_millis(100)));
    /// # Ok::<(), retryscope::hedge::HedgePolicyError>(())
    /// ```
    pub fn hedge_delay(&self, dependency: &str, now: Instant) -> Option<Duration> {
        self.find(dependency)?.hedge()?.percentile_delay(now)
    }

    /// The guards of every dependency seen so far (at most
    /// [`MAX_DEPENDENCIES`] + 1): for gauges a caller registers itself
    /// ([`register_guard_gauges`](crate::register_guard_gauges)), and tests.
    pub fn all(&self) -> Vec<Arc<Guards<T>>> {
        self.inner.guards.read().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
    }

    /// How many dependencies have guards.
    pub fn len(&self) -> usize {
        self.inner.guards.read().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether no dependency has guards yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn find(&self, dependency: &str) -> Option<Arc<Guards<T>>> {
        // A poisoned lock only means a thread panicked while inserting; the map
        // itself is still consistent.
        self.inner.guards.read().unwrap_or_else(PoisonError::into_inner).get(dependency).cloned()
    }
}

impl<T: Throttle> Registry<T> {
    fn make(&self, dependency: Arc<str>) -> Guards<T> {
        let pacer = self.pacer.as_ref().map(|make| {
            let pacer = make();
            if let Some(share) = &self.pace_share {
                // A factory that hands one pacer to several dependencies
                // shares it under the first name only.
                pacer.share_with(Arc::clone(share), &dependency);
            }
            pacer
        });
        let budget = self.budget.as_ref().map(|make| {
            let budget = make();
            if let Some(share) = &self.budget_share {
                // A factory that hands one budget to several dependencies
                // shares it under the first name only.
                budget.share_floor(Arc::clone(share), &dependency);
            }
            budget
        });
        Guards {
            dependency,
            budget,
            breaker: self.breaker.as_ref().map(|make| make()),
            pacer,
            adaptive_throttle: self.adaptive_throttle.as_ref().map(|make| make()),
            concurrency_limit: self.concurrency_limit.as_ref().map(|make| make()),
            hedge: self.hedge.as_ref().map(HedgePolicy::fresh),
        }
    }
}

/// A snapshot of the guards of a registry that may be gone (then: none), so a
/// gauge callback neither keeps the registry alive nor holds its lock while
/// the SDK records.
fn live<T>(registry: &Weak<Registry<T>>) -> Vec<Arc<Guards<T>>> {
    registry
        .upgrade()
        .map(|registry| {
            registry.guards.read().unwrap_or_else(PoisonError::into_inner).values().cloned().collect()
        })
        .unwrap_or_default()
}

impl<T> fmt::Debug for DependencyGuards<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dependencies = self.inner.guards.read().map(|g| g.len()).unwrap_or_default();
        f.debug_struct("DependencyGuards")
            .field("dependencies", &dependencies)
            .field("budget", &self.inner.budget.is_some())
            .field("breaker", &self.inner.breaker.is_some())
            .field("pacer", &self.inner.pacer.is_some())
            .field("adaptive_throttle", &self.inner.adaptive_throttle.is_some())
            .field("concurrency_limit", &self.inner.concurrency_limit.is_some())
            .field("hedge", &self.inner.hedge.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_finds_the_guards_of_its_name_and_remembers_a_bounded_number() {
        let guards = DependencyGuards::<retryscope::RetryBudget>::builder().build();
        let plain = guards.for_server("inventory", Some(80), Some(80));
        assert_eq!(plain.dependency(), "inventory");
        assert!(Arc::ptr_eq(&plain, &guards.for_server("inventory", None, Some(80))));
        let other = guards.for_server("inventory", Some(8080), Some(80));
        assert_eq!(other.dependency(), "inventory:8080");
        assert!(Arc::ptr_eq(&other, &guards.get("inventory:8080")));
        for port in 0..40 {
            let found = guards.for_server("many", Some(port), None);
            assert_eq!(found.dependency(), format!("many:{port}"));
        }
        let servers = guards.inner.servers.read().map(|s| s["many"].len()).unwrap_or_default();
        assert_eq!(servers, MAX_PORTS_PER_HOST);
    }
}
