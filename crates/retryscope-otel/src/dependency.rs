//! Dependency names from traffic, bounded, and the guards kept per dependency.
//!
//! Integrations name the dependency after the server they call
//! ([`dependency_name`]: `server.address`, with `:port` when the port is not the
//! scheme's default). Those names come from traffic — a crawler or per-tenant
//! subdomains can produce any number of them — so every label value and every
//! per-dependency guard goes through one process-wide table that admits at most
//! [`MAX_DEPENDENCIES`] names and folds the rest into [`OVERFLOW`]. Operation
//! names get a table of their own with the same bound.

use crate::gauges;
use opentelemetry::metrics::Meter;
use retryscope::hedge::Hedge;
use retryscope::throttle::Throttle;
use retryscope::{CircuitBreaker, Pacer, Retry, Shared};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, LazyLock, PoisonError, RwLock, Weak};

/// How many distinct dependency names (and, separately, operation names) one
/// process reports. Further names are reported, and guarded, as [`OVERFLOW`].
pub const MAX_DEPENDENCIES: usize = 1_000;

/// How many ports of one host [`DependencyGuards::for_server`] remembers.
pub const MAX_PORTS_PER_HOST: usize = 16;

/// The name that stands for every dependency (or operation) beyond
/// [`MAX_DEPENDENCIES`], as the semantic conventions spell "other".
pub const OVERFLOW: &str = "_OTHER";

/// The dependency name of a server: `host`, or `host:port` when `port` is not
/// `default_port`, the scheme's own (80 for `http`, 443 for `https`). Two
/// services on one host are two dependencies; the default port adds nothing.
///
/// ```
/// use retryscope_otel::dependency_name;
///
/// assert_eq!(dependency_name("payments.internal", Some(443), Some(443)), "payments.internal");
/// assert_eq!(dependency_name("127.0.0.1", Some(8080), Some(80)), "127.0.0.1:8080");
/// assert_eq!(dependency_name("[::1]", Some(50051), None), "[::1]:50051");
/// assert_eq!(dependency_name("inventory", None, Some(80)), "inventory");
/// ```
pub fn dependency_name(host: &str, port: Option<u16>, default_port: Option<u16>) -> String {
    match port {
        Some(port) if Some(port) != default_port => format!("{host}:{port}"),
        _ => host.to_owned(),
    }
}

/// `name` as a dependency label: the name itself while fewer than
/// [`MAX_DEPENDENCIES`] distinct names have been seen by this process (or it was
/// seen before), else [`OVERFLOW`]. Names are interned: a name seen before costs
/// a shared lookup and no allocation.
///
/// ```
/// let label = retryscope_otel::bounded_dependency("inventory");
/// assert_eq!(&*label, "inventory");
/// ```
pub fn bounded_dependency(name: &str) -> Arc<str> {
    static DEPENDENCIES: LazyLock<NameTable> = LazyLock::new(|| NameTable::new(MAX_DEPENDENCIES));
    DEPENDENCIES.intern(name)
}

/// `name` as an operation label, bounded like [`bounded_dependency`] by a table
/// of its own.
pub fn bounded_operation(name: &str) -> Arc<str> {
    static OPERATIONS: LazyLock<NameTable> = LazyLock::new(|| NameTable::new(MAX_DEPENDENCIES));
    OPERATIONS.intern(name)
}

/// A set of at most `limit` names; the rest are [`OVERFLOW`].
pub(crate) struct NameTable {
    names: RwLock<HashSet<Arc<str>>>,
    overflow: Arc<str>,
    limit: usize,
}

impl NameTable {
    pub(crate) fn new(limit: usize) -> Self {
        Self { names: RwLock::default(), overflow: Arc::from(OVERFLOW), limit }
    }

    pub(crate) fn intern(&self, name: &str) -> Arc<str> {
        // A poisoned lock only means a thread panicked while inserting a name;
        // the set itself is still consistent.
        if let Some(known) = self.names.read().unwrap_or_else(PoisonError::into_inner).get(name) {
            return Arc::clone(known);
        }
        let mut names = self.names.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = names.get(name) {
            return Arc::clone(known);
        }
        if names.len() >= self.limit || name == OVERFLOW {
            return Arc::clone(&self.overflow);
        }
        let interned: Arc<str> = Arc::from(name);
        names.insert(Arc::clone(&interned));
        interned
    }
}

/// Makes a budget or a breaker for a newly seen dependency.
pub type Factory<T> = Arc<dyn Fn() -> T + Send + Sync>;

/// The guards of one dependency: a retry budget (any [`Throttle`]), a circuit
/// breaker and a [`Pacer`], each optional.
pub struct Guards<T> {
    dependency: Arc<str>,
    budget: Option<T>,
    breaker: Option<CircuitBreaker>,
    pacer: Option<Pacer>,
}

impl<T> Guards<T> {
    /// The dependency's bounded name: the label to report it under.
    pub fn dependency(&self) -> &str {
        &self.dependency
    }

    /// The dependency's retry budget, if it has one.
    pub fn budget(&self) -> Option<&T> {
        self.budget.as_ref()
    }

    /// The dependency's circuit breaker, if it has one.
    pub fn breaker(&self) -> Option<&CircuitBreaker> {
        self.breaker.as_ref()
    }

    /// The dependency's pacer, if it has one.
    pub fn pacer(&self) -> Option<&Pacer> {
        self.pacer.as_ref()
    }
}

impl<T: Throttle> Guards<T> {
    /// Puts this dependency on `retry`: its name, budget, breaker and pacer,
    /// borrowed from these guards, and the caller's `operation` if it names
    /// one. What every integration does to each call, written once.
    pub fn guard<'a, Op, C, O, N>(
        &'a self,
        retry: Retry<'a, Op, C, O, N>,
        operation: Option<impl Into<Shared<'a, str>>>,
    ) -> Retry<'a, Op, C, O, N> {
        // The interned name: an `Arc`, found without copying it.
        let retry = retry.dependency(self.dependency());
        let retry = match (self.budget(), self.breaker(), self.pacer()) {
            // The default guards, in one chain: each step of the conditional
            // chain below moves the whole builder once more.
            (Some(budget), Some(breaker), Some(pacer)) => retry.budget(budget).breaker(breaker).pacer(pacer),
            (budget, breaker, pacer) => {
                let retry = match budget {
                    Some(budget) => retry.budget(budget),
                    None => retry,
                };
                let retry = match breaker {
                    Some(breaker) => retry.breaker(breaker),
                    None => retry,
                };
                match pacer {
                    Some(pacer) => retry.pacer(pacer),
                    None => retry,
                }
            }
        };
        match operation {
            Some(operation) => retry.operation(operation),
            None => retry,
        }
    }

    /// [`guard`](Self::guard) for a hedged call: every copy beyond the first
    /// is charged to the budget like a retry, and the breaker is asked before
    /// each. No pacer: the engine gives a hedge none (hedging answers a slow
    /// dependency, not one that asked to be called less).
    pub fn guard_hedge<'a, Op, C, O>(
        &'a self,
        hedge: Hedge<'a, Op, C, O>,
        operation: Option<impl Into<Shared<'a, str>>>,
    ) -> Hedge<'a, Op, C, O> {
        let hedge = hedge.dependency(self.dependency());
        let hedge = match self.budget() {
            Some(budget) => hedge.budget(budget),
            None => hedge,
        };
        let hedge = match self.breaker() {
            Some(breaker) => hedge.breaker(breaker),
            None => hedge,
        };
        match operation {
            Some(operation) => hedge.operation(operation),
            None => hedge,
        }
    }
}

impl<T> fmt::Debug for Guards<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guards")
            .field("dependency", &self.dependency)
            .field("budget", &self.budget.is_some())
            .field("breaker", &self.breaker.is_some())
            .field("pacer", &self.pacer.is_some())
            .finish()
    }
}

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
}

/// Configures a [`DependencyGuards`]: which guards each dependency gets, and
/// where their gauges go.
#[must_use = "a builder does nothing until `build` is called"]
pub struct DependencyGuardsBuilder<T> {
    budget: Option<Factory<T>>,
    breaker: Option<Factory<CircuitBreaker>>,
    pacer: Option<Factory<Pacer>>,
    meter: Option<Meter>,
}

impl<T> fmt::Debug for DependencyGuardsBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DependencyGuardsBuilder")
            .field("budget", &self.budget.is_some())
            .field("breaker", &self.breaker.is_some())
            .field("pacer", &self.pacer.is_some())
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

    /// Sets (or, with `None`, removes) the shared budget factory.
    pub fn budget_factory(mut self, make: Option<Factory<T>>) -> Self {
        self.budget = make;
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
}

impl<T: Throttle + 'static> DependencyGuards<T> {
    /// A registry with no guards and no gauges yet: see the builder's methods.
    pub fn builder() -> DependencyGuardsBuilder<T> {
        DependencyGuardsBuilder { budget: None, breaker: None, pacer: None, meter: None }
    }

    /// The guards of `dependency`, created on first use. A name beyond the
    /// process's [`MAX_DEPENDENCIES`] gets the guards of [`OVERFLOW`].
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

impl<T> Registry<T> {
    fn make(&self, dependency: Arc<str>) -> Guards<T> {
        Guards {
            dependency,
            budget: self.budget.as_ref().map(|make| make()),
            breaker: self.breaker.as_ref().map(|make| make()),
            pacer: self.pacer.as_ref().map(|make| make()),
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
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_folds_new_names_and_keeps_old_ones() {
        let table = NameTable::new(2);
        assert_eq!(&*table.intern("a"), "a");
        assert_eq!(&*table.intern("b"), "b");
        assert_eq!(&*table.intern("c"), OVERFLOW);
        assert_eq!(&*table.intern("a"), "a");
        assert_eq!(table.names.read().map(|n| n.len()).unwrap_or_default(), 2);
    }

    #[test]
    fn interned_names_are_shared() {
        let table = NameTable::new(10);
        assert!(Arc::ptr_eq(&table.intern("inventory"), &table.intern("inventory")));
    }

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

    #[test]
    fn the_overflow_name_takes_no_slot() {
        let table = NameTable::new(1);
        assert_eq!(&*table.intern(OVERFLOW), OVERFLOW);
        assert_eq!(&*table.intern("a"), "a");
    }
}
