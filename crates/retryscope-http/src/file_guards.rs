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
use retryscope::budget::InFlightBudget;
use retryscope::dependency::{Dependencies, DependenciesBuilder, Dependency};
use retryscope::{CircuitBreaker, Pacer, RetryBudget};
use retryscope_config::{Config, ConfigHandle, DependencySettings, Target};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock, Weak};

/// The client's own registry, made from `template` (the builder's: what
/// the client makes per dependency), its gauges published on `meter` where
/// telemetry is on.
pub(crate) fn build_registry(
    template: &DependenciesBuilder,
    meter: Option<&opentelemetry::metrics::Meter>,
) -> Dependencies {
    let registry = template.clone().build();
    if let Some(meter) = meter {
        retryscope_otel::publish_dependency_gauges(meter, &registry);
    }
    registry
}

/// The guards a configured client takes from its file (see the module's
/// documentation). Cloning shares them.
pub struct FileGuards {
    inner: Arc<Inner>,
}

impl Clone for FileGuards {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

struct Inner {
    handle: ConfigHandle,
    /// What the client's builder makes per dependency: the template of
    /// each file dependency's registry, for the keys the file does not write.
    code: DependenciesBuilder,
    state: RwLock<State>,
}

struct State {
    /// The snapshot the sets below were made for.
    synced: Option<Arc<Config>>,
    /// The handle's generation read before `synced` was loaded: while the
    /// handle's stays the same, `synced` is the configuration in force.
    generation: u64,
    /// Each named dependency's guards (calls', not jobs'), by name: what a
    /// reload keeps, and how a call of an older snapshot finds its own.
    named: HashMap<Arc<str>, Slot>,
    /// The same sets by [`DependencySettings::index`] in `synced`: a call
    /// of that snapshot finds its own there.
    by_index: Vec<Option<Arc<Dependency>>>,
    /// The defaults' guards, per server, if the defaults write a guard key.
    defaults: Option<Slot>,
}

/// One dependency's guards and the settings they were made from.
struct Slot {
    settings: Arc<DependencySettings>,
    /// A named dependency's holds its one set (under its name); the
    /// defaults' one per server.
    guards: Dependencies,
}

impl FileGuards {
    /// The guards of `handle`'s file, made with `code` for what it does not
    /// write; with a `meter`, the gauges of every guard a file's sets may
    /// have are registered once, holding the guards weakly.
    pub fn new(
        handle: ConfigHandle,
        code: DependenciesBuilder,
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
            let sample = (inner.code.clone())
                .budget(RetryBudget::default)
                .breaker(CircuitBreaker::default)
                .pacer(Pacer::new)
                .guard(InFlightBudget::envoy)
                .build();
            let weak: Weak<Inner> = Arc::downgrade(&inner);
            let live = move || weak.upgrade().map(|inner| inner.all()).unwrap_or_default();
            retryscope_otel::register_guard_gauges(meter, live, sample.guard_gauges());
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
    ) -> (CallConfig, Option<Arc<Dependency>>) {
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
    ) -> Option<Arc<Dependency>> {
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

impl Inner {
    /// Every guard set alive, for the gauges.
    fn all(&self) -> Vec<Arc<Dependency>> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state.named.values().chain(state.defaults.as_ref()).flat_map(|slot| slot.guards.all()).collect()
    }
}

impl State {
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
    ) -> Option<Arc<Dependency>> {
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

impl Slot {
    /// Fresh guards for `settings`: the keys it writes from the file, the
    /// rest from the builder's factories.
    fn new(settings: &Arc<DependencySettings>, code: &DependenciesBuilder) -> Self {
        let sets = settings.sets();
        let mut guards = code.clone();
        if sets.budget {
            guards = match settings.budget() {
                None => guards.no_budget(),
                // Checked when the file loaded: it cannot fail here.
                Some(b) => guards.budget(move || b.build().unwrap_or_else(|_| RetryBudget::default())),
            };
        }
        if sets.breaker {
            guards = match settings.breaker() {
                None => guards.no_breaker(),
                Some(b) => guards.breaker(move || b.build().unwrap_or_else(|_| CircuitBreaker::default())),
            };
        }
        if sets.pacer {
            guards = match settings.pacer() {
                None => guards.no_pacer(),
                Some(p) => guards.pacer(move || p.build()),
            };
        }
        // The file's in-flight budget goes beside the guards code gives (the
        // file cannot see inside those to replace one).
        if let Some(in_flight) = settings.in_flight_budget() {
            // Checked when the file loaded: it cannot fail here.
            guards = guards.guard(move || in_flight.build().unwrap_or_else(|_| InFlightBudget::envoy()));
        }
        let guards = guards.build();
        Self { settings: Arc::clone(settings), guards }
    }
}

impl fmt::Debug for FileGuards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.state.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("FileGuards")
            .field("dependencies", &state.named.len())
            .field("defaults", &state.defaults.is_some())
            .finish()
    }
}
