//! A fleet's budget floors, divided through the replicas' heartbeats.

use super::*;

impl BudgetShare for RedisPaceShare {
    /// Keeps `budget` (at most [`MAX_DEPENDENCIES`] dependencies, and as
    /// many budgets of one as pacers) and tells it at once which part of its
    /// floor it keeps, from what the last heartbeat read: no Redis
    /// operation.
    fn attach_budget(&self, dependency: &str, budget: SharedBudget) {
        let state = &self.state;
        let mut budgets = state.budgets();
        if !budgets.contains_key(dependency) && budgets.len() >= MAX_DEPENDENCIES {
            // Full: the dependencies whose budgets are all gone make room first.
            budgets.retain(|_, list| {
                list.retain(SharedBudget::is_alive);
                !list.is_empty()
            });
            if budgets.len() >= MAX_DEPENDENCIES {
                return;
            }
        }
        let list = budgets.entry(dependency.into()).or_default();
        list.retain(SharedBudget::is_alive);
        if list.len() >= MAX_PACERS_PER_DEPENDENCY {
            return;
        }
        // Under the lock the heartbeat tells budgets with: this budget is
        // told either here or by the next heartbeat, never skipped.
        state.tell(&budget);
        list.push(budget);
    }
}
