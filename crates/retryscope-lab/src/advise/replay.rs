//! Proof by replay: one dependency's recorded failure timeline and latency
//! replayed through the lab's virtual time under two configurations — the one
//! in force and the recommended one — with the engine's own backoff
//! ([`Policy::delay`]), `RetryBudget` and `CircuitBreaker` on the
//! simulator's clock. A recommendation that answers fewer calls or loads the
//! dependency more than what is in force is withheld ([`worse`]).
//!
//! The model's assumptions, stated in every file's comments:
//! - calls arrive evenly at the observed request rate (at most
//!   [`MAX_CALLS`] over the range), each attempt fails with the attempt
//!   failure ratio recorded for its step (a minute's ratio, every step ≥ 15 s),
//!   independently of the others;
//! - an attempt's latency is drawn from the recorded quantiles of successful
//!   first attempts (linear between p50, p95, p99, up to 1.5 × p99), failed or
//!   not; an attempt longer than its timeout fails at the timeout;
//! - the dependency does not answer the load: the failure timeline is the same
//!   under both configurations (no metastable feedback), so amplification is
//!   what a configuration adds, not what the dependency would do with it;
//! - hedging, the pacer and server hints are not modelled.

use super::observe::{Observed, Quantiles};
use crate::sim::events::{EventQueue, Nanos, VirtualClock, from_secs_f64, nanos};
use crate::sim::rng::SimRng;
use rand::RngExt;
use retryscope::Policy;
use retryscope::throttle::{RetryCause, Throttle};
use retryscope_config::{BreakerSettings, BudgetSettings};
use std::time::Duration;

/// The most calls one replay starts: a month at a high rate is replayed at a lower one.
pub const MAX_CALLS: f64 = 200_000.0;
/// Fewer calls answered than in force by more than this share: worse.
pub const ANSWERED_SLACK: f64 = 0.005;
/// More attempts per call than in force by more than this factor: worse.
pub const LOAD_SLACK: f64 = 1.05;

/// One configuration as the replay runs it.
#[derive(Debug, Clone)]
pub struct Side {
    /// The policy.
    pub policy: Policy,
    /// The budget's settings (`None`: no budget).
    pub budget: Option<BudgetSettings>,
    /// The breaker's settings (`None`: no breaker).
    pub breaker: Option<BreakerSettings>,
}

/// What one replay measured.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Replayed {
    /// Calls started.
    pub calls: u64,
    /// The share of calls answered with a success.
    pub answered: f64,
    /// p99 latency of the answered calls, seconds (waits included).
    pub p99: f64,
    /// Attempts sent per call: the load on the dependency.
    pub amplification: f64,
}

/// Whether `recommended` is worse than `in_force`: fewer calls answered, or more load.
pub fn worse(recommended: &Replayed, in_force: &Replayed) -> bool {
    recommended.answered < in_force.answered - ANSWERED_SLACK
        || recommended.amplification > in_force.amplification * LOAD_SLACK
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Start { call: usize },
    Send { call: usize, attempt: u32 },
    Done { call: usize, attempt: u32, ok: bool },
}

/// An attempt's latency: the inverse of the recorded quantiles, linear between them.
fn latency(q: &Quantiles, u: f64) -> f64 {
    // Beyond the last known quantile nothing was measured: up to 1.25 × p99.9
    // where it is known, else up to 1.5 × p99 (stated in the assumptions).
    let (top_u, top, max) = if q.p999 >= q.p99 && q.p999 > 0.0 {
        (0.999, q.p999, q.p999 * 1.25)
    } else {
        (0.99, q.p99, q.p99 * 1.5)
    };
    let points = [(0.0, 0.0), (0.5, q.p50), (0.95, q.p95), (0.99, q.p99), (top_u, top), (1.0, max)];
    for w in points.windows(2) {
        let ((u0, v0), (u1, v1)) = (w[0], w[1]);
        if u <= u1 && u1 > u0 {
            return v0 + (v1 - v0) * (u - u0) / (u1 - u0);
        }
    }
    max
}

/// Replays `o` under `side`; `seed` makes it the same every run.
///
/// `caller` is the caller's own deadline (`--deadline`), which bounds every
/// call whatever the configuration says.
pub fn replay(o: &Observed, side: &Side, caller: Option<Duration>, seed: u64) -> Result<Replayed, String> {
    let q = o.latency.get(&1).copied().ok_or("no latency to replay")?;
    let span = o.window.as_secs_f64().max(1.0);
    let rate = (o.requests / span).min(MAX_CALLS / span);
    let total = (rate * span).floor() as usize;
    let mut clock = VirtualClock::new();
    // The file's guards, on the replay's clock.
    let budget = match &side.budget {
        Some(b) => Some(b.builder().clock(clock.handle()).build().map_err(|e| e.to_string())?),
        None => None,
    };
    let breaker = match &side.breaker {
        Some(b) => Some(b.builder().clock(clock.handle()).build().map_err(|e| e.to_string())?),
        None => None,
    };
    let mut rng = SimRng::seeded(seed);
    let mut queue: EventQueue<Event> = EventQueue::with_capacity(1024);
    let gap = if rate > 0.0 { 1.0 / rate } else { span };
    for call in 0..total {
        queue.schedule(from_secs_f64(call as f64 * gap), Event::Start { call });
    }
    let mut started: Vec<Nanos> = vec![0; total];
    let mut previous: Vec<Duration> = vec![side.policy.base_delay(); total];
    let mut permits: Vec<Option<retryscope::breaker::BreakerPermit>> = (0..total).map(|_| None).collect();
    let (mut sent, mut answered) = (0u64, Vec::with_capacity(total));
    let deadline = [side.policy.deadline(), caller].into_iter().flatten().min().map(nanos);
    let timeout = side.policy.attempt_timeout().map(nanos);
    let step = o.timeline_step.max(1.0);
    while let Some((now, event)) = queue.pop() {
        clock.advance_to(now);
        match event {
            Event::Start { call } => {
                started[call] = now;
                if let Some(b) = &budget {
                    b.request_started();
                }
                queue.schedule(now, Event::Send { call, attempt: 1 });
            }
            Event::Send { call, attempt } => {
                if let Some(br) = &breaker {
                    match br.try_acquire() {
                        Ok(permit) => permits[call] = Some(permit),
                        Err(_) => continue, // refused: not sent, not answered
                    }
                }
                sent += 1;
                let i = ((now as f64 / 1e9) / step) as usize;
                let p = o.timeline.get(i).copied().unwrap_or(0.0);
                let fails = rng.random::<f64>() < p;
                let took = from_secs_f64(latency(&q, rng.random::<f64>()));
                let left = deadline.map(|d| (started[call] + d).saturating_sub(now));
                let cut = [timeout, left].into_iter().flatten().min();
                let (took, ok) = match cut {
                    Some(c) if took > c => (c, false),
                    _ => (took, !fails),
                };
                queue.schedule(now + took, Event::Done { call, attempt, ok });
            }
            Event::Done { call, attempt, ok } => {
                if let Some(permit) = permits[call].take() {
                    if ok { permit.success() } else { permit.failure() }
                }
                if let Some(b) = &budget {
                    if attempt > 1 {
                        b.retry_finished(RetryCause::Transient, ok);
                    } else {
                        b.attempt_finished(ok);
                    }
                }
                if ok {
                    answered.push((now - started[call]) as f64 / 1e9);
                    continue;
                }
                if attempt >= side.policy.max_attempts() {
                    continue;
                }
                if let Some(b) = &budget
                    && !b.try_acquire_retry_for(RetryCause::Transient)
                {
                    continue;
                }
                let wait = side.policy.delay(attempt - 1, previous[call], rng.jitter());
                previous[call] = wait;
                // The engine gives up when the next wait cannot fit in the deadline.
                if deadline.is_some_and(|d| now + nanos(wait) >= started[call] + d) {
                    continue;
                }
                queue.schedule(now + nanos(wait), Event::Send { call, attempt: attempt + 1 });
            }
        }
    }
    answered.sort_by(f64::total_cmp);
    let p99 = answered.get(((answered.len() as f64 * 0.99).ceil() as usize).saturating_sub(1)).copied();
    let calls = total as u64;
    let share = |a: f64| if calls == 0 { 0.0 } else { a / calls as f64 };
    Ok(Replayed {
        calls,
        answered: share(answered.len() as f64),
        p99: p99.unwrap_or(0.0),
        amplification: share(sent as f64),
    })
}

impl Side {
    /// What a client built with `RetryMiddleware::new(Policy::interactive())`
    /// keeps for a dependency no file names: the interactive policy, and the
    /// engine's default budget and breaker.
    pub fn defaults() -> Self {
        Self {
            policy: Policy::interactive(),
            budget: Some(BudgetSettings::default()),
            breaker: Some(BreakerSettings::default()),
        }
    }

    /// The side a file's settings give, the guards it does not write left as `base` has them.
    pub fn from_settings(s: &retryscope_config::DependencySettings, base: &Side) -> Self {
        Self { policy: s.policy(), budget: s.budget().or(base.budget), breaker: s.breaker().or(base.breaker) }
    }
}

/// One dependency's replay, in force and recommended, and whether the
/// recommendation was withheld for it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Compared {
    /// The dependency, as the series name it.
    pub dependency: String,
    /// Under the configuration in force.
    pub in_force: Replayed,
    /// Under the recommended one.
    pub recommended: Replayed,
    /// The recommendation was worse, and is not written.
    pub withheld: bool,
}

impl Compared {
    /// The comment line the file carries.
    pub fn line(&self) -> String {
        let side = |r: &Replayed| {
            format!(
                "answered {:.2} %, p99 {:.0} ms, {:.2} attempts a call",
                r.answered * 100.0,
                r.p99 * 1000.0,
                r.amplification
            )
        };
        format!(
            "replay ({} calls): in force {}; recommended {}{}",
            self.in_force.calls,
            side(&self.in_force),
            side(&self.recommended),
            if self.withheld { ": worse, withheld (the defaults stay)" } else { "" }
        )
    }
}

/// The replays side by side, one row per dependency.
pub fn table(rows: &[Compared]) -> String {
    let mut out = format!(
        "{:<28} {:>7} {:>9} {:>9} {:>8} {:>8} {:>6} {:>6}  {}\n",
        "replayed", "calls", "answered", "(advice)", "p99 ms", "(advice)", "load", "(adv.)", "verdict"
    );
    for r in rows {
        let (a, b) = (&r.in_force, &r.recommended);
        out.push_str(&format!(
            "{:<28} {:>7} {:>8.2}% {:>8.2}% {:>8.0} {:>8.0} {:>6.2} {:>6.2}  {}\n",
            r.dependency,
            a.calls,
            a.answered * 100.0,
            b.answered * 100.0,
            a.p99 * 1000.0,
            b.p99 * 1000.0,
            a.amplification,
            b.amplification,
            if r.withheld { "worse: withheld" } else { "written" }
        ));
    }
    out
}
