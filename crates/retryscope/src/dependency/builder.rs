//! Configuring a [`Dependencies`]: which guards each dependency gets.

use super::overflow::OverflowGuards;
use super::registry::{Dependencies, Factory, Registry, and_guard};
use crate::CircuitBreaker;
use crate::budget::Budget;
use crate::budget::BudgetShare;
use crate::guard::{Gauge, Guard, SharedGuard};
use crate::hedge::HedgePolicy;
use crate::overload::ConcurrencyLimiter;
use crate::pace::{PaceShare, Pacer};
use std::fmt;
use std::sync::{Arc, RwLock};

/// Configures a [`Dependencies`]: which guards each dependency gets, and
/// where their gauges go.
#[must_use = "a builder does nothing until `build` is called"]
pub struct DependenciesBuilder<T> {
    pub(super) budget: Option<Factory<T>>,
    pub(super) breaker: Option<Factory<CircuitBreaker>>,
    pub(super) pacer: Option<Factory<Pacer>>,
    pub(super) pace_share: Option<Arc<dyn PaceShare>>,
    pub(super) budget_share: Option<Arc<dyn BudgetShare>>,
    pub(super) concurrency_limit: Option<Factory<ConcurrencyLimiter>>,
    pub(super) guard: Option<Factory<SharedGuard>>,
    pub(super) hedge: Option<HedgePolicy>,
    /// How many overflow guard sets the registry keeps, and the label
    /// table: settings for tests.
    pub(super) overflow_capacity: usize,
    pub(super) labels: fn(&str) -> &'static str,
}

impl<T> fmt::Debug for DependenciesBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DependenciesBuilder")
            .field("budget", &self.budget.is_some())
            .field("breaker", &self.breaker.is_some())
            .field("pacer", &self.pacer.is_some())
            .field("pace_share", &self.pace_share)
            .field("budget_share", &self.budget_share)
            .field("concurrency_limit", &self.concurrency_limit.is_some())
            .field("guard", &self.guard.is_some())
            .field("hedge", &self.hedge.is_some())
            .finish()
    }
}

impl<T: Budget + 'static> DependenciesBuilder<T> {
    /// Gives each dependency a budget made by `make`.
    pub fn budget(mut self, make: impl Fn() -> T + Send + Sync + 'static) -> Self {
        self.budget = Some(Arc::new(make));
        self
    }

    /// Gives each dependency a breaker made by `make`.
    pub fn breaker(mut self, make: impl Fn() -> CircuitBreaker + Send + Sync + 'static) -> Self {
        self.breaker = Some(Arc::new(make));
        self
    }

    /// Gives each dependency a pacer made by `make`.
    pub fn pacer(mut self, make: impl Fn() -> Pacer + Send + Sync + 'static) -> Self {
        self.pacer = Some(Arc::new(make));
        self
    }

    /// Shares each dependency's pacer with the other replicas of a fleet
    /// through `share` (or, with `None`, with none): see
    /// [`PaceShare`]. Without a pacer, nothing is shared.
    pub fn pace_share(mut self, share: Option<Arc<dyn PaceShare>>) -> Self {
        self.pace_share = share;
        self
    }

    /// Divides each dependency's budget floor among the replicas of a fleet
    /// through `share` (or, with `None`, keeps every floor whole): see
    /// [`BudgetShare`]. Without a budget, or with a
    /// throttle that has no floor ([`Budget::share_floor`]), nothing is
    /// shared.
    pub fn budget_share(mut self, share: Option<Arc<dyn BudgetShare>>) -> Self {
        self.budget_share = share;
        self
    }

    /// Gives each dependency an adaptive concurrency limit made by `make`.
    pub fn concurrency_limit(
        mut self,
        make: impl Fn() -> ConcurrencyLimiter + Send + Sync + 'static,
    ) -> Self {
        self.concurrency_limit = Some(Arc::new(make));
        self
    }

    /// Gives each dependency a [`Guard`] made by `make` (an
    /// [`InFlightBudget`](crate::budget::InFlightBudget), say), put on
    /// each of its calls and its gauges ([`Guard::gauges`]) published with
    /// the others. Called again, the guards compose: each dependency gets
    /// both, asked in the order given.
    ///
    /// `make` is called once per dependency when its guards are made, and
    /// once more by [`build`](Self::build), to learn which gauges the guards
    /// publish: a factory with side effects sees that one extra call.
    pub fn guard<G: Guard<Permit = ()> + 'static>(
        self,
        make: impl Fn() -> G + Send + Sync + 'static,
    ) -> Self {
        let combined = and_guard(self.guard.clone(), make);
        self.guard_factory(Some(combined))
    }

    /// Sets (or, with `None`, removes) the guard factory.
    pub fn guard_factory(mut self, make: Option<Factory<SharedGuard>>) -> Self {
        self.guard = make;
        self
    }

    /// Gives each dependency a hedging policy of its own made from
    /// `template` ([`HedgePolicy::fresh`]): the template's settings, a latency
    /// tracker per dependency, so that a percentile delay is learned per
    /// dependency rather than over every host a client calls.
    pub fn hedge(mut self, template: HedgePolicy) -> Self {
        self.hedge = Some(template);
        self
    }

    /// Keeps at most `capacity` guard sets of dependencies beyond the label
    /// bound, so that a test sees an eviction without a thousand hosts.
    #[cfg(test)]
    pub(crate) fn overflow_capacity(mut self, capacity: usize) -> Self {
        self.overflow_capacity = capacity;
        self
    }

    /// Labels dependencies with `labels` instead of [`bounded_dependency`].
    #[cfg(test)]
    pub(crate) fn labels(mut self, labels: fn(&str) -> &'static str) -> Self {
        self.labels = labels;
        self
    }

    /// The registry.
    pub fn build(self) -> Dependencies<T> {
        // The gauges its guards publish: the same from every guard a
        // factory makes, so one made here says which.
        let guard_gauges = self.guard.as_ref().map_or_else(Vec::new, |make| Gauge::of(&*make()));
        let inner = Arc::new(Registry {
            guards: RwLock::default(),
            overflow: OverflowGuards::new(self.overflow_capacity),
            labels: self.labels,
            servers: RwLock::default(),
            budget: self.budget,
            breaker: self.breaker,
            pacer: self.pacer,
            pace_share: self.pace_share,
            budget_share: self.budget_share,
            concurrency_limit: self.concurrency_limit,
            guard: self.guard,
            guard_gauges,
            hedge: self.hedge,
        });
        Dependencies { inner }
    }
}
