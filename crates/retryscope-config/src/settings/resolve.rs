//! Resolving a dependency's effective settings: the file's values over
//! `defaults` over the engine's, each checked by the engine's own builder.

use super::*;

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
    // A base the file leaves to the engine is refused only for a cap the file
    // writes below it: the refusal points at that cap, which has a place.
    let (base, throttled_base) = (
        if backoff.initial.is_some() { "backoff.initial" } else { "backoff.max" },
        match (backoff.throttled_initial, backoff.throttled_max) {
            (Some(_), _) => "backoff.throttled_initial",
            (None, Some(_)) => "backoff.throttled_max",
            (None, None) => "backoff.max",
        },
    );
    let configured = pb.build().map_err(|e| {
        let key = match &e {
            PolicyError::ZeroAttempts => "attempts",
            PolicyError::OutOfRange { setting, .. } => match *setting {
                "base_delay" => base,
                "max_delay" => "backoff.max",
                "multiplier" => "backoff.multiplier",
                "throttled_base_delay" => throttled_base,
                "throttled_max_delay" => "backoff.throttled_max",
                "deadline" => "deadline",
                "attempt_timeout" => "attempt_timeout",
                _ => "backoff",
            },
            PolicyError::BaseAboveCap { .. } => base,
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

    // Each guard's values are checked whether or not it is enabled: a bad
    // value beside `enabled = false` would otherwise surface only when an
    // operator turns the guard on, in an incident.
    let hedge = match b.hedging {
        Some(h) => {
            let settings = HedgeSettings {
                max_copies: h.max_copies.unwrap_or(2),
                delay: h.delay.map_or(Duration::ZERO, |d| d.0),
            };
            let mut hb = HedgePolicy::builder()
                .max_copies(settings.max_copies)
                .delay(HedgeDelay::Fixed(settings.delay));
            hb = match configured.deadline() {
                Some(d) => hb.deadline(d),
                None => hb.no_deadline(),
            };
            hb = match configured.attempt_timeout() {
                Some(t) => hb.attempt_timeout(t),
                None => hb.no_attempt_timeout(),
            };
            let policy = hb.build().map_err(|e| {
                let key = match e.setting() {
                    "max_copies" => "hedging.max_copies",
                    _ => "hedging.delay",
                };
                let message = e.to_string();
                Refusal { key, error: Box::new(ConfigError::new(range, "", message).with_source(e)) }
            })?;
            (h.enabled != Some(false)).then_some((settings, policy))
        }
        None => None,
    };

    let budget = {
        let x = b.budget;
        let disabled = x.as_ref().is_some_and(|x| x.enabled == Some(false));
        let x = x.unwrap_or_default();
        let s = BudgetSettings {
            ratio: x.ratio,
            min_per_second: x.min_per_second,
            window: x.window.map(|d| d.0),
        };
        if let Err(e) = s.build() {
            let key = match e.setting() {
                "ratio" => "budget.ratio",
                "min_per_second" => "budget.min_per_second",
                _ => "budget.window",
            };
            let message = e.to_string();
            return Err(Refusal {
                key,
                error: Box::new(ConfigError::new(range, "", message).with_source(e)),
            });
        }
        (!disabled).then_some(s)
    };
    let breaker = {
        let x = b.breaker;
        let disabled = x.as_ref().is_some_and(|x| x.enabled == Some(false));
        let x = x.unwrap_or_default();
        let s = BreakerSettings {
            failure_ratio: x.failure_ratio,
            min_calls: x.min_calls,
            window: x.window.map(|d| d.0),
            cool_down: x.cool_down.map(|d| d.0),
            half_open_probes: x.half_open_probes,
        };
        if let Err(e) = s.build() {
            let key = match e.setting() {
                "failure_ratio" => "breaker.failure_ratio",
                "min_calls" => "breaker.min_calls",
                "cool_down" => "breaker.cool_down",
                "half_open_probes" => "breaker.half_open_probes",
                _ => "breaker.window",
            };
            let message = e.to_string();
            return Err(Refusal {
                key,
                error: Box::new(ConfigError::new(range, "", message).with_source(e)),
            });
        }
        (!disabled).then_some(s)
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
        own_sets: GuardKeys::default(),
        attempt_timeout_set: b.attempt_timeout.is_some(),
        job: false,
        index: None,
    })
}
