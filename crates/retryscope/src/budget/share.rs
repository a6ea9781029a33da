//! A retry budget's floor shared by a fleet: see [`BudgetShare`].

use super::retry_budget::BudgetInner;
use std::fmt;
use std::sync::Weak;

/// A retry budget's floor divided among the replicas of a fleet, by whatever
/// store the fleet shares (Redis in `retryscope-redis`; the engine knows only
/// this trait).
///
/// A [`RetryBudget`](crate::RetryBudget) bounds one replica's retries to
/// `ratio × its requests + min_per_second` per second. Summed over a fleet of
/// N replicas, the ratio part is already the fleet's (`ratio × the fleet's
/// requests`), but the floor is multiplied: 20 replicas each allowed 10
/// retries a second make 200 a second against a dependency that is down and
/// gets no successful request. A budget given a share
/// ([`RetryBudget::share_with`](crate::RetryBudget::share_with)) keeps
/// `1/N` of its floor while the share says N replicas spend it, so that the
/// fleet's retries stay within `ratio × its requests + min_per_second`.
///
/// The share *pushes* the count to the budget, from its own background work,
/// through [`SharedBudget::divide_floor`] (and
/// [`SharedBudget::keep_whole_floor`] when it cannot tell at all; a share
/// whose store became unreachable may keep dividing by the count it last
/// read, as `retryscope-redis` does, since the replicas outlive an outage of
/// their store — with the whole floor each, the fleet's floor would be N
/// times the floor again). A retry
/// check reads the floor it holds with one atomic load: no call into the share
/// is ever on a call's path.
pub trait BudgetShare: Send + Sync + fmt::Debug {
    /// A budget for `dependency` joins: the share keeps `budget` (weakly: it
    /// must not keep a budget alive), tells it at once among how many replicas
    /// its floor is divided, and again whenever that changes. Must return at
    /// once, doing any I/O in the background.
    fn attach_budget(&self, dependency: &str, budget: SharedBudget);
}

/// A budget as a [`BudgetShare`] holds it: weakly, so that the share never
/// keeps a dependency's budget alive, and only able to set how its floor is
/// divided.
#[derive(Clone)]
pub struct SharedBudget {
    pub(super) inner: Weak<BudgetInner>,
}

impl SharedBudget {
    /// `replicas` spend the budget's dependency now: the budget keeps
    /// `1/replicas` of its floor (rounded down to a thousandth of a retry,
    /// so that the replicas' parts never add up to more than the floor).
    /// `0` counts as 1. Returns `false` when the budget is gone (the share may
    /// forget it).
    pub fn divide_floor(&self, replicas: u32) -> bool {
        let Some(inner) = self.inner.upgrade() else { return false };
        inner.divide_floor(Some(replicas.max(1)));
        true
    }

    /// The share cannot tell how many replicas there are (its store does not
    /// answer): the budget keeps its whole floor, as without a share. Returns
    /// `false` when the budget is gone.
    pub fn keep_whole_floor(&self) -> bool {
        let Some(inner) = self.inner.upgrade() else { return false };
        inner.divide_floor(None);
        true
    }

    /// Whether the budget is still in use.
    pub fn is_alive(&self) -> bool {
        self.inner.strong_count() > 0
    }
}

impl fmt::Debug for SharedBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBudget").field("alive", &self.is_alive()).finish()
    }
}
