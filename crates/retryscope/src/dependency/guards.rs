//! The guards of one dependency, and how every integration puts them on a
//! call: [`Guards::guard`], for a retry and a hedge alike.

use crate::breaker::CircuitBreaker;
use crate::budget::Budget;
use crate::guard::Guard;
use crate::hedge::{Hedge, HedgePolicy};
use crate::overload::ConcurrencyLimiter;
use crate::pace::Pacer;
use crate::retry::Retry;
use crate::shared::Shared;
use std::fmt;
use std::sync::Arc;

/// The guards of one dependency: a retry budget (any [`Budget`]), a circuit
/// breaker, a [`Pacer`] and a hedging policy, each optional. The hedging
/// policy is the dependency's own ([`HedgePolicy::fresh`] of the client's), so
/// that a percentile delay learns from this dependency's latencies alone.
pub struct Guards<T> {
    pub(crate) dependency: Arc<str>,
    pub(crate) budget: Option<T>,
    pub(crate) breaker: Option<CircuitBreaker>,
    pub(crate) pacer: Option<Pacer>,
    pub(crate) concurrency_limit: Option<ConcurrencyLimiter>,
    pub(crate) guard: Option<Arc<dyn Guard>>,
    pub(crate) hedge: Option<HedgePolicy>,
}

impl<T> Guards<T> {
    /// The dependency's bounded name: the label to report it under.
    pub fn dependency(&self) -> &str {
        &self.dependency
    }

    /// [`dependency`](Self::dependency), shared: what a telemetry crate
    /// labels the guards' gauges with.
    pub fn label(&self) -> &Arc<str> {
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

    /// The dependency's adaptive concurrency limit, if it has one.
    pub fn concurrency_limit(&self) -> Option<&ConcurrencyLimiter> {
        self.concurrency_limit.as_ref()
    }

    /// The dependency's [`Guard`]s, composed into one, if the client gives
    /// it any (the registry's `guard`).
    pub fn guards(&self) -> Option<&dyn Guard> {
        self.guard.as_deref()
    }

    /// The dependency's hedging policy, if the client hedges: clone it into
    /// each hedged call (`op.hedge(policy.clone())`).
    pub fn hedge(&self) -> Option<&HedgePolicy> {
        self.hedge.as_ref()
    }
}

impl<T: Budget> Guards<T> {
    /// Puts this dependency on `call`, a [`Retry`] or a [`Hedge`]: its name,
    /// budget, breaker and pacer, borrowed from these guards, and the
    /// caller's `operation` if it names one. What every integration does to
    /// each call, written once for both: a hedge's copies are admitted as a
    /// retry's attempts are (the engine charges every copy beyond the first
    /// to the budget and asks the pacer before each).
    pub fn guard<'a, G: Guardable<'a>>(
        &'a self,
        call: G,
        operation: Option<impl Into<Shared<'a, str>>>,
    ) -> G {
        // The interned name: an `Arc`, found without copying it.
        let call = call.dependency(self.dependency());
        let call = match (self.budget(), self.breaker(), self.pacer()) {
            // The default guards, in one chain: each step of the conditional
            // chain below moves the whole builder once more.
            (Some(budget), Some(breaker), Some(pacer)) => call.budget(budget).breaker(breaker).pacer(pacer),
            (budget, breaker, pacer) => {
                let call = match budget {
                    Some(budget) => call.budget(budget),
                    None => call,
                };
                let call = match breaker {
                    Some(breaker) => call.breaker(breaker),
                    None => call,
                };
                match pacer {
                    Some(pacer) => call.pacer(pacer),
                    None => call,
                }
            }
        };
        // Opt-in, so off the default chain above.
        let call = match self.concurrency_limit() {
            Some(limiter) => call.concurrency_limit(limiter),
            None => call,
        };
        let call = match self.guards() {
            Some(guard) => call.guard(guard),
            None => call,
        };
        match operation {
            Some(operation) => call.operation(operation.into()),
            None => call,
        }
    }
}

/// A call the guards of a dependency can be put on ([`Guards::guard`]): a
/// [`Retry`] or a [`Hedge`], whose builders take the same guards under the
/// same names. Sealed: nothing else is one.
pub trait Guardable<'a>: sealed::Sealed + Sized {
    /// Names the dependency called.
    fn dependency(self, dependency: &'a str) -> Self;
    /// Names the logical operation.
    fn operation(self, operation: Shared<'a, str>) -> Self;
    /// Charges the call to `budget`.
    fn budget<T: Budget>(self, budget: &'a T) -> Self;
    /// Asks `breaker` before every attempt.
    fn breaker(self, breaker: &'a CircuitBreaker) -> Self;
    /// Asks `pacer` before every attempt.
    fn pacer(self, pacer: &'a Pacer) -> Self;
    /// Takes a slot of `limiter` for every attempt.
    fn concurrency_limit(self, limiter: &'a ConcurrencyLimiter) -> Self;
    /// Puts `guard` on the call: every guard written as a
    /// [`Guard`] comes through here, so none needs a method of its own.
    fn guard(self, guard: &'a dyn Guard) -> Self;
}

mod sealed {
    pub trait Sealed {}
    impl<Op, C, O, N> Sealed for crate::Retry<'_, Op, C, O, N> {}
    impl<Op, C, O> Sealed for crate::hedge::Hedge<'_, Op, C, O> {}
}

/// Forwards each [`Guardable`] method to the builder's method of that name.
macro_rules! guardable {
    ($($call:ty => [$($param:ident),*]);* $(;)?) => {$(
        impl<'a, $($param),*> Guardable<'a> for $call {
            fn dependency(self, dependency: &'a str) -> Self {
                <$call>::dependency(self, dependency)
            }
            fn operation(self, operation: Shared<'a, str>) -> Self {
                <$call>::operation(self, operation)
            }
            fn budget<T: Budget>(self, budget: &'a T) -> Self {
                <$call>::budget(self, budget)
            }
            fn breaker(self, breaker: &'a CircuitBreaker) -> Self {
                <$call>::breaker(self, breaker)
            }
            fn pacer(self, pacer: &'a Pacer) -> Self {
                <$call>::pacer(self, pacer)
            }
            fn concurrency_limit(self, limiter: &'a ConcurrencyLimiter) -> Self {
                <$call>::concurrency_limit(self, limiter)
            }
            fn guard(self, guard: &'a dyn Guard) -> Self {
                <$call>::guard(self, guard)
            }
        }
    )*};
}

guardable! {
    Retry<'a, Op, C, O, N> => [Op, C, O, N];
    Hedge<'a, Op, C, O> => [Op, C, O];
}

impl<T> fmt::Debug for Guards<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guards")
            .field("dependency", &self.dependency)
            .field("budget", &self.budget.is_some())
            .field("breaker", &self.breaker.is_some())
            .field("pacer", &self.pacer.is_some())
            .field("concurrency_limit", &self.concurrency_limit.is_some())
            .field("guard", &self.guard.is_some())
            .field("hedge", &self.hedge.is_some())
            .finish()
    }
}
