//! One dependency's effective settings: the file's values over `defaults`
//! over the engine's, mapped onto the engine's own types ([`Policy`],
//! [`HttpClassifier`], [`HedgePolicy`], the budget's and breaker's builders),
//! each checked by that type's builder so the file accepts exactly what code
//! accepts.

use crate::duration::show;
use crate::error::{ConfigError, ConfigErrorKind};
use crate::in_flight::InFlightSettings;
use crate::names::KnownNames;
use crate::schema::{Block, JitterName, PriorityName};
use retryscope::classify::HttpClassifier;
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope::overload::Priority;
use retryscope::{CircuitBreaker, Jitter, Pacer, Policy, PolicyError, RetryBudget, SettingError};
use std::sync::Arc;
use std::time::Duration;

/// The most attempts (the first counted) a file may ask for.
pub const MAX_ATTEMPTS: u32 = 100;

/// A retry budget's settings; `None` keeps the engine's default.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BudgetSettings {
    /// Retries per request allowed (0..=1).
    pub ratio: Option<f64>,
    /// Retries per second always allowed.
    pub min_per_second: Option<u32>,
    /// The window the ratio is kept over.
    pub window: Option<Duration>,
}

impl BudgetSettings {
    /// A fresh budget with these settings (checked when the file loaded).
    pub fn build(&self) -> Result<RetryBudget, SettingError> {
        self.builder().build()
    }

    /// A budget builder with these settings, for what else the caller sets
    /// (a clock: `retryscope advise` replays a budget in virtual time).
    pub fn builder(&self) -> retryscope::budget::RetryBudgetBuilder {
        let mut b = RetryBudget::builder();
        if let Some(r) = self.ratio {
            b = b.ratio(r);
        }
        if let Some(m) = self.min_per_second {
            b = b.min_per_second(m);
        }
        if let Some(w) = self.window {
            b = b.window(w);
        }
        b
    }
}

/// A circuit breaker's settings; `None` keeps the engine's default.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BreakerSettings {
    /// Failure ratio that opens it.
    pub failure_ratio: Option<f64>,
    /// Calls in the window before it may open.
    pub min_calls: Option<u32>,
    /// The window failures are counted over.
    pub window: Option<Duration>,
    /// How long it stays open.
    pub cool_down: Option<Duration>,
    /// Probes let through half-open.
    pub half_open_probes: Option<u32>,
}

impl BreakerSettings {
    /// A fresh breaker with these settings (checked when the file loaded).
    pub fn build(&self) -> Result<CircuitBreaker, SettingError> {
        self.builder().build()
    }

    /// A breaker builder with these settings, for what else the caller sets
    /// (a clock: `retryscope advise` replays a breaker in virtual time).
    pub fn builder(&self) -> retryscope::breaker::CircuitBreakerBuilder {
        let mut b = CircuitBreaker::builder();
        if let Some(v) = self.failure_ratio {
            b = b.failure_ratio(v);
        }
        if let Some(v) = self.min_calls {
            b = b.min_calls(v);
        }
        if let Some(v) = self.window {
            b = b.window(v);
        }
        if let Some(v) = self.cool_down {
            b = b.cool_down(v);
        }
        if let Some(v) = self.half_open_probes {
            b = b.half_open_probes(v);
        }
        b
    }
}

/// A pacer's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacerSettings {
    /// [`Pacer::adaptive`] rather than [`Pacer::new`].
    pub adaptive: bool,
}

impl PacerSettings {
    /// A fresh pacer.
    pub fn build(&self) -> Pacer {
        if self.adaptive { Pacer::adaptive() } else { Pacer::new() }
    }
}

/// Hedging as the file sets it: copies and a fixed delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HedgeSettings {
    /// Copies at most, the first included.
    pub max_copies: u32,
    /// The delay before each copy after the first.
    pub delay: Duration,
}

/// One dependency's effective settings (or the defaults', for calls no
/// dependency matches).
#[derive(Debug, Clone)]
pub struct DependencySettings {
    pub(crate) name: Option<Arc<str>>,
    pub(crate) matcher: String,
    pub(crate) enabled: bool,
    pub(crate) configured: Policy,
    pub(crate) policy: Policy,
    pub(crate) classifier: HttpClassifier,
    pub(crate) retry_statuses: Vec<u16>,
    pub(crate) body_rule: Option<Arc<str>>,
    pub(crate) hedge: Option<(HedgeSettings, HedgePolicy)>,
    pub(crate) budget: Option<BudgetSettings>,
    pub(crate) breaker: Option<BreakerSettings>,
    pub(crate) pacer: Option<PacerSettings>,
    pub(crate) in_flight_budget: Option<InFlightSettings>,
    pub(crate) idempotency_keys: Option<bool>,
    pub(crate) priority: Priority,
    pub(crate) fallback: Option<Arc<str>>,
    pub(crate) sets: GuardKeys,
    /// The guard keys its own block writes, not the `defaults`'.
    pub(crate) own_sets: GuardKeys,
    /// Whether `attempt_timeout` is written (here or in `defaults`): a job
    /// worker keeps its builder's per-attempt timeout where it is not.
    pub(crate) attempt_timeout_set: bool,
    /// A `subject` rule: its settings serve a job worker's executions.
    pub(crate) job: bool,
    /// Its place in its file's match table; `None` for the defaults.
    pub(crate) index: Option<usize>,
}

/// Which guard keys the file writes for a dependency (in its own block or in
/// the `defaults` it inherits): a client takes those guards from the file
/// and the others from its builder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GuardKeys {
    /// `budget` is written.
    pub budget: bool,
    /// `breaker` is written.
    pub breaker: bool,
    /// `pacer` is written.
    pub pacer: bool,
    /// `in_flight_budget` is written.
    pub in_flight_budget: bool,
}

impl GuardKeys {
    /// Whether any of them is written.
    pub fn any(&self) -> bool {
        self.budget || self.breaker || self.pacer || self.in_flight_budget
    }
}

impl DependencySettings {
    /// The dependency's name in the file; `None` for the defaults.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    /// `false`: the kill switch is on — first attempts only, no retry, no hedge.
    pub fn enabled(&self) -> bool {
        self.enabled
    }
    /// The policy calls use: with the kill switch on, one attempt within the
    /// configured deadline and attempt timeout.
    pub fn policy(&self) -> Policy {
        self.policy
    }
    /// The policy of one call: `own` (a policy code gives that call) where
    /// given, else the file's ([`policy`](Self::policy)); one attempt under
    /// the kill switch, whatever `own` says — the operator's stop wins over
    /// code. Every integration's per-call precedence, in one place.
    pub fn call_policy(&self, own: Option<Policy>) -> Policy {
        match own {
            None => self.policy,
            Some(own) if self.enabled => own,
            // Cannot fail: a valid policy with one attempt is valid.
            Some(own) => own.to_builder().max_attempts(1).build().unwrap_or(self.policy),
        }
    }
    /// Whether these are a `subject` rule's settings, which serve a job
    /// worker's executions only (and leave out every key a worker does not
    /// apply).
    pub fn is_job(&self) -> bool {
        self.job
    }
    /// Its place among its file's dependencies, `0..count` (an order of its
    /// own, not the file's); `None` for the defaults. A client keeps what it
    /// holds per dependency of one snapshot in a table indexed by it, found
    /// without hashing the name on each call.
    pub fn index(&self) -> Option<usize> {
        self.index
    }
    /// The per-attempt timeout where the file writes `attempt_timeout` (in
    /// this dependency or the `defaults` it inherits); `None` where it does
    /// not, and the client keeps its own (a job worker: its builder's
    /// `attempt_timeout`). [`policy`](Self::policy) carries the engine's
    /// default there instead.
    pub fn written_attempt_timeout(&self) -> Option<Duration> {
        if self.attempt_timeout_set { self.configured.attempt_timeout() } else { None }
    }
    /// The policy as configured, whatever the kill switch says.
    pub fn configured_policy(&self) -> Policy {
        self.configured
    }
    /// Which statuses are retried.
    pub fn classifier(&self) -> HttpClassifier {
        self.classifier
    }
    /// The name of the body rule, registered in code, that reads responses.
    pub fn body_rule(&self) -> Option<&str> {
        self.body_rule.as_deref()
    }
    /// A fresh hedging policy for this dependency; `None` when not hedged or
    /// with the kill switch on.
    pub fn hedge_policy(&self) -> Option<HedgePolicy> {
        match (&self.hedge, self.enabled) {
            (Some((_, policy)), true) => Some(policy.fresh()),
            _ => None,
        }
    }
    /// Hedging as set; also while the kill switch holds it off.
    pub fn hedge(&self) -> Option<HedgeSettings> {
        self.hedge.as_ref().map(|(s, _)| *s)
    }
    /// The budget's settings; `None`: no budget. Applied by a client only
    /// where the file writes `budget` ([`sets`](Self::sets)).
    pub fn budget(&self) -> Option<BudgetSettings> {
        self.budget
    }
    /// The breaker's settings; `None`: no breaker. Applied by a client only
    /// where the file writes `breaker`.
    pub fn breaker(&self) -> Option<BreakerSettings> {
        self.breaker
    }
    /// The pacer's settings; `None`: no pacer. Applied by a client only
    /// where the file writes `pacer`.
    pub fn pacer(&self) -> Option<PacerSettings> {
        self.pacer
    }
    /// The in-flight budget's settings; `None`: none from the file (see
    /// [`InFlightSettings`] for how it meets a guard code gives).
    pub fn in_flight_budget(&self) -> Option<InFlightSettings> {
        self.in_flight_budget
    }
    /// Whether non-idempotent requests without a key get one: `Some` where
    /// the file writes `idempotency_keys`, `None` to leave it to the client's
    /// builder (`idempotency_keys()`).
    pub fn idempotency_keys(&self) -> Option<bool> {
        self.idempotency_keys
    }
    /// The priority calls of this dependency carry by default.
    pub fn priority(&self) -> Priority {
        self.priority
    }
    /// The name of the fallback, registered in code, run when a call gives up.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Whether the file writes `budget`, `breaker` or `pacer` for these
    /// settings (here or in the defaults they inherit).
    pub fn sets_guards(&self) -> bool {
        self.sets.any()
    }

    /// Which guard keys the file writes for these settings (here or in the
    /// defaults they inherit).
    pub fn sets(&self) -> GuardKeys {
        self.sets
    }

    /// Which guard keys the dependency's own block writes (none for the
    /// defaults): what a client that keeps its builder's guards (a
    /// database) reports it does not apply, leaving the defaults' to the
    /// clients that do.
    pub fn own_guard_keys(&self) -> GuardKeys {
        self.own_sets
    }

    /// Whether guards made from `self` and from `other` would differ: a
    /// reload keeps a dependency's budget, breaker and pacer (and their
    /// state: tokens, open or closed, learned gates) unless this is true.
    /// A key written with its default values differs from one not written:
    /// the client's builder makes the latter.
    pub fn guards_differ(&self, other: &DependencySettings) -> bool {
        self.sets != other.sets
            || self.budget != other.budget
            || self.breaker != other.breaker
            || self.pacer != other.pacer
            || self.in_flight_budget != other.in_flight_budget
    }
}

mod resolve;
mod row;
pub(crate) use resolve::{Refusal, resolve};
