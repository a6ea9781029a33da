//! A configured client's guards from its file: the budget, breaker, pacer
//! and in-flight budget of each dependency the file names, and of the calls
//! no dependency matches where the `defaults` write one of them. The file's
//! in-flight budget goes beside the guards code gives with
//! `guard_per_dependency`, never instead of them.
//!
//! - **Where they are kept.** Each named dependency has one set of guards,
//!   shared by every call of it whatever host it reaches, and reported
//!   (gauges and the call's own metrics) under the dependency's name in the
//!   file: the name the operator wrote is the name on the dashboards.
//!   Calls no dependency matches take the defaults' settings with guards
//!   per server (`host:port`, as a client built in code keeps them): one
//!   failing host must not open a breaker for every other. Where the
//!   defaults write no guard key, those calls keep the builder's per-host
//!   guards themselves.
//! - **Precedence.** Per key: a key the file writes (here or in `defaults`)
//!   is built from the file, `enabled = false` included (no such guard); a
//!   key it does not write is made by the builder's factory
//!   (`budget_per_dependency`, …), as are the adaptive throttle, the
//!   concurrency limit and the hedging template, but kept with the file's
//!   guards.
//! - **Reload.** The guards are brought in line with the handle's snapshot
//!   by the first call that sees a new one: a dependency whose guard
//!   settings did not change ([`DependencySettings::guards_differ`]) keeps
//!   its guards and their state (budget tokens, breaker state, pacer gates);
//!   one whose settings changed gets fresh ones; a dependency removed from
//!   the file is dropped. At most
//!   [`MAX_DEPENDENCIES`](retryscope_config::MAX_DEPENDENCIES) named sets
//!   exist, plus the defaults' per-server registry (bounded as any).
//! - **Cost.** A call ([`FileGuards::call`]) while the handle's
//!   [generation](ConfigHandle::generation) is the one the guards were
//!   brought in line with reads one atomic, takes one read lock, resolves its
//!   settings under the snapshot kept here and finds its set by the
//!   dependency's [`index`](DependencySettings::index): no hashing, no
//!   allocation, no load of the handle's own snapshot, less than the
//!   per-host lookup a client built in code makes. Pacers built
//!   here are shared with the client's fleet (`pace_shared`), and budgets'
//!   floors divided among it (`budget_shared`), as the builder's own are.

use crate::configured::CallConfig;
use crate::settings::ClientSettings;
use retryscope::budget::Budget;
use retryscope::budget::{BudgetShare, InFlightBudget};
use retryscope::dependency::{Dependencies, DependenciesBuilder, Dependency, Factory, and_guard};
use retryscope::guard::SharedGuard;
use retryscope::hedge::HedgePolicy;
use retryscope::overload::ConcurrencyLimiter;
use retryscope::pace::PaceShare;
use retryscope::{CircuitBreaker, Pacer, RetryBudget};
use retryscope_config::{Config, ConfigHandle, DependencySettings, Target};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock, Weak};

/// What the client's builder makes per dependency: the guards for the keys a
/// file does not write, and how a file's budget becomes the client's budget
/// type.
pub struct CodeFactories<T> {
    /// The builder's budget factory.
    pub budget: Option<Factory<T>>,
    /// The builder's breaker factory.
    pub breaker: Option<Factory<CircuitBreaker>>,
    /// The builder's pacer factory.
    pub pacer: Option<Factory<Pacer>>,
    /// The fleet every pacer is shared with.
    pub pace_share: Option<Arc<dyn PaceShare>>,
    /// The fleet every retry budget's floor is divided among.
    pub budget_share: Option<Arc<dyn BudgetShare>>,
    /// The builder's concurrency limit factory.
    pub concurrency_limit: Option<Factory<ConcurrencyLimiter>>,
    /// The builder's [`Guard`](retryscope::guard::Guard)s: `guard_per_dependency`'s, then the
    /// adaptive throttle (`adaptive_throttle_per_dependency`), composed.
    pub guard: Option<Factory<SharedGuard>>,
    /// The builder's hedging template.
    pub hedge: Option<HedgePolicy>,
    /// A file's retry budget as the client's budget type.
    pub wrap: fn(RetryBudget) -> T,
}

impl<T: Budget + 'static> CodeFactories<T> {
    /// What a client built with `settings` makes per dependency, its budgets
    /// made by `budget` (the settings' own, or a gRPC channel's token
    /// bucket) and a file's wrapped by `wrap`: what both integrations'
    /// builders hand their registries, written once.
    pub fn of(settings: &ClientSettings, budget: Option<Factory<T>>, wrap: fn(RetryBudget) -> T) -> Self {
        Self {
            budget,
            breaker: settings.breaker.clone(),
            pacer: settings.pacer.clone(),
            pace_share: settings.pace_share.clone(),
            budget_share: settings.budget_share.clone(),
            concurrency_limit: settings.concurrency_limit.clone(),
            guard: match settings.adaptive_throttle.clone() {
                Some(throttle) => Some(and_guard(settings.guard.clone(), move || throttle())),
                None => settings.guard.clone(),
            },
            hedge: settings.hedge.clone(),
            wrap,
        }
    }

    /// A registry whose every guard is made by these factories (no meter
    /// yet): the client's per-host guards, and a file's keys left to code.
    pub fn registry(&self) -> DependenciesBuilder<T> {
        let mut registry = Dependencies::builder()
            .pace_share(self.pace_share.clone())
            .budget_share(self.budget_share.clone())
            .guard_factory(self.guard.clone());
        if let Some(make) = self.budget.clone() {
            registry = registry.budget(move || make());
        }
        if let Some(make) = self.breaker.clone() {
            registry = registry.breaker(move || make());
        }
        if let Some(make) = self.pacer.clone() {
            registry = registry.pacer(move || make());
        }
        if let Some(make) = self.concurrency_limit.clone() {
            registry = registry.concurrency_limit(move || make());
        }
        if let Some(template) = self.hedge.clone() {
            registry = registry.hedge(template);
        }
        registry
    }

    /// The client's own registry, made by these factories, its gauges
    /// published on `meter` where telemetry is on.
    pub fn build(&self, meter: Option<&opentelemetry::metrics::Meter>) -> Dependencies<T>
    where
        T: Send + Sync,
    {
        let registry = self.registry().build();
        if let Some(meter) = meter {
            retryscope_otel::publish_dependency_gauges(meter, &registry);
        }
        registry
    }
}

impl<T> Clone for CodeFactories<T> {
    fn clone(&self) -> Self {
        Self {
            budget: self.budget.clone(),
            breaker: self.breaker.clone(),
            pacer: self.pacer.clone(),
            pace_share: self.pace_share.clone(),
            budget_share: self.budget_share.clone(),
            concurrency_limit: self.concurrency_limit.clone(),
            guard: self.guard.clone(),
            hedge: self.hedge.clone(),
            wrap: self.wrap,
        }
    }
}

/// The guards a configured client takes from its file (see the module's
/// documentation). Cloning shares them.
pub struct FileGuards<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for FileGuards<T> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

struct Inner<T> {
    handle: ConfigHandle,
    code: CodeFactories<T>,
    state: RwLock<State<T>>,
}

struct State<T> {
    /// The snapshot the sets below were made for.
    synced: Option<Arc<Config>>,
    /// The handle's generation read before `synced` was loaded: while the
    /// handle's stays the same, `synced` is the configuration in force.
    generation: u64,
    /// Each named dependency's guards (calls', not jobs'), by name: what a
    /// reload keeps, and how a call of an older snapshot finds its own.
    named: HashMap<Arc<str>, Slot<T>>,
    /// The same sets by [`DependencySettings::index`] in `synced`: a call
    /// of that snapshot finds its own there.
    by_index: Vec<Option<Arc<Dependency<T>>>>,
    /// The defaults' guards, per server, if the defaults write a guard key.
    defaults: Option<Slot<T>>,
}

/// One dependency's guards and the settings they were made from.
struct Slot<T> {
    settings: Arc<DependencySettings>,
    /// A named dependency's holds its one set (under its name); the
    /// defaults' one per server.
    guards: Dependencies<T>,
}

impl<T: Budget + 'static> FileGuards<T> {
    /// The guards of `handle`'s file, made with `code` for what it does not
    /// write; with a `meter`, the gauges of every guard a file's sets may
    /// have are registered once, holding the guards weakly.
    pub fn new(
        handle: ConfigHandle,
        code: CodeFactories<T>,
        meter: Option<&opentelemetry::metrics::Meter>,
    ) -> Self {
        let inner = Arc::new(Inner {
            handle,
            code,
            state: RwLock::new(State {
                synced: None,
                generation: 0,
                named: HashMap::new(),
                by_index: Vec::new(),
                defaults: None,
            }),
        });
        if let Some(meter) = meter {
            // The gauges of the guards a file's sets may have: the code's,
            // and those a file may write (a budget, a breaker, a pacer, an
            // in-flight budget), as a registry with all of them learns them.
            let wrap = inner.code.wrap;
            let every = CodeFactories {
                budget: Some(Arc::new(move || wrap(RetryBudget::default()))),
                breaker: Some(Arc::new(CircuitBreaker::default)),
                pacer: Some(Arc::new(Pacer::new)),
                guard: Some(and_guard(inner.code.guard.clone(), InFlightBudget::envoy)),
                ..inner.code.clone()
            };
            let guard_gauges = every.registry().build().guard_gauges().to_vec();
            let weak: Weak<Inner<T>> = Arc::downgrade(&inner);
            let live = move || weak.upgrade().map(|inner| inner.all()).unwrap_or_default();
            retryscope_otel::register_guard_gauges(meter, live, &guard_gauges);
        }
        Self { inner }
    }

    /// The [generation](ConfigHandle::generation) of the configuration in
    /// force: what a client that keeps something per configuration (a gRPC
    /// layer, per method) tags it with.
    pub fn generation(&self) -> u64 {
        self.inner.handle.generation()
    }

    /// A call to `target` (`port`: the URL's, `None` for the scheme's
    /// `default_port`; `target.port`, what the file matches, may be either):
    /// its settings from the configuration in force and its guards, as
    /// [`for_call`](Self::for_call) finds them. While the handle's
    /// [generation](ConfigHandle::generation) is the one the guards were
    /// brought in line with, one read lock serves both, the snapshot kept
    /// here standing in for the handle's own load (~70 instructions a call,
    /// issue 35's whole-call gate).
    pub fn call(
        &self,
        target: &Target<'_>,
        port: Option<u16>,
        default_port: Option<u16>,
    ) -> (CallConfig, Option<Arc<Dependency<T>>>) {
        let generation = self.inner.handle.generation();
        {
            let state = self.inner.state.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(snapshot) = state.synced.as_ref().filter(|_| state.generation == generation) {
                let call = CallConfig::of(Arc::clone(snapshot), target);
                let guards = state.guards_of(call.settings(), true, target.host, port, default_port);
                return (call, guards);
            }
        }
        // A configuration not seen yet: the guards follow it first.
        self.sync();
        let call = CallConfig::of(self.inner.handle.snapshot(), target);
        let guards = self.for_call(&call, target.host, port, default_port);
        (call, guards)
    }

    /// The guards of `call`, a call to `host` (`port`: the URL's, `None` for
    /// the scheme's `default_port`): its named dependency's, or the
    /// defaults' for that server; `None` for a call no dependency matches
    /// when the defaults write no guard key — the builder's per-host guards
    /// serve it.
    pub fn for_call(
        &self,
        call: &CallConfig,
        host: &str,
        port: Option<u16>,
        default_port: Option<u16>,
    ) -> Option<Arc<Dependency<T>>> {
        {
            let state = self.inner.state.read().unwrap_or_else(PoisonError::into_inner);
            if state.is_synced(call.snapshot()) {
                return state.guards_of(call.settings(), true, host, port, default_port);
            }
        }
        // A snapshot not seen yet (a reload), or an older one a call took
        // just before the reload: the guards follow the handle's newest, and
        // a call of an older one takes its dependency's there by name (if
        // the newest file no longer names it, the builder's per-host guards
        // serve it).
        self.sync();
        let state = self.inner.state.read().unwrap_or_else(PoisonError::into_inner);
        let same = state.is_synced(call.snapshot());
        state.guards_of(call.settings(), same, host, port, default_port)
    }

    /// The named dependencies that have guards from the file now (every
    /// dependency of the newest snapshot a call has seen), for tests and
    /// dashboards.
    pub fn dependencies(&self) -> Vec<Arc<str>> {
        let state = self.inner.state.read().unwrap_or_else(PoisonError::into_inner);
        state.named.keys().cloned().collect()
    }

    /// Brings the sets in line with the handle's newest snapshot.
    fn sync(&self) {
        let generation = self.inner.handle.generation();
        let current = self.inner.handle.snapshot();
        let mut state = self.inner.state.write().unwrap_or_else(PoisonError::into_inner);
        // Another call brought them in line with a newer one meanwhile.
        if generation < state.generation {
            return;
        }
        state.generation = generation;
        if state.synced.as_ref().is_some_and(|s| Arc::ptr_eq(s, &current)) {
            return;
        }
        let mut named = HashMap::with_capacity(state.named.len());
        let mut by_index = Vec::new();
        for settings in current.dependencies() {
            let (Some(name), Some(index), false) = (settings.name(), settings.index(), settings.is_job())
            else {
                continue;
            };
            let slot = match state.named.remove(name) {
                Some(kept) if !kept.settings.guards_differ(settings) => kept,
                _ => Slot::new(settings, &self.inner.code),
            };
            if by_index.len() <= index {
                by_index.resize(index + 1, None);
            }
            by_index[index] = Some(slot.guards.get(name));
            named.insert(Arc::from(name), slot);
        }
        let defaults = current.defaults();
        state.defaults = match state.defaults.take() {
            _ if !defaults.sets_guards() => None,
            Some(kept) if !kept.settings.guards_differ(defaults) => Some(kept),
            _ => Some(Slot::new(defaults, &self.inner.code)),
        };
        state.named = named;
        state.by_index = by_index;
        state.synced = Some(current);
    }
}

impl<T: Budget + 'static> Inner<T> {
    /// Every guard set alive, for the gauges.
    fn all(&self) -> Vec<Arc<Dependency<T>>> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state.named.values().chain(state.defaults.as_ref()).flat_map(|slot| slot.guards.all()).collect()
    }
}

impl<T: Budget + 'static> State<T> {
    fn is_synced(&self, snapshot: &Arc<Config>) -> bool {
        self.synced.as_ref().is_some_and(|s| Arc::ptr_eq(s, snapshot))
    }

    /// `settings`' guards, `None` where the file gives the call none (see
    /// [`FileGuards::for_call`]); `same_snapshot`: they come from `synced`,
    /// so their index is this table's.
    fn guards_of(
        &self,
        settings: &DependencySettings,
        same_snapshot: bool,
        host: &str,
        port: Option<u16>,
        default_port: Option<u16>,
    ) -> Option<Arc<Dependency<T>>> {
        if settings.index().is_none() && !settings.sets_guards() {
            return None;
        }
        match (settings.index(), settings.name()) {
            (Some(index), _) if same_snapshot => self.by_index.get(index).cloned().flatten(),
            (_, Some(name)) => self.named.get(name).map(|slot| slot.guards.get(name)),
            _ => self.defaults.as_ref().map(|slot| slot.guards.for_server(host, port, default_port)),
        }
    }
}

impl<T: Budget + 'static> Slot<T> {
    /// Fresh guards for `settings`: the keys it writes from the file, the
    /// rest from the builder's factories.
    fn new(settings: &Arc<DependencySettings>, code: &CodeFactories<T>) -> Self {
        let sets = settings.sets();
        let budget: Option<Factory<T>> = match (sets.budget, settings.budget()) {
            (false, _) => code.budget.clone(),
            (true, None) => None,
            (true, Some(b)) => {
                let wrap = code.wrap;
                // Checked when the file loaded: it cannot fail here.
                Some(Arc::new(move || wrap(b.build().unwrap_or_else(|_| RetryBudget::default()))))
            }
        };
        let breaker: Option<Factory<CircuitBreaker>> = match (sets.breaker, settings.breaker()) {
            (false, _) => code.breaker.clone(),
            (true, None) => None,
            (true, Some(b)) => {
                Some(Arc::new(move || b.build().unwrap_or_else(|_| CircuitBreaker::default())))
            }
        };
        let pacer: Option<Factory<Pacer>> = match (sets.pacer, settings.pacer()) {
            (false, _) => code.pacer.clone(),
            (true, None) => None,
            (true, Some(p)) => Some(Arc::new(move || p.build())),
        };
        // The file's in-flight budget goes beside the guards code gives (the
        // file cannot see inside those to replace one).
        let guard = match settings.in_flight_budget() {
            Some(in_flight) => Some(and_guard(code.guard.clone(), move || {
                // Checked when the file loaded: it cannot fail here.
                in_flight.build().unwrap_or_else(|_| InFlightBudget::envoy())
            })),
            None => code.guard.clone(),
        };
        let guards = CodeFactories { budget, breaker, pacer, guard, ..code.clone() }.registry().build();
        Self { settings: Arc::clone(settings), guards }
    }
}

impl<T> fmt::Debug for FileGuards<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("FileGuards")
            .field("dependencies", &state.named.len())
            .field("defaults", &state.defaults.is_some())
            .finish()
    }
}
