//! The file's schema, as serde reads it: every table refuses unknown keys.
//! Values are checked later ([`crate::settings`]), where the engine's own
//! builders say what they accept.

use crate::duration::FileDuration;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The whole file: `defaults`, and the named `dependencies`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct File {
    #[serde(default)]
    pub(crate) defaults: Block,
    #[serde(default)]
    pub(crate) dependencies: BTreeMap<String, Block>,
}

/// `defaults` or one dependency: what it matches (a dependency only), and
/// its settings, each optional (a dependency's falls back to `defaults`',
/// then to the engine's).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Block {
    pub(crate) host: Option<String>,
    pub(crate) path_prefix: Option<String>,
    pub(crate) service: Option<String>,
    pub(crate) method: Option<String>,
    pub(crate) subject: Option<String>,

    pub(crate) enabled: Option<bool>,
    pub(crate) attempts: Option<u32>,
    pub(crate) backoff: Option<Backoff>,
    pub(crate) jitter: Option<JitterName>,
    pub(crate) attempt_timeout: Option<FileDuration>,
    pub(crate) deadline: Option<FileDuration>,
    pub(crate) retry_statuses: Option<Vec<u16>>,
    pub(crate) body_rule: Option<String>,
    pub(crate) hedging: Option<Hedging>,
    pub(crate) budget: Option<Budget>,
    pub(crate) breaker: Option<Breaker>,
    pub(crate) pacer: Option<Pacer>,
    pub(crate) in_flight_budget: Option<InFlight>,
    pub(crate) idempotency_keys: Option<bool>,
    pub(crate) priority: Option<PriorityName>,
    pub(crate) fallback: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Backoff {
    pub(crate) initial: Option<FileDuration>,
    pub(crate) max: Option<FileDuration>,
    pub(crate) multiplier: Option<f64>,
    /// The base and cap after a throttling answer (`Policy::throttled_base_delay`).
    pub(crate) throttled_initial: Option<FileDuration>,
    pub(crate) throttled_max: Option<FileDuration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum JitterName {
    None,
    Full,
    Equal,
    Decorrelated,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PriorityName {
    Critical,
    Sheddable,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Hedging {
    pub(crate) enabled: Option<bool>,
    pub(crate) max_copies: Option<u32>,
    pub(crate) delay: Option<FileDuration>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Budget {
    pub(crate) enabled: Option<bool>,
    pub(crate) ratio: Option<f64>,
    pub(crate) min_per_second: Option<u32>,
    pub(crate) window: Option<FileDuration>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Breaker {
    pub(crate) enabled: Option<bool>,
    pub(crate) failure_ratio: Option<f64>,
    pub(crate) min_calls: Option<u32>,
    pub(crate) window: Option<FileDuration>,
    pub(crate) cool_down: Option<FileDuration>,
    pub(crate) half_open_probes: Option<u32>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Pacer {
    pub(crate) enabled: Option<bool>,
    pub(crate) adaptive: Option<bool>,
}

/// `in_flight_budget` ([`crate::InFlightSettings`]).
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InFlight {
    pub(crate) enabled: Option<bool>,
    pub(crate) share: Option<f64>,
    pub(crate) min: Option<u32>,
}

/// `a` where set, else `b`: a dependency's value over the defaults'.
fn or<T>(a: Option<T>, b: Option<T>) -> Option<T> {
    a.or(b)
}

impl Block {
    /// This dependency's settings over `defaults`', table by table and key by key.
    pub(crate) fn over(&self, d: &Block) -> Block {
        Block {
            host: self.host.clone(),
            path_prefix: self.path_prefix.clone(),
            service: self.service.clone(),
            method: self.method.clone(),
            subject: self.subject.clone(),
            enabled: or(self.enabled, d.enabled),
            attempts: or(self.attempts, d.attempts),
            backoff: merge(self.backoff, d.backoff, |a, b| Backoff {
                initial: or(a.initial, b.initial),
                max: or(a.max, b.max),
                multiplier: or(a.multiplier, b.multiplier),
                throttled_initial: or(a.throttled_initial, b.throttled_initial),
                throttled_max: or(a.throttled_max, b.throttled_max),
            }),
            jitter: or(self.jitter, d.jitter),
            attempt_timeout: or(self.attempt_timeout, d.attempt_timeout),
            deadline: or(self.deadline, d.deadline),
            retry_statuses: or(self.retry_statuses.clone(), d.retry_statuses.clone()),
            body_rule: or(self.body_rule.clone(), d.body_rule.clone()),
            hedging: merge(self.hedging, d.hedging, |a, b| Hedging {
                enabled: or(a.enabled, b.enabled),
                max_copies: or(a.max_copies, b.max_copies),
                delay: or(a.delay, b.delay),
            }),
            budget: merge(self.budget, d.budget, |a, b| Budget {
                enabled: or(a.enabled, b.enabled),
                ratio: or(a.ratio, b.ratio),
                min_per_second: or(a.min_per_second, b.min_per_second),
                window: or(a.window, b.window),
            }),
            breaker: merge(self.breaker, d.breaker, |a, b| Breaker {
                enabled: or(a.enabled, b.enabled),
                failure_ratio: or(a.failure_ratio, b.failure_ratio),
                min_calls: or(a.min_calls, b.min_calls),
                window: or(a.window, b.window),
                cool_down: or(a.cool_down, b.cool_down),
                half_open_probes: or(a.half_open_probes, b.half_open_probes),
            }),
            pacer: merge(self.pacer, d.pacer, |a, b| Pacer {
                enabled: or(a.enabled, b.enabled),
                adaptive: or(a.adaptive, b.adaptive),
            }),
            in_flight_budget: merge(self.in_flight_budget, d.in_flight_budget, |a, b| InFlight {
                enabled: or(a.enabled, b.enabled),
                share: or(a.share, b.share),
                min: or(a.min, b.min),
            }),
            idempotency_keys: or(self.idempotency_keys, d.idempotency_keys),
            priority: or(self.priority, d.priority),
            fallback: or(self.fallback.clone(), d.fallback.clone()),
        }
    }
}

impl Block {
    /// A job rule's block without the keys a job worker does not apply, so
    /// that the values it would inherit from `defaults` (which serve the
    /// calls of HTTP and gRPC clients) are neither shown nor used for it.
    pub(crate) fn for_jobs(mut self) -> Block {
        for key in JOB_IGNORED {
            match key {
                "retry_statuses" => self.retry_statuses = None,
                "body_rule" => self.body_rule = None,
                "hedging" => self.hedging = None,
                "idempotency_keys" => self.idempotency_keys = None,
                "pacer" => self.pacer = None,
                "fallback" => self.fallback = None,
                "priority" => self.priority = None,
                "budget" => self.budget = None,
                "breaker" => self.breaker = None,
                "in_flight_budget" => self.in_flight_budget = None,
                _ => {}
            }
        }
        self
    }

    /// The first key of [`JOB_IGNORED`] this block writes.
    pub(crate) fn job_ignored_key(&self) -> Option<&'static str> {
        let set = [
            self.retry_statuses.is_some(),
            self.body_rule.is_some(),
            self.hedging.is_some(),
            self.idempotency_keys.is_some(),
            self.pacer.is_some(),
            self.fallback.is_some(),
            self.priority.is_some(),
            self.budget.is_some(),
            self.breaker.is_some(),
            self.in_flight_budget.is_some(),
        ];
        JOB_IGNORED.iter().zip(set).find(|(_, s)| *s).map(|(k, _)| *k)
    }
}

/// The keys a job worker does not apply: HTTP/gRPC call settings
/// (`retry_statuses`, `body_rule`, `hedging`, `idempotency_keys`, `pacer`,
/// `fallback`, `priority`) and the guards (`budget`, `breaker`,
/// `in_flight_budget`: a worker takes
/// its dependency's guards from code, `WorkerBuilder::guards`). Refused on a
/// `subject` rule; not inherited by one from `defaults`.
pub(crate) const JOB_IGNORED: [&str; 10] = [
    "retry_statuses",
    "body_rule",
    "hedging",
    "idempotency_keys",
    "pacer",
    "fallback",
    "priority",
    "budget",
    "breaker",
    "in_flight_budget",
];

fn merge<T: Copy>(a: Option<T>, b: Option<T>, f: impl Fn(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(f(a, b)),
        (a, b) => a.or(b),
    }
}
