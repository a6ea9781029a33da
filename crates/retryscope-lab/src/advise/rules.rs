//! The rules: from one dependency's figures to its keys, each value with
//! what was observed and the rule (and its source) that chose it.
//!
//! | key | rule | source |
//! |---|---|---|
//! | (all) | fewer than [`MIN_REQUESTS`] requests in the range: nothing recommended, the defaults stay | — (too little to tell a blip from noise) |
//! | (all) | first-attempt failures under [`HEALTHY_FAILURES`], nothing refused, throttled or held, no heavy tail: the defaults stay | — (a healthy dependency needs no tuning) |
//! | `attempts` | [`SRE_ATTEMPTS`] (3) where attempts fail, never above [`A6_MAX_ATTEMPTS`] (5) | Google SRE book, ch. 22 "Addressing Cascading Failures": "limit retries per request" to 3 attempts; gRPC A6: `maxAttempts` above 5 is treated as 5 |
//! | `backoff.initial`, `backoff.max` | 50 ms doubling, capped at min(20 s, deadline / 2) | AWS SDKs' 2026 standard retry mode (`Policy::aws_2026`): transient base 50 ms, cap 20 s |
//! | `jitter` | `full` | AWS Architecture Blog, "Exponential Backoff and Jitter" (2015), and the AWS 2026 mode: full jitter spreads retries of clients that failed together |
//! | `backoff.throttled_initial`, `throttled_max` | 1 s (at most deadline / 2), cap min(20 s, deadline) — where 429s or rate-limited/held calls were seen | AWS 2026: throttling base 1 s |
//! | `pacer` | `{ adaptive = true }` where 429s, `rate_limited` refusals or held attempts were seen | DESIGN §5: a rate limit is the dependency's, not one call's; gRPC A6 retry throttling |
//! | `deadline` | the caller's (`--deadline dep=…`), never above it; unset when not given | DESIGN §2; the source articles: timeouts from the caller's deadline, "not from the slowest observed case" |
//! | `attempt_timeout` | min(1.5 × p99.9 of successful first attempts (p99 where unknown), deadline / attempts), never below p99.9; where p99.9 does not fit `attempts` times in the deadline, fewer attempts (at least 1) | the source articles: timeouts "derived from the caller's deadline, not from the slowest observed case"; no healthy call cut (the previous min(deadline / 2, 2 × p99) cut them when p99 was near half the deadline) |
//! | `attempts` (fewer) | lowered where `attempts` × p99.9 is over the deadline | as above: an attempt that cannot finish healthy in its share is not worth sending |
//! | `retry_statuses` | the engine's transient set (408, 429, 500, 502, 503, 504), written where statuses failed; other 4xx are never retried | DESIGN §2 (classification) |
//! | `budget` | `{ ratio = 0.1, min_per_second = 10, window = "10s" }` where attempts fail | Google SRE book, ch. 22: per-client retry budget of 10 % of requests; gRPC A6 retry throttling for the same idea |
//! | `breaker` | `{ failure_ratio = 0.5, min_calls = 20, window = "10s", cool_down = "5s" }` where an outage (failure ratio ≥ 0.5) lasted [`OUTAGE_FOR`] or more | the engine's breaker defaults; retries cannot help through an outage, a breaker stops the load |
//! | `hedging` | `{ max_copies = 2, delay = p95 }` for idempotent calls whose p99/p50 ≥ [`HEAVY_TAIL`], when p95 is under the attempt timeout | Dean & Barroso, "The Tail at Scale" (CACM 2013): defer the second request until the first has been out longer than the 95th-percentile latency, ≈ 5 % more load |
//! | `priority` | `sheddable` where the caller's deadline (or the file in force's) is [`BACKGROUND_DEADLINE`] or more, or operations took more than 5 attempts (a background policy's); `critical` where that deadline is 15 s or less; not written where neither is known (the series carry priority only on refusals, which says nothing of what a call is worth) | Google SRE book, ch. 21 "Handling Overload" (criticality: batch traffic SHEDDABLE, shed first; user-facing CRITICAL); the seeds' `Policy::background` and `Policy::interactive` deadlines |

mod priority;
mod timeout;

use super::observe::{Observed, Quantiles};
use priority::priority;
use std::time::Duration;
use timeout::attempt_timeout;

/// Fewer requests than this in the range: too little data.
pub const MIN_REQUESTS: f64 = 100.0;
/// A first-attempt failure ratio under this is healthy.
pub const HEALTHY_FAILURES: f64 = 0.005;
/// The SRE book's attempts per request.
pub const SRE_ATTEMPTS: u32 = 3;
/// gRPC A6: `maxAttempts` above 5 is treated as 5.
pub const A6_MAX_ATTEMPTS: u32 = 5;
/// The SRE book's retry budget: retries ≤ 10 % of requests.
pub const BUDGET_RATIO: f64 = 0.1;
/// AWS 2026: the base after a transient failure.
pub const AWS_TRANSIENT_BASE: Duration = Duration::from_millis(50);
/// AWS 2026: the base after a throttling answer.
pub const AWS_THROTTLED_BASE: Duration = Duration::from_secs(1);
/// AWS 2026: the cap of both curves.
pub const AWS_MAX: Duration = Duration::from_secs(20);
/// p99 / p50 at or above this is a heavy tail.
pub const HEAVY_TAIL: f64 = 5.0;
/// An outage this long or longer wants a breaker.
pub const OUTAGE_FOR: Duration = Duration::from_secs(60);
/// The deadline assumed when neither the caller nor the file gives one: `Policy::interactive`'s.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(15);
/// A deadline shorter than this (a file in force may write one) is not tuned.
pub const TUNABLE_DEADLINE: Duration = Duration::from_millis(20);
/// A deadline this long or longer is a background or batch caller's
/// (`Policy::background`'s is 10 minutes, `Policy::interactive`'s 15 s).
pub const BACKGROUND_DEADLINE: Duration = Duration::from_secs(60);
/// The attempt timeout's headroom over p99.9 of successful first attempts.
pub const TIMEOUT_HEADROOM: f64 = 1.5;
/// `Policy::interactive`'s attempts: what a dependency no file names sends.
pub const INTERACTIVE_ATTEMPTS: u32 = 4;
/// The shortest attempt timeout recommended.
const MIN_TIMEOUT: Duration = Duration::from_millis(10);

/// What the caller knows that the series do not say.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The caller's deadline for this dependency (`--deadline`).
    pub deadline: Option<Duration>,
    /// The file in force's deadline for it, when it has one.
    pub file_deadline: Option<Duration>,
    /// Its calls are idempotent (`--idempotent`, hedging in force, or hedges seen).
    pub idempotent: bool,
    /// The attempts the file in force sends (`None`: `Policy::interactive`'s 4).
    pub attempts_in_force: Option<u32>,
}

/// A value of the configuration file.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A whole number.
    Int(u32),
    /// A ratio.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A duration, written `"50ms"`.
    Duration(Duration),
    /// A name, written `"full"`.
    Name(&'static str),
    /// A list of statuses.
    Statuses(Vec<u16>),
    /// An inline table.
    Table(Vec<(&'static str, Value)>),
}

/// One key of a dependency's block: its value, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// The key (`attempts`).
    pub key: &'static str,
    /// Its value.
    pub value: Value,
    /// What was observed and which rule chose the value.
    pub reason: String,
}

/// What the rules say for one dependency.
#[derive(Debug, Clone, PartialEq)]
pub struct Advice {
    /// The dependency, as the series name it.
    pub name: String,
    /// What was observed, in a few lines.
    pub observed: Vec<String>,
    /// The keys recommended (none: the defaults stay).
    pub keys: Vec<Key>,
    /// Why the defaults stay, when no key is recommended; notes otherwise.
    pub notes: Vec<String>,
}

impl Advice {
    /// The key named `key`, when recommended.
    pub fn key(&self, key: &str) -> Option<&Value> {
        self.keys.iter().find(|k| k.key == key).map(|k| &k.value)
    }
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

fn secs(s: f64) -> String {
    if s < 1.0 { format!("{:.0} ms", s * 1000.0) } else { format!("{s:.2} s") }
}

/// Up to a whole millisecond, at least `MIN_TIMEOUT`: the file writes whole units.
fn whole_ms(seconds: f64) -> Duration {
    // Less a micro-millisecond first: 2 × 2.0005 s read back as 4001 ms is float noise.
    Duration::from_millis((seconds * 1000.0 - 1e-6).ceil().max(0.0) as u64).max(MIN_TIMEOUT)
}

fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { part / whole } else { 0.0 }
}

/// The statuses `error_type` values name, with their counts.
fn statuses(o: &Observed) -> Vec<(u16, f64)> {
    o.failures.iter().filter_map(|(k, v)| k.parse::<u16>().ok().map(|s| (s, *v))).collect()
}

/// The engine's transient statuses (DESIGN §2).
pub const TRANSIENT_STATUSES: [u16; 6] = [408, 429, 500, 502, 503, 504];

/// The rules applied to one dependency's figures.
pub fn advise(o: &Observed, caller: &Caller) -> Advice {
    let attempts = o.all_attempts();
    let first = o.attempts.get(&1).copied().unwrap_or(0.0);
    let first_failure = share(o.first_failures, first);
    let retry_ratio = share(o.all_retries(), o.requests);
    let lat = o.latency.get(&1).copied();
    let mut observed = vec![format!(
        "{:.0} requests, {:.0} attempts ({:.2} per request), {:.0} retries ({:.1} % of requests)",
        o.requests,
        attempts,
        share(attempts, o.requests),
        o.all_retries(),
        retry_ratio * 100.0
    )];
    observed.push(format!(
        "first attempts failed: {:.2} %; failed attempts by type: {}",
        first_failure * 100.0,
        listed(o.failures.iter().map(|(k, v)| (k.clone(), *v)))
    ));
    for (n, q) in &o.latency {
        observed.push(format!(
            "attempt {n} latency (successes): p50 {}, p95 {}, p99 {}",
            secs(q.p50),
            secs(q.p95),
            secs(q.p99)
        ));
    }
    observed.push(format!(
        "operations by attempts: {}; refused {:.0}, held {:.0}, throttled: {}; breaker changes {:.0}; hedges {:.0}",
        listed(o.operations.iter().map(|(k, v)| (k.clone(), *v))),
        o.refused,
        o.held,
        listed(o.throttled.iter().map(|(k, v)| (k.clone(), *v))),
        o.breaker_changes,
        o.hedges
    ));
    observed.push(if o.failing_steps.1 == 0 {
        "failure timeline: no failed attempt".to_owned()
    } else {
        format!(
            "failure timeline: failures in {} of {} steps, longest outage (failure ratio ≥ 0.5) {} s",
            o.failing_steps.0,
            o.failing_steps.1,
            o.longest_outage.as_secs()
        )
    });
    let mut advice = Advice { name: o.name.clone(), observed, keys: Vec::new(), notes: Vec::new() };

    if o.requests < MIN_REQUESTS {
        advice.notes.push(format!(
            "too little data: {:.0} requests in the range, fewer than {MIN_REQUESTS:.0}: left to the defaults",
            o.requests
        ));
        return advice;
    }
    let Some(lat) = lat.filter(|q| q.p50 > 0.0) else {
        advice.notes.push(
            "no successful first attempt with a latency in the range: nothing to derive timeouts from; \
             left to the defaults"
                .to_owned(),
        );
        return advice;
    };

    let too_many_429 = o.failures.get("429").copied().unwrap_or(0.0);
    let rate_limited =
        too_many_429 > 0.0 || o.held > 0.0 || o.throttled.get("rate_limited").is_some_and(|v| *v > 0.0);
    let outage = o.longest_outage >= OUTAGE_FOR;
    let tail = tail_ratio(&lat);
    let heavy_tail = tail >= HEAVY_TAIL;
    let failing = first_failure >= HEALTHY_FAILURES || o.refused > 0.0;
    let deadline = caller.deadline.or(caller.file_deadline).unwrap_or(DEFAULT_DEADLINE);
    // Whole milliseconds, as the file writes them: half of 2001 ms is 1000 ms, not 1000.5.
    let half = Duration::from_millis((deadline.as_millis() / 2) as u64);
    let quarter = Duration::from_millis((deadline.as_millis() / 4) as u64);
    let deadline_from = match (caller.deadline, caller.file_deadline) {
        (Some(_), _) => "the caller's deadline (--deadline)",
        (None, Some(_)) => "the file in force's deadline",
        (None, None) => "Policy::interactive's 15 s deadline (no --deadline given)",
    };

    if deadline < TUNABLE_DEADLINE {
        advice.notes.push(format!(
            "a deadline of {} leaves no room for a timeout, a wait and a retry: left as it is",
            ms(deadline)
        ));
        return advice;
    }
    if let Some(d) = caller.deadline {
        advice.keys.push(Key {
            key: "deadline",
            value: Value::Duration(d),
            reason: format!("the caller's deadline, {}: never above it (DESIGN §2)", ms(d)),
        });
    }
    if !failing && !rate_limited && !heavy_tail && !outage {
        advice.notes.push(format!(
            "healthy: {:.2} % of first attempts failed (< {:.1} %), nothing refused, throttled or held, p99/p50 {tail:.1}: \
             the defaults stay",
            first_failure * 100.0,
            HEALTHY_FAILURES * 100.0
        ));
        return advice;
    }

    // The attempts the timeout must fit: the SRE book's 3 where attempts
    // fail (written below), else what the file in force (or the engine's
    // interactive default) already sends.
    let wanted_attempts = if failing || rate_limited {
        SRE_ATTEMPTS.min(A6_MAX_ATTEMPTS)
    } else {
        caller.attempts_in_force.unwrap_or(INTERACTIVE_ATTEMPTS).clamp(1, A6_MAX_ATTEMPTS)
    };
    let fit = attempt_timeout(&lat, deadline, wanted_attempts);
    advice.keys.push(Key {
        key: "attempt_timeout",
        value: Value::Duration(fit.timeout),
        reason: fit.reason(deadline_from),
    });
    let timeout = fit.timeout;
    if fit.attempts < wanted_attempts && !(failing || rate_limited) {
        // Fewer than the file in force sends: written, or the timeout would cut healthy calls.
        advice.keys.push(Key {
            key: "attempts",
            value: Value::Int(fit.attempts),
            reason: format!(
                "{wanted_attempts} attempts of at least p99.9 = {} do not fit in the deadline {}: {} (no healthy call cut \
                 beats one more attempt that is cut anyway)",
                ms(fit.floor),
                ms(deadline),
                fit.attempts
            ),
        });
    }
    if failing || rate_limited {
        advice.keys.push(Key {
            key: "attempts",
            value: Value::Int(fit.attempts),
            reason: format!(
                "{:.2} % of first attempts failed: 3 attempts per request (Google SRE book, ch. 22), \
                 within gRPC A6's limit of 5{}",
                first_failure * 100.0,
                if fit.attempts < wanted_attempts {
                    format!(
                        "; {} here: {wanted_attempts} attempts of at least p99.9 = {} do not fit in the deadline {}",
                        fit.attempts,
                        ms(fit.floor),
                        ms(deadline)
                    )
                } else {
                    String::new()
                }
            ),
        });
        let initial = AWS_TRANSIENT_BASE.min(quarter);
        let max = AWS_MAX.min(half).max(initial);
        let mut backoff = vec![
            ("initial", Value::Duration(initial)),
            ("max", Value::Duration(max)),
            ("multiplier", Value::Float(2.0)),
        ];
        let mut why = format!(
            "transient base {} doubling, cap min(20 s, deadline / 2) = {} (AWS SDKs' 2026 figures)",
            ms(initial),
            ms(max)
        );
        if rate_limited {
            let throttled_max = AWS_MAX.min(deadline).max(Duration::from_millis(1));
            let throttled = AWS_THROTTLED_BASE.min(half).min(throttled_max);
            backoff.push(("throttled_initial", Value::Duration(throttled)));
            backoff.push(("throttled_max", Value::Duration(throttled_max)));
            why.push_str(&format!(
                "; after a throttling answer ({too_many_429:.0} × 429 seen): base {}, cap {} (AWS 2026: throttling base 1 s)",
                ms(throttled),
                ms(throttled_max)
            ));
        }
        advice.keys.push(Key { key: "backoff", value: Value::Table(backoff), reason: why });
        advice.keys.push(Key {
            key: "jitter",
            value: Value::Name("full"),
            reason: "full jitter: clients that failed together do not retry together \
                     (AWS Architecture Blog, \"Exponential Backoff and Jitter\"; AWS 2026)"
                .to_owned(),
        });
        let seen = statuses(o);
        if !seen.is_empty() {
            let never: Vec<u16> =
                seen.iter().map(|s| s.0).filter(|s| !TRANSIENT_STATUSES.contains(s)).collect();
            advice.keys.push(Key {
                key: "retry_statuses",
                value: Value::Statuses(TRANSIENT_STATUSES.to_vec()),
                reason: format!(
                    "failed statuses seen: {}; the transient set is retried{} (DESIGN §2)",
                    listed(seen.iter().map(|(s, v)| (s.to_string(), *v))),
                    if never.is_empty() {
                        String::new()
                    } else {
                        format!(", {never:?} never (permanent answers)")
                    }
                ),
            });
        }
        advice.keys.push(Key {
            key: "budget",
            value: Value::Table(vec![
                ("ratio", Value::Float(BUDGET_RATIO)),
                ("min_per_second", Value::Int(10)),
                ("window", Value::Duration(Duration::from_secs(10))),
            ]),
            reason: format!(
                "retries were {:.1} % of requests: a budget of 10 % of requests keeps a fleet from amplifying an \
                 outage (Google SRE book, ch. 22; gRPC A6 retry throttling)",
                retry_ratio * 100.0
            ),
        });
    }
    if outage {
        advice.keys.push(Key {
            key: "breaker",
            value: Value::Table(vec![
                ("failure_ratio", Value::Float(0.5)),
                ("min_calls", Value::Int(20)),
                ("window", Value::Duration(Duration::from_secs(10))),
                ("cool_down", Value::Duration(Duration::from_secs(5))),
            ]),
            reason: format!(
                "an outage of {} s (failure ratio ≥ 0.5, ≥ {} s): retries cannot help through it, a breaker \
                 stops the load and probes every 5 s (the engine's breaker defaults)",
                o.longest_outage.as_secs(),
                OUTAGE_FOR.as_secs()
            ),
        });
    }
    if rate_limited {
        advice.keys.push(Key {
            key: "pacer",
            value: Value::Table(vec![("adaptive", Value::Bool(true))]),
            reason: format!(
                "{too_many_429:.0} × 429, {:.0} held, {:.0} refused as rate_limited: the dependency's limit \
                 holds every call of it, not one (DESIGN §5; gRPC A6 retry throttling)",
                o.held,
                o.throttled.get("rate_limited").copied().unwrap_or(0.0)
            ),
        });
    }
    if heavy_tail {
        let delay = whole_ms(lat.p95);
        if delay >= timeout {
            // A copy sent after the first attempt was already cut helps nothing.
            advice.notes.push(format!(
                "heavy tail (p99/p50 = {tail:.1}), but p95 = {} is not under the attempt timeout {}: no hedge",
                ms(delay),
                ms(timeout)
            ));
        } else if caller.idempotent {
            advice.keys.push(Key {
                key: "hedging",
                value: Value::Table(vec![("max_copies", Value::Int(2)), ("delay", Value::Duration(delay))]),
                reason: format!(
                    "p99/p50 = {} / {} = {tail:.1} ≥ {HEAVY_TAIL}: a second copy after p95 = {} \
                     (Dean & Barroso, \"The Tail at Scale\": ≈ 5 % more load); the calls are idempotent",
                    secs(lat.p99),
                    secs(lat.p50),
                    ms(delay)
                ),
            });
        } else {
            advice.notes.push(format!(
                "heavy tail (p99/p50 = {tail:.1}): hedging at p95 = {} would help, but advise cannot see that \
                 these calls are idempotent: pass --idempotent {} if they are",
                ms(delay),
                o.name
            ));
        }
    }
    priority(o, caller, &mut advice);
    advice
}

/// p99 / p50, 1 when the median is zero.
fn tail_ratio(q: &Quantiles) -> f64 {
    if q.p50 > 0.0 { q.p99 / q.p50 } else { 1.0 }
}

fn listed(items: impl Iterator<Item = (String, f64)>) -> String {
    let all: Vec<String> = items.map(|(k, v)| format!("{k}={v:.0}")).collect();
    if all.is_empty() { "none".to_owned() } else { all.join(", ") }
}
