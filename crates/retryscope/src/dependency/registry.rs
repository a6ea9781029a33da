//! The guards kept per dependency: one registry per client, bounded by the
//! process's table of dependency names ([`bounded_dependency`]) and, beyond
//! it, by a table of its own ([`overflow`]).

use super::bounded::{MAX_DEPENDENCIES, OVERFLOW, bounded_dependency, dependency_name};
use super::builder::DependenciesBuilder;
use super::overflow::{MAX_OVERFLOW_GUARDS, OverflowGuards};
use super::value::Dependency;
use crate::guard::{Chained, Gauge, Guard, SharedGuard};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

/// How many ports of one host [`Dependencies::for_server`] remembers.
pub(crate) const MAX_PORTS_PER_HOST: usize = 16;

/// Makes a budget or a breaker for a newly seen dependency.
pub(crate) type Factory<T> = Arc<dyn Fn() -> T + Send + Sync>;

/// One budget, one breaker and one pacer per dependency, created on first use and shared
/// by every clone — what a client keeps so that a failing dependency cannot
/// spend the retries of a healthy one.
///
/// Dependencies are named through [`bounded_dependency`]: the first
/// [`MAX_DEPENDENCIES`] names of the process get guards under their own name.
/// A dependency beyond that bound gets guards of its own too, labelled
/// [`OVERFLOW`] (`_OTHER`): the registry keeps at most 1,000 such sets, by the
/// dependency's full name, and evicts the least recently used when a new one
/// comes (a host that comes back after its set was evicted starts with fresh
/// guards: breaker closed, no pacer gate, a full budget). So the registry
/// holds at most [`MAX_DEPENDENCIES`] + 1,000 guard sets whatever the
/// traffic, and no host shares a breaker or a pacer gate with another. An
/// overflow set's pacer is never shared with a fleet ([`pace_share`](DependenciesBuilder::pace_share)):
/// a fleet's gates are keyed by the dependency's name, and under `_OTHER`
/// one host's `429` would hold every replica's calls to every other host past
/// the bound.
///
/// The registry knows nothing of telemetry: retryscope-otel's
/// `publish_dependency_gauges` reads every guard set at each collection
/// through [`live`](Dependencies::live), which holds the registry
/// weakly, so dropping the last clone frees the guards and ends the
/// reports.
///
/// ```
/// use retryscope::{CircuitBreaker, RetryBudget};
/// use retryscope::dependency::Dependencies;
///
/// let guards = Dependencies::builder()
///     .budget(RetryBudget::default)
///     .breaker(CircuitBreaker::default)
///     .build();
/// let payments = guards.get("payments:8443");
/// assert_eq!(payments.name(), "payments:8443");
/// assert!(payments.budget().is_some() && payments.breaker().is_some());
/// assert!(std::sync::Arc::ptr_eq(&payments, &guards.get("payments:8443")));
/// ```
pub struct Dependencies {
    pub(super) inner: Arc<Registry>,
}

impl Clone for Dependencies {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

/// A factory making `first`'s guards (if any) and then `make`'s, composed
/// into one [`Guard`] (a pair: both asked, in that order): how a builder's
/// `guard` called twice gives each dependency both.
pub(super) fn and_guard<G: Guard<Permit = ()> + 'static>(
    first: Option<Factory<SharedGuard>>,
    make: impl Fn() -> G + Send + Sync + 'static,
) -> Factory<SharedGuard> {
    match first {
        None => Arc::new(move || Arc::new(make())),
        Some(first) => Arc::new(move || Arc::new(Chained(first(), Arc::new(make())))),
    }
}

/// Each host's guards, by the port in its dependency name (`None`: the scheme's).
type Servers = HashMap<Box<str>, Vec<(Option<u16>, Arc<Dependency>)>>;

pub(super) struct Registry {
    /// The named guard sets, by their label, which the label table keeps
    /// for the life of the process.
    pub(super) guards: RwLock<HashMap<&'static str, Arc<Dependency>>>,
    /// The guards of the dependencies beyond the label bound, one set each.
    pub(super) overflow: OverflowGuards,
    /// The guards found for each server (host, then the port in its name), so
    /// that a request finds its dependency without building the name.
    pub(super) servers: RwLock<Servers>,
    /// What each dependency gets: the builder the registry was built from.
    pub(super) template: DependenciesBuilder,
    /// The gauges every dependency's guards publish.
    pub(super) guard_gauges: Vec<&'static Gauge>,
}

impl Dependencies {
    /// A registry with no guards and no gauges yet: see the builder's methods.
    pub fn builder() -> DependenciesBuilder {
        DependenciesBuilder {
            budget: None,
            breaker: None,
            pacer: None,
            pace_share: None,
            budget_share: None,
            concurrency_limit: None,
            guard: None,
            hedge: None,
            overflow_capacity: MAX_OVERFLOW_GUARDS,
            labels: bounded_dependency,
        }
    }

    /// The guards of `dependency`, created on first use. A name beyond the
    /// process's [`MAX_DEPENDENCIES`] gets guards of its own, labelled
    /// [`OVERFLOW`], kept while it is among the 1,000 such names this
    /// registry used last (see the type's documentation).
    pub fn get(&self, dependency: &str) -> Arc<Dependency> {
        // The named path: one read lock, as before overflow sets existed.
        if let Some(found) = self.find(dependency) {
            return found;
        }
        // A name the label table folded once, it folds for good (the table
        // never forgets a name, and admits none once full): its set, if
        // kept, is found before the table is asked again.
        if let Some(found) = self.inner.overflow.find(dependency) {
            return found;
        }
        let name = (self.inner.template.labels)(dependency);
        if name == OVERFLOW {
            return self.inner.overflow.get_or_make(dependency, || self.inner.template.make(name, false));
        }
        if let Some(found) = self.find(name) {
            return found;
        }
        let mut guards = self.inner.guards.write().unwrap_or_else(PoisonError::into_inner);
        let entry = guards.entry(name).or_insert_with(|| Arc::new(self.inner.template.make(name, true)));
        Arc::clone(entry)
    }

    /// The guards of the server at `host` and `port`, named as
    /// [`dependency_name`] names it (`default_port` is the scheme's): the same
    /// guards as `get(&dependency_name(host, port, default_port))`, found
    /// without building the name once the server has been seen. At most
    /// [`MAX_DEPENDENCIES`] hosts and 16 ports per host are
    /// remembered; further servers, and servers beyond the label bound (whose
    /// guards may be evicted), are looked up by name, as [`get`](Self::get)
    /// does.
    ///
    /// ```
    /// use retryscope::RetryBudget;
    /// use retryscope::dependency::Dependencies;
    ///
    /// let guards = Dependencies::builder().budget(RetryBudget::default).build();
    /// let server = guards.for_server("127.0.0.1", Some(8080), Some(80));
    /// assert_eq!(server.name(), "127.0.0.1:8080");
    /// assert!(std::sync::Arc::ptr_eq(&server, &guards.get("127.0.0.1:8080")));
    /// ```
    pub fn for_server(&self, host: &str, port: Option<u16>, default_port: Option<u16>) -> Arc<Dependency> {
        let named_port = port.filter(|port| Some(*port) != default_port);
        let find = |servers: &Servers| {
            servers.get(host)?.iter().find(|(p, _)| *p == named_port).map(|(_, guards)| Arc::clone(guards))
        };
        if let Some(found) = find(&self.inner.servers.read().unwrap_or_else(PoisonError::into_inner)) {
            return found;
        }
        let guards = self.get(&dependency_name(host, port, default_port));
        // An overflow set is not remembered here: it may be evicted, and a
        // server kept here would keep it alive beside its successor.
        if guards.name() == OVERFLOW {
            return guards;
        }
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
    /// use retryscope::dependency::Dependencies;
    /// use std::time::{Duration, Instant};
    ///
    /// let template = HedgePolicy::builder().delay(HedgeDelay::percentile(0.9)).build()?;
    /// let guards = Dependencies::builder().hedge(template).build();
    /// assert_eq!(guards.hedge_delay("payments", Instant::now()), None);
    /// let _ = guards.get("payments");
    /// // Nothing measured yet: the fallback.
    /// assert_eq!(guards.hedge_delay("payments", Instant::now()), Some(Duration::from_millis(100)));
    /// # Ok::<(), retryscope::SettingError>(())
    /// ```
    pub fn hedge_delay(&self, dependency: &str, now: Instant) -> Option<Duration> {
        let found = self.find(dependency).or_else(|| self.inner.overflow.find(dependency));
        found?.hedge()?.percentile_delay(now)
    }

    /// The guards of every dependency kept now (at most
    /// [`MAX_DEPENDENCIES`] named sets and 1,000 labelled `_OTHER`): for
    /// gauges a caller registers itself (retryscope-otel's
    /// `register_guard_gauges` reports the `_OTHER` sets as one series), and
    /// tests.
    pub fn all(&self) -> Vec<Arc<Dependency>> {
        self.inner.all()
    }

    /// [`all`](Self::all), as a reader that does not keep the registry
    /// alive: once the last clone is dropped it reads nothing. What a gauge
    /// callback holds — telemetry keeps callbacks for the meter provider's
    /// lifetime, and must not keep the guards for as long.
    pub fn live(&self) -> impl Fn() -> Vec<Arc<Dependency>> + Send + Sync + 'static {
        let registry = Arc::downgrade(&self.inner);
        move || registry.upgrade().map(|registry| registry.all()).unwrap_or_default()
    }

    /// The gauges every dependency's guards publish, built-in and further
    /// ones alike ([`Dependency::published`]): what a telemetry crate
    /// registers for them, reading each at every collection through
    /// [`Dependency::gauges`].
    ///
    /// ```
    /// use retryscope::dependency::Dependencies;
    /// use retryscope::{CircuitBreaker, RetryBudget, breaker, budget};
    ///
    /// let guards = Dependencies::builder().budget(RetryBudget::default).breaker(CircuitBreaker::default).build();
    /// let names: Vec<_> = guards.guard_gauges().iter().map(|gauge| gauge.name).collect();
    /// assert_eq!(names, ["retryscope.breaker.state", "retryscope.budget.available"]);
    /// ```
    pub fn guard_gauges(&self) -> &[&'static Gauge] {
        &self.inner.guard_gauges
    }

    /// How many guard sets the registry keeps: one per named dependency, and
    /// one per dependency beyond the label bound that it keeps now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.guards.read().unwrap_or_else(PoisonError::into_inner).len() + self.inner.overflow.len()
    }

    fn find(&self, dependency: &str) -> Option<Arc<Dependency>> {
        // A poisoned lock only means a thread panicked while inserting; the map
        // itself is still consistent.
        self.inner.guards.read().unwrap_or_else(PoisonError::into_inner).get(dependency).cloned()
    }
}

impl Registry {
    /// Every guard set kept now, the named ones and those beyond the bound.
    fn all(&self) -> Vec<Arc<Dependency>> {
        let mut all: Vec<_> =
            self.guards.read().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
        all.extend(self.overflow.all());
        all
    }
}

impl fmt::Debug for Dependencies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dependencies = self.inner.guards.read().map(|g| g.len()).unwrap_or_default();
        f.debug_struct("Dependencies")
            .field("dependencies", &dependencies)
            .field("overflow", &self.inner.overflow.len())
            .field("template", &self.inner.template)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pace::PaceShare;
    use crate::{CircuitBreaker, Pacer};

    #[test]
    fn a_server_finds_the_guards_of_its_name_and_remembers_a_bounded_number() {
        let guards = Dependencies::builder().build();
        let plain = guards.for_server("inventory", Some(80), Some(80));
        assert_eq!(plain.name(), "inventory");
        assert!(Arc::ptr_eq(&plain, &guards.for_server("inventory", None, Some(80))));
        let other = guards.for_server("inventory", Some(8080), Some(80));
        assert_eq!(other.name(), "inventory:8080");
        assert!(Arc::ptr_eq(&other, &guards.get("inventory:8080")));
        for port in 0..40 {
            let found = guards.for_server("many", Some(port), None);
            assert_eq!(found.name(), format!("many:{port}"));
        }
        let servers = guards.inner.servers.read().map(|s| s["many"].len()).unwrap_or_default();
        assert_eq!(servers, MAX_PORTS_PER_HOST);
    }

    use crate::breaker::BreakerState;
    use crate::pace::{HoldSource, SharedPacer};
    use std::sync::Mutex;

    /// A label table that admits `named` alone, as a full one would: every
    /// other name is beyond the bound, without filling the process's table
    /// (whichever test ran first would take its slots).
    fn one_name(name: &str) -> &'static str {
        if name == "named" { "named" } else { OVERFLOW }
    }

    /// A breaker that opens on the first failure.
    fn hair_trigger() -> CircuitBreaker {
        CircuitBreaker::builder().min_calls(1).failure_ratio(0.5).build().expect("valid breaker")
    }

    fn registry(overflow: usize) -> Dependencies {
        Dependencies::builder()
            .breaker(hair_trigger)
            .pacer(Pacer::new)
            .labels(one_name)
            .overflow_capacity(overflow)
            .build()
    }

    #[test]
    fn hosts_beyond_the_label_bound_get_guards_of_their_own_labelled_other() {
        let guards = registry(2);
        let named = guards.get("named");
        assert_eq!(named.name(), "named");
        let (a, b) = (guards.get("a.test"), guards.get("b.test"));
        assert_eq!((a.name(), b.name()), (OVERFLOW, OVERFLOW));
        assert!(!Arc::ptr_eq(&a, &b), "two hosts past the bound share one set");
        // One host's failures open its breaker only.
        let breaker = a.breaker().expect("a breaker");
        breaker.try_acquire().expect("closed").failure();
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(b.breaker().map(CircuitBreaker::state), Some(BreakerState::Closed));
        // Each is found again; the named path still finds its own set.
        assert!(Arc::ptr_eq(&a, &guards.get("a.test")));
        assert!(Arc::ptr_eq(&b, &guards.for_server("b.test", None, None)));
        assert!(Arc::ptr_eq(&named, &guards.get("named")));
        assert!(Arc::ptr_eq(&named, &guards.for_server("named", None, None)));
        assert_eq!(guards.len(), 3);
        assert_eq!(guards.all().iter().filter(|g| g.name() == OVERFLOW).count(), 2);
        // An overflow host is not remembered by server: its set may be evicted.
        let servers = guards.inner.servers.read().map(|s| s.contains_key("b.test")).unwrap_or(true);
        assert!(!servers);
    }

    #[test]
    fn the_least_recently_used_overflow_set_is_evicted_first() {
        let guards = registry(2);
        let _ = guards.get("named");
        let (a, b) = (guards.get("a.test"), guards.get("b.test"));
        // `a` used again, after `b`: `b` is the least recently used.
        assert!(Arc::ptr_eq(&a, &guards.get("a.test")));
        let c = guards.get("c.test");
        assert_eq!(guards.inner.overflow.len(), 2, "bounded");
        assert!(Arc::ptr_eq(&a, &guards.get("a.test")), "the recently used set is kept");
        assert!(Arc::ptr_eq(&c, &guards.get("c.test")));
        // `b` comes back: fresh guards, and now `a` is the oldest.
        let fresh = guards.get("b.test");
        assert!(!Arc::ptr_eq(&b, &fresh), "an evicted host starts again");
        assert!(Arc::ptr_eq(&c, &guards.get("c.test")));
        assert!(!Arc::ptr_eq(&a, &guards.get("a.test")), "a was the least recently used");
        // The named set is never evicted.
        assert_eq!(guards.inner.guards.read().map(|g| g.len()).unwrap_or_default(), 1);
        assert_eq!(guards.get("named").name(), "named");
    }

    /// A fleet that only records which dependencies' pacers joined it.
    #[derive(Debug, Default)]
    struct Joined(Mutex<Vec<String>>);

    impl PaceShare for Joined {
        fn publish_gate(&self, _dependency: &str, _wait: Duration, _source: HoldSource) {}
        fn replicas(&self, _dependency: &str) -> u32 {
            1
        }
        fn attach(&self, dependency: &str, _pacer: SharedPacer) {
            self.0.lock().unwrap_or_else(PoisonError::into_inner).push(dependency.to_owned());
        }
    }

    #[test]
    fn an_overflow_hosts_pacer_is_not_shared_with_the_fleet() {
        let fleet = Arc::new(Joined::default());
        let guards = Dependencies::builder()
            .pacer(Pacer::new)
            .pace_share(Some(fleet.clone()))
            .labels(one_name)
            .build();
        let _ = (guards.get("named"), guards.get("a.test"), guards.get("b.test"));
        let joined = fleet.0.lock().map(|j| j.clone()).unwrap_or_default();
        assert_eq!(joined, ["named"]);
        assert!(guards.get("a.test").pacer().is_some_and(|p| !p.is_shared()));
    }
}
