//! Configuring a [`Dependencies`]: which guards each dependency gets.

use super::overflow::OverflowGuards;
use super::registry::{Dependencies, Factory, Registry, and_guard};
use super::value::Dependency;
use crate::CircuitBreaker;
use crate::budget::Budget;
use crate::budget::BudgetShare;
use crate::guard::{Guard, SharedGuard};
use crate::hedge::HedgePolicy;
use crate::overload::ConcurrencyLimiter;
use crate::pace::{PaceShare, Pacer};
use crate::shared::Shared;
use std::fmt;
use std::sync::{Arc, RwLock};

/// Configures a [`Dependencies`]: which guards each dependency gets, and
/// where their gauges go.
#[must_use = "a builder does nothing until `build` is called"]
pub struct DependenciesBuilder {
    pub(super) budget: Option<Factory<Box<dyn Budget>>>,
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

impl fmt::Debug for DependenciesBuilder {
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

impl Clone for DependenciesBuilder {
    /// The same factories, shared: a client keeps its builder as the
    /// template of every registry it makes (its own, and one per dependency
    /// a configuration file names).
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
            overflow_capacity: self.overflow_capacity,
            labels: self.labels,
        }
    }
}

impl DependenciesBuilder {
    /// Gives each dependency a budget made by `make` (in place of any
    /// given before): a [`RetryBudget`](crate::RetryBudget), a
    /// [`TokenBucket`](crate::TokenBucket), any [`Budget`].
    pub fn budget<B: Budget + 'static>(mut self, make: impl Fn() -> B + Send + Sync + 'static) -> Self {
        self.budget = Some(Arc::new(move || Box::new(make())));
        self
    }

    /// Gives each dependency no budget, and divides no floor
    /// ([`budget_share`](Self::budget_share) is dropped with the budget).
    pub fn no_budget(mut self) -> Self {
        (self.budget, self.budget_share) = (None, None);
        self
    }

    /// Whether each dependency gets a budget: a fleet's share of the budget
    /// floor needs one.
    pub fn has_budget(&self) -> bool {
        self.budget.is_some()
    }

    /// Gives each dependency a breaker made by `make`.
    pub fn breaker(mut self, make: impl Fn() -> CircuitBreaker + Send + Sync + 'static) -> Self {
        self.breaker = Some(Arc::new(make));
        self
    }

    /// Gives each dependency no breaker.
    pub fn no_breaker(mut self) -> Self {
        self.breaker = None;
        self
    }

    /// Gives each dependency a pacer made by `make`.
    pub fn pacer(mut self, make: impl Fn() -> Pacer + Send + Sync + 'static) -> Self {
        self.pacer = Some(Arc::new(make));
        self
    }

    /// Gives each dependency no pacer.
    pub fn no_pacer(mut self) -> Self {
        self.pacer = None;
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

    /// Gives each dependency no concurrency limit.
    pub fn no_concurrency_limit(mut self) -> Self {
        self.concurrency_limit = None;
        self
    }

    /// Gives each dependency a [`Guard`] made by `make` (an
    /// [`InFlightBudget`](crate::budget::InFlightBudget), say), put on
    /// each of its calls and its gauges ([`Guard::gauges`]) published with
    /// the others. Called again, the guards compose: each dependency gets
    /// both, asked in the order given.
    ///
    /// `make` is called once per dependency when its guards are made, and
    /// once more by [`build`](Self::build), as every factory is, to learn
    /// which gauges the guards publish: a factory with side effects sees that
    /// one extra call.
    pub fn guard<G: Guard<Permit = ()> + 'static>(
        mut self,
        make: impl Fn() -> G + Send + Sync + 'static,
    ) -> Self {
        self.guard = Some(and_guard(self.guard.take(), make));
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

    /// The registry. Each factory is called once here, to learn which
    /// gauges its guards publish ([`Dependencies::guard_gauges`]).
    pub fn build(self) -> Dependencies {
        // The gauges its guards publish: the same from every set the
        // factories make, so one made here (shared with no fleet, labelled
        // nothing) says which.
        let guard_gauges = self.unshared("").published();
        let inner = Arc::new(Registry {
            guards: RwLock::default(),
            overflow: OverflowGuards::new(self.overflow_capacity),
            servers: RwLock::default(),
            template: self,
            guard_gauges,
        });
        Dependencies { inner }
    }

    /// A fresh guard set labelled `dependency`; its pacer joins the fleet's
    /// share only if `pace_fleet` (a named dependency's: see
    /// [`Dependencies`] for why an overflow set's does not).
    pub(super) fn make(&self, dependency: &'static str, pace_fleet: bool) -> Dependency {
        let made = self.unshared(dependency);
        // A factory that hands one pacer or budget to several dependencies
        // shares it under the first name only.
        if let (Some(pacer), Some(share)) = (&made.pacer, self.pace_share.as_ref().filter(|_| pace_fleet)) {
            pacer.share_with(Arc::clone(share), dependency);
        }
        if let (Some(budget), Some(share)) = (&made.budget, &self.budget_share) {
            budget.share_floor(Arc::clone(share), dependency);
        }
        made
    }

    /// A fresh guard set labelled `dependency`, shared with no fleet: what
    /// [`make`](Self::make) starts from, and the sample
    /// [`build`](Self::build) learns the gauges from.
    fn unshared(&self, dependency: &'static str) -> Dependency {
        Dependency {
            dependency: Shared::Borrowed(dependency),
            budget: self.budget.as_ref().map(|make| make()),
            breaker: self.breaker.as_ref().map(|make| make()),
            pacer: self.pacer.as_ref().map(|make| make()),
            concurrency_limit: self.concurrency_limit.as_ref().map(|make| make()),
            guard: self.guard.as_ref().map(|make| make()),
            hedge: self.hedge.as_ref().map(HedgePolicy::fresh),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RetryBudget, TokenBucket};

    fn template() -> DependenciesBuilder {
        Dependencies::builder()
            .budget(RetryBudget::default)
            .breaker(CircuitBreaker::default)
            .pacer(Pacer::new)
    }

    #[test]
    fn a_copy_of_a_template_changes_alone() {
        let template = template();
        // A file writes `enabled = false` for one dependency's breaker and budget.
        let file = template.clone().no_breaker().no_budget().build().get("written");
        let code = template.build().get("left-to-code");
        assert!(file.breaker().is_none() && file.budget().is_none() && file.pacer().is_some());
        assert!(code.breaker().is_some() && code.budget().is_some() && code.pacer().is_some());
    }

    #[test]
    fn no_budget_leaves_no_floor_to_share() {
        let without = template().no_budget();
        assert!(!without.has_budget());
        assert!(format!("{without:?}").contains("budget_share: None"));
        assert!(template().has_budget());
    }

    #[test]
    fn a_template_given_another_budget_keeps_its_other_guards() {
        // gRPC's retry throttling in place of the template's ratio budget.
        let grpc = template().budget(TokenBucket::default).no_pacer().build().get("grpc");
        let available = grpc.budget().map(|budget| budget.available());
        assert_eq!(available, Some(TokenBucket::default().available()));
        assert_ne!(available, Some(RetryBudget::default().available()), "the two tell apart");
        assert!(grpc.breaker().is_some() && grpc.pacer().is_none());
    }
}
