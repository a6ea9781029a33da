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
use retryscope::breaker::BreakerError;
use retryscope::budget::BudgetError;
use retryscope::classify::HttpClassifier;
use retryscope::hedge::{HedgeDelay, HedgePolicy, HedgePolicyError};
use retryscope::overload::Priority;
use retryscope::{CircuitBreaker, Jitter, Pacer, Policy, PolicyError, RetryBudget};
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
    pub fn build(&self) -> Result<RetryBudget, BudgetError> {
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
    pub fn build(&self) -> Result<CircuitBreaker, BreakerError> {
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

    /// Which of `budget`, `breaker` and `pacer` the file writes for these
    /// settings (here or in the defaults they inherit).
    pub fn sets(&self) -> GuardKeys {
        self.sets
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

    /// One row of the effective table.
    pub(crate) fn row(&self) -> Vec<String> {
        let p = &self.configured;
        let opt = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), show);
        if self.job {
            return self.job_row();
        }
        vec![
            self.name.as_deref().unwrap_or("(defaults)").to_owned(),
            if self.matcher.is_empty() { "*".to_owned() } else { self.matcher.clone() },
            if self.enabled { "on".to_owned() } else { "OFF".to_owned() },
            p.max_attempts().to_string(),
            backoff_cell(p),
            jitter_name(p.jitter()).to_owned(),
            opt(p.attempt_timeout()),
            opt(p.deadline()),
            self.retry_statuses.iter().map(u16::to_string).collect::<Vec<_>>().join(","),
            self.hedge().map_or_else(|| "-".to_owned(), |h| format!("{}@{}", h.max_copies, show(h.delay))),
            self.priority.as_str().to_owned(),
            self.fallback.as_deref().unwrap_or("-").to_owned(),
            // `code`: not written, the client's builder decides.
            {
                let budget = match (self.sets.budget, self.budget) {
                    (false, _) => "code".to_owned(),
                    (true, None) => "off".to_owned(),
                    (true, Some(b)) => fields(&[
                        ("ratio", b.ratio.map(|v| v.to_string())),
                        ("min", b.min_per_second.map(|v| format!("{v}/s"))),
                        ("window", b.window.map(show)),
                    ]),
                };
                // The in-flight budget, where the file gives one, in the same cell.
                match self.in_flight_budget {
                    Some(in_flight) => format!("{budget}+{}", in_flight.cell()),
                    None => budget,
                }
            },
            match (self.sets.breaker, self.breaker) {
                (false, _) => "code".to_owned(),
                (true, None) => "off".to_owned(),
                (true, Some(b)) => fields(&[
                    ("ratio", b.failure_ratio.map(|v| v.to_string())),
                    ("min_calls", b.min_calls.map(|v| v.to_string())),
                    ("window", b.window.map(show)),
                    ("cool_down", b.cool_down.map(show)),
                    ("probes", b.half_open_probes.map(|v| v.to_string())),
                ]),
            },
            match (self.sets.pacer, self.pacer) {
                (false, _) => "code".to_owned(),
                (true, None) => "off".to_owned(),
                (true, Some(p)) => (if p.adaptive { "adaptive" } else { "on" }).to_owned(),
            },
            self.body_rule.as_deref().unwrap_or("code").to_owned(),
            match self.idempotency_keys {
                None => "code".to_owned(),
                Some(true) => "on".to_owned(),
                Some(false) => "off".to_owned(),
            },
        ]
    }
}

impl DependencySettings {
    /// A `subject` rule's row: `-` in every column a job worker does not
    /// apply, `code` where the worker's builder decides (the guards; the
    /// attempt timeout where the file does not write one).
    fn job_row(&self) -> Vec<String> {
        let p = &self.configured;
        let dash = || "-".to_owned();
        vec![
            self.name.as_deref().unwrap_or("(defaults)").to_owned(),
            self.matcher.clone(),
            if self.enabled { "on".to_owned() } else { "OFF".to_owned() },
            p.max_attempts().to_string(),
            backoff_cell(p),
            jitter_name(p.jitter()).to_owned(),
            self.written_attempt_timeout().map_or_else(|| "code".to_owned(), show),
            p.deadline().map_or_else(dash, show),
            dash(),
            dash(),
            dash(),
            dash(),
            "code".to_owned(),
            "code".to_owned(),
            dash(),
            dash(),
            dash(),
        ]
    }
}

/// `key=value` for each value written, `,`-separated (short names: `min` is
/// `min_per_second`, a breaker's `ratio` its `failure_ratio`, `probes` its
/// `half_open_probes`); `default` for none.
fn fields(all: &[(&str, Option<String>)]) -> String {
    let set: Vec<String> = all.iter().filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}"))).collect();
    if set.is_empty() { "default".to_owned() } else { set.join(",") }
}

fn jitter_name(j: Jitter) -> &'static str {
    match j {
        Jitter::None => "none",
        Jitter::Full => "full",
        Jitter::Equal => "equal",
        Jitter::Decorrelated => "decorrelated",
        _ => "other",
    }
}

/// The effective table's backoff: base..cap and multiplier, and the
/// throttled curve when the file sets it apart.
fn backoff_cell(p: &Policy) -> String {
    let cell = format!("{}..{} x{}", show(p.base_delay()), show(p.max_delay()), p.multiplier());
    if (p.throttled_base_delay(), p.throttled_max_delay()) == (p.base_delay(), p.max_delay()) {
        return cell;
    }
    format!("{cell} throttled {}..{}", show(p.throttled_base_delay()), show(p.throttled_max_delay()))
}

/// A refusal and the keys (relative to a block) it is about: the loader
/// names the first that the file sets, in the dependency, else in defaults.
pub(crate) struct Refusal {
    pub(crate) key: &'static str,
    pub(crate) error: Box<ConfigError>,
}

fn refuse(kind: ConfigErrorKind, key: &'static str, message: impl Into<String>) -> Refusal {
    Refusal { key, error: Box::new(ConfigError::new(kind, "", message)) }
}

/// The effective settings of a block already merged over `defaults`.
pub(crate) fn resolve(
    b: &Block,
    name: Option<Arc<str>>,
    matcher: String,
    known: &KnownNames,
) -> Result<DependencySettings, Refusal> {
    let range = ConfigErrorKind::OutOfRange;
    let base = Policy::interactive();
    let mut pb = base.to_builder();
    if let Some(a) = b.attempts {
        if !(1..=MAX_ATTEMPTS).contains(&a) {
            return Err(refuse(range, "attempts", format!("must be 1..={MAX_ATTEMPTS}, got {a}")));
        }
        pb = pb.max_attempts(a);
    }
    let backoff = b.backoff.unwrap_or_default();
    if let Some(d) = backoff.initial {
        pb = pb.base_delay(d.0);
    }
    if let Some(d) = backoff.max {
        pb = pb.max_delay(d.0);
    }
    if let Some(m) = backoff.multiplier {
        pb = pb.multiplier(m);
    }
    if let Some(d) = backoff.throttled_initial {
        pb = pb.throttled_base_delay(d.0);
    }
    if let Some(d) = backoff.throttled_max {
        pb = pb.throttled_max_delay(d.0);
    }
    if let Some(j) = b.jitter {
        pb = pb.jitter(match j {
            JitterName::None => Jitter::None,
            JitterName::Full => Jitter::Full,
            JitterName::Equal => Jitter::Equal,
            JitterName::Decorrelated => Jitter::Decorrelated,
        });
    }
    if let Some(d) = b.attempt_timeout {
        pb = pb.attempt_timeout(d.0);
    }
    if let Some(d) = b.deadline {
        pb = pb.deadline(d.0);
    }
    let configured = pb.build().map_err(|e| {
        let key = match &e {
            PolicyError::ZeroAttempts => "attempts",
            PolicyError::OutOfRange { setting, .. } => match *setting {
                "base_delay" => "backoff.initial",
                "max_delay" => "backoff.max",
                "multiplier" => "backoff.multiplier",
                "throttled_base_delay" => "backoff.throttled_initial",
                "throttled_max_delay" => "backoff.throttled_max",
                "deadline" => "deadline",
                "attempt_timeout" => "attempt_timeout",
                _ => "backoff",
            },
            PolicyError::BaseAboveCap { .. } => "backoff.initial",
            _ => "backoff",
        };
        let message = e.to_string();
        Refusal { key, error: Box::new(ConfigError::new(range, "", message).with_source(e)) }
    })?;
    let enabled = b.enabled.unwrap_or(true);
    let policy = if enabled {
        configured
    } else {
        configured.to_builder().max_attempts(1).build().unwrap_or(configured)
    };

    let mut classifier = HttpClassifier::new();
    if let Some(list) = &b.retry_statuses {
        for &code in list {
            if !(400..=599).contains(&code) {
                return Err(refuse(
                    range,
                    "retry_statuses",
                    format!("a retried status must be 400..=599, got {code}"),
                ));
            }
        }
        for code in 400..=599 {
            classifier = if list.contains(&code) {
                classifier.retry_status(code)
            } else {
                classifier.never_retry_status(code)
            };
        }
    }
    let retry_statuses = (400..=599).filter(|&c| classifier.retries(c)).collect();

    let body_rule = match &b.body_rule {
        Some(n) if !known.has_body_rule(n) => {
            return Err(refuse(
                ConfigErrorKind::UnknownName,
                "body_rule",
                format!(
                    "no body rule named {n:?} is registered in code (known: {})",
                    known.body_rules_list()
                ),
            ));
        }
        n => n.as_deref().map(Arc::from),
    };
    let fallback = match &b.fallback {
        Some(n) if !known.has_fallback(n) => {
            return Err(refuse(
                ConfigErrorKind::UnknownName,
                "fallback",
                format!("no fallback named {n:?} is registered in code (known: {})", known.fallbacks_list()),
            ));
        }
        n => n.as_deref().map(Arc::from),
    };

    let hedge = match b.hedging {
        Some(h) if h.enabled != Some(false) => {
            let settings = HedgeSettings {
                max_copies: h.max_copies.unwrap_or(2),
                delay: h.delay.map_or(Duration::ZERO, |d| d.0),
            };
            let mut hb = HedgePolicy::builder()
                .max_copies(settings.max_copies)
                .delay(HedgeDelay::fixed(settings.delay));
            hb = match configured.deadline() {
                Some(d) => hb.deadline(d),
                None => hb.no_deadline(),
            };
            hb = match configured.attempt_timeout() {
                Some(t) => hb.attempt_timeout(t),
                None => hb.no_attempt_timeout(),
            };
            let policy = hb.build().map_err(|e| {
                let key = match &e {
                    HedgePolicyError::OutOfRange { setting: "max_copies", .. } => "hedging.max_copies",
                    _ => "hedging.delay",
                };
                let message = e.to_string();
                Refusal { key, error: Box::new(ConfigError::new(range, "", message).with_source(e)) }
            })?;
            Some((settings, policy))
        }
        _ => None,
    };

    let budget = match b.budget {
        Some(x) if x.enabled == Some(false) => None,
        x => {
            let x = x.unwrap_or_default();
            let s = BudgetSettings {
                ratio: x.ratio,
                min_per_second: x.min_per_second,
                window: x.window.map(|d| d.0),
            };
            if let Err(e) = s.build() {
                let key = match &e {
                    BudgetError::OutOfRange { setting: "ratio", .. } => "budget.ratio",
                    BudgetError::OutOfRange { setting: "min_per_second", .. } => "budget.min_per_second",
                    _ => "budget.window",
                };
                let message = e.to_string();
                return Err(Refusal {
                    key,
                    error: Box::new(ConfigError::new(range, "", message).with_source(e)),
                });
            }
            Some(s)
        }
    };
    let breaker = match b.breaker {
        Some(x) if x.enabled == Some(false) => None,
        x => {
            let x = x.unwrap_or_default();
            let s = BreakerSettings {
                failure_ratio: x.failure_ratio,
                min_calls: x.min_calls,
                window: x.window.map(|d| d.0),
                cool_down: x.cool_down.map(|d| d.0),
                half_open_probes: x.half_open_probes,
            };
            if let Err(e) = s.build() {
                let key = match &e {
                    BreakerError::OutOfRange { setting: "failure_ratio", .. } => "breaker.failure_ratio",
                    BreakerError::OutOfRange { setting: "min_calls", .. } => "breaker.min_calls",
                    BreakerError::OutOfRange { setting: "cool_down", .. } => "breaker.cool_down",
                    BreakerError::OutOfRange { setting: "half_open_probes", .. } => {
                        "breaker.half_open_probes"
                    }
                    _ => "breaker.window",
                };
                let message = e.to_string();
                return Err(Refusal {
                    key,
                    error: Box::new(ConfigError::new(range, "", message).with_source(e)),
                });
            }
            Some(s)
        }
    };
    let pacer = match b.pacer {
        Some(x) if x.enabled == Some(false) => None,
        x => Some(PacerSettings { adaptive: x.and_then(|x| x.adaptive).unwrap_or(false) }),
    };
    let in_flight_budget = InFlightSettings::of(b.in_flight_budget)?;
    Ok(DependencySettings {
        name,
        matcher,
        enabled,
        configured,
        policy,
        classifier,
        retry_statuses,
        body_rule,
        hedge,
        budget,
        breaker,
        pacer,
        in_flight_budget,
        idempotency_keys: b.idempotency_keys,
        priority: match b.priority {
            Some(PriorityName::Sheddable) => Priority::Sheddable,
            _ => Priority::Critical,
        },
        fallback,
        sets: GuardKeys {
            budget: b.budget.is_some(),
            breaker: b.breaker.is_some(),
            pacer: b.pacer.is_some(),
            in_flight_budget: b.in_flight_budget.is_some(),
        },
        attempt_timeout_set: b.attempt_timeout.is_some(),
        job: false,
        index: None,
    })
}
