//! A dependency as a value: its name and its guards, built once, shared by
//! every call to it, and put on a call with one setter
//! ([`Retry::dependency`](crate::Retry::dependency), retried or hedged).

use crate::CircuitBreaker;
use crate::budget::Budget;
use crate::guard::{Chained, Guard, SharedGuard};
use crate::hedge::HedgePolicy;
use crate::overload::ConcurrencyLimiter;
use crate::pace::Pacer;
use crate::shared::Shared;
use std::fmt;
use std::sync::Arc;

/// One dependency: its name and its guards — a retry budget (any
/// [`Budget`]), a circuit breaker, a [`Pacer`], a concurrency limit, any
/// further [`Guard`]s — and, in a client's registry, its hedging policy, each
/// optional. Each is a [`Guard`], and a call asks them as one, in the order
/// [`guard`](crate::guard) gives. Built once and shared by every call to the
/// dependency (its guards are handles: a clone shares their state), and put
/// on a call whole:
///
/// ```
/// use retryscope::dependency::Dependency;
/// use retryscope::{CircuitBreaker, Policy, RetryBudget, Retryable};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let inventory = Dependency::new("inventory")
///     .with_budget(RetryBudget::default())
///     .with_breaker(CircuitBreaker::default());
/// let stock = (|| async { Ok::<_, std::io::Error>(7) })
///     .retry(Policy::interactive())
///     .dependency(&inventory)
///     .await;
/// assert_eq!(stock.unwrap(), 7);
/// # }
/// ```
///
/// A client keeps one per dependency it calls, made on first use, in a
/// [`Dependencies`](super::Dependencies) registry. The hedging policy there
/// is the dependency's own ([`HedgePolicy::fresh`] of the client's), so that
/// a percentile delay learns from this dependency's latencies alone.
pub struct Dependency {
    /// The name: a registry's is its label table's, which lives as long as
    /// the process (so the telemetry recognises it by address); a name
    /// given to [`new`](Dependency::new) is the caller's, unbounded, so it
    /// is a copy of its own, freed with the dependency.
    pub(crate) dependency: Shared<'static, str>,
    pub(crate) budget: Option<Box<dyn Budget>>,
    pub(crate) breaker: Option<CircuitBreaker>,
    pub(crate) pacer: Option<Pacer>,
    pub(crate) concurrency_limit: Option<ConcurrencyLimiter>,
    pub(crate) guard: Option<SharedGuard>,
    pub(crate) hedge: Option<HedgePolicy>,
}

impl Dependency {
    /// A dependency named `name` (`retryscope.dependency`), with no guards
    /// yet. Keep the name low-cardinality: a service or host name, never a
    /// URL.
    pub fn new(name: &str) -> Self {
        Self {
            dependency: Shared::Owned(Arc::from(name)),
            budget: None,
            breaker: None,
            pacer: None,
            concurrency_limit: None,
            guard: None,
            hedge: None,
        }
    }

    /// Charges its calls' retries (and hedges' further copies) to `budget`:
    /// a [`RetryBudget`](crate::RetryBudget), a [`TokenBucket`](crate::TokenBucket), a
    /// [`RetryQuota`](crate::budget::RetryQuota) or any [`Budget`] (one
    /// given before is replaced). Keep a clone (a budget is a handle) or an
    /// `Arc` to read its state.
    pub fn with_budget(mut self, budget: impl Budget + 'static) -> Self {
        self.budget = Some(Box::new(budget));
        self
    }

    /// Asks `breaker` before every attempt and tells it how each ended.
    pub fn with_breaker(mut self, breaker: CircuitBreaker) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// Sends the first attempt and every retry no sooner than `pacer`
    /// allows (see [`pace`](crate::pace)): a call whose next send would come
    /// after its deadline stops with
    /// [`StopReason::RateLimited`](crate::StopReason::RateLimited). The
    /// engine feeds the pacer what each answer says about pace, as the
    /// call's classifier reads it
    /// ([`Classify::pace`](crate::classify::Classify::pace)).
    pub fn with_pacer(mut self, pacer: Pacer) -> Self {
        self.pacer = Some(pacer);
        self
    }

    /// Takes a slot of `limiter`, the dependency's adaptive concurrency
    /// limit (see [`overload`](crate::overload)), for every attempt, and
    /// gives it back with how the attempt ended: one that finds the limit
    /// full waits up to the limiter's `max_wait` (never past the deadline)
    /// for a slot, then is not sent, and the call stops with
    /// [`StopReason::ConcurrencyLimited`](crate::StopReason::ConcurrencyLimited).
    pub fn with_concurrency_limit(mut self, limiter: ConcurrencyLimiter) -> Self {
        self.concurrency_limit = Some(limiter);
        self
    }

    /// Puts `guard` on every call (see [`guard`](crate::guard)): it hears
    /// each call start and end, admits each attempt (a retry at its plan,
    /// before its wait) and hears how each ended. Given twice, both guard
    /// the calls, the first asked first. Keep a handle (an `Arc`, which is a
    /// guard too) to read the guard's state.
    ///
    /// ```
    /// use retryscope::budget::InFlightBudget;
    /// use retryscope::dependency::Dependency;
    /// use retryscope::{Policy, Retryable};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// // Envoy's retry budget: retries in flight at most 20 % of the calls
    /// // in progress, at least 3. One per dependency, shared by its calls.
    /// let in_flight = InFlightBudget::envoy();
    /// let search = Dependency::new("search").with_guard(in_flight.clone());
    /// let answer = (|| async { Err::<(), _>("busy") })
    ///     .retry(Policy::interactive())
    ///     .when(|e: &&str| *e == "busy")
    ///     .dependency(&search)
    ///     .await;
    /// assert!(answer.is_err());
    /// // The call is over: its retries and itself are no longer counted.
    /// assert_eq!((in_flight.in_flight(), in_flight.calls()), (0, 0));
    /// # }
    /// ```
    pub fn with_guard(mut self, guard: impl Guard<Permit = ()> + 'static) -> Self {
        self.guard = Some(match self.guard.take() {
            None => Arc::new(guard),
            Some(first) => Arc::new(Chained(first, Arc::new(guard))),
        });
        self
    }

    /// The dependency's name (bounded, in a registry): the label to report
    /// it under.
    pub fn name(&self) -> &str {
        &self.dependency
    }

    /// The dependency's retry budget, if it has one.
    pub fn budget(&self) -> Option<&dyn Budget> {
        self.budget.as_deref()
    }

    /// The dependency's circuit breaker, if it has one.
    pub fn breaker(&self) -> Option<&CircuitBreaker> {
        self.breaker.as_ref()
    }

    /// The dependency's pacer, if it has one.
    pub fn pacer(&self) -> Option<&Pacer> {
        self.pacer.as_ref()
    }

    /// The dependency's hedging policy, if its client hedges: clone it into
    /// each hedged call (`op.hedge(policy.clone())`).
    pub fn hedge(&self) -> Option<&HedgePolicy> {
        self.hedge.as_ref()
    }
}

/// A dependency as one call refers to it: a name alone (`&str`, `String`,
/// `Arc<str>`), or a [`Dependency`]'s name and guards, borrowed. What
/// [`Retry::dependency`](crate::Retry::dependency) takes, retried or
/// hedged: the one setter that puts a dependency on a call, whatever it
/// guards it with.
#[derive(Clone)]
pub struct DependencyRef<'a> {
    pub(crate) name: Shared<'a, str>,
    pub(crate) budget: Option<&'a (dyn Budget + 'a)>,
    pub(crate) breaker: Option<&'a CircuitBreaker>,
    pub(crate) pacer: Option<&'a Pacer>,
    pub(crate) limiter: Option<&'a ConcurrencyLimiter>,
    pub(crate) guard: Option<&'a (dyn Guard<Permit = ()> + 'a)>,
}

impl<'a> DependencyRef<'a> {
    /// A name without guards.
    fn named(name: Shared<'a, str>) -> Self {
        Self { name, budget: None, breaker: None, pacer: None, limiter: None, guard: None }
    }
}

impl<'a> From<&'a str> for DependencyRef<'a> {
    fn from(name: &'a str) -> Self {
        Self::named(Shared::Borrowed(name))
    }
}

impl<'a> From<&'a String> for DependencyRef<'a> {
    fn from(name: &'a String) -> Self {
        Self::named(Shared::Borrowed(name))
    }
}

impl From<String> for DependencyRef<'_> {
    fn from(name: String) -> Self {
        Self::named(name.into())
    }
}

impl From<Arc<str>> for DependencyRef<'_> {
    fn from(name: Arc<str>) -> Self {
        Self::named(Shared::Owned(name))
    }
}

impl<'a> From<Shared<'a, str>> for DependencyRef<'a> {
    fn from(name: Shared<'a, str>) -> Self {
        Self::named(name)
    }
}

impl<'a> From<&'a Dependency> for DependencyRef<'a> {
    #[inline]
    fn from(dependency: &'a Dependency) -> Self {
        Self {
            // The interned name, borrowed: found without copying it.
            name: Shared::Borrowed(dependency.name()),
            budget: dependency.budget.as_deref(),
            breaker: dependency.breaker.as_ref(),
            pacer: dependency.pacer.as_ref(),
            limiter: dependency.concurrency_limit.as_ref(),
            guard: dependency.guard.as_deref(),
        }
    }
}

impl<'a> From<&'a Arc<Dependency>> for DependencyRef<'a> {
    #[inline]
    fn from(dependency: &'a Arc<Dependency>) -> Self {
        Self::from(&**dependency)
    }
}

impl fmt::Debug for DependencyRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DependencyRef")
            .field("name", &&*self.name)
            .field("budget", &self.budget.is_some())
            .field("breaker", &self.breaker.is_some())
            .field("pacer", &self.pacer.is_some())
            .field("concurrency_limit", &self.limiter.is_some())
            .field("guard", &self.guard.is_some())
            .finish()
    }
}

impl fmt::Debug for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dependency")
            .field("name", &self.dependency)
            .field("budget", &self.budget.is_some())
            .field("breaker", &self.breaker.is_some())
            .field("pacer", &self.pacer.is_some())
            .field("concurrency_limit", &self.concurrency_limit.is_some())
            .field("guard", &self.guard.is_some())
            .field("hedge", &self.hedge.is_some())
            .finish()
    }
}
