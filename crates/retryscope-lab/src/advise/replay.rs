//! Proof by replay: one dependency's recorded failure timeline and latency
//! replayed through the lab's virtual time under two configurations — the one
//! in force and the recommended one — with the engine's own backoff
//! ([`Policy::delay_after`]), `RetryBudget` and `CircuitBreaker` on the
//! simulator's clock. A recommendation that answers fewer calls or loads the
//! dependency more than what is in force is withheld ([`worse`]).
//!
//! The model's assumptions are [`ASSUMPTIONS`], stated in every report and
//! in the JSON.

use super::observe::{Observed, Quantiles};
pub use super::recovery::Recovery;
use crate::sim::events::{EventQueue, Nanos, VirtualClock, from_secs_f64, nanos};
use crate::sim::rng::SimRng;
use rand::RngExt;
use retryscope::Policy;
use retryscope::budget::{Budget, RetryCause};
use retryscope_config::{BreakerSettings, BudgetSettings, HedgeSettings};
use std::time::Duration;

/// The model's assumptions, as the report states them.
pub const ASSUMPTIONS: &[&str] = &[
    "calls arrive evenly at the observed request rate (at most 200,000 over the range); each attempt fails with \
     the attempt failure ratio recorded for its step (a minute's ratio, steps of at least 15 s), independently \
     (a quick retry within an outage fails or not as any attempt does: the series' minute ratios cannot say \
     whether the dependency was down for part of a step or failed a share of all its calls)",
    "an attempt's latency is drawn from the recorded quantiles of successful first attempts (linear between p50, \
     p95, p99, p99.9, up to 1.25 × p99.9, or 1.5 × p99 where p99.9 is unknown), failed or not; an attempt longer \
     than its timeout fails at the timeout",
    "a failed attempt is a 429 in the share of failed attempts the series recorded as 429: it waits on the \
     throttled curve (backoff.throttled_initial/max) where the configuration has one; the Retry-After values \
     themselves are not in the series, so a server hint beyond that curve, and the pacer's shared pace, are not \
     modelled",
    "a recorded timeout is the attempt timeout in force cutting a slow attempt, not a failure of the \
     dependency: it is replayed as an attempt of 1 to 2 times that timeout, which each side's own timeout cuts \
     or not (the histograms hold successes only: how slow those attempts really were is not in the series)",
    "hedging where the configuration has it: each attempt sends a copy after the hedge delay while no copy has \
     answered, up to max_copies; every copy is load, the first success answers, an attempt fails when its last \
     copy out fails",
    "the dependency does not answer the load: its failures and latency are the recorded ones under both \
     configurations (no load-dependent latency or metastable feedback: the series do not say the dependency's \
     capacity), so amplification is what a configuration adds, not what the dependency would do with it",
    "time to recover: from the end of the longest recorded run of steps with attempt failure ratio >= 0.5, until \
     the calls started in one step's window are answered within 1 point of the share answered in the 5 minutes \
     before that run ('-': no such run, or no step of calls after it in the range; 'never': not back within the \
     range); a point of the recorded timeline is taken as the failure ratio of the step before it",
    "priority is not modelled: one dependency's calls are all of one caller",
];

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
    /// Hedging (`None`: one copy of each attempt).
    pub hedge: Option<HedgeSettings>,
}

/// What one replay measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Replayed {
    /// Calls started.
    pub calls: u64,
    /// The share of calls answered with a success.
    pub answered: f64,
    /// p99 latency of the answered calls, seconds (waits included).
    pub p99: f64,
    /// Attempts (hedged copies included) sent per call: the load on the dependency.
    pub amplification: f64,
    /// Time to recover from the recorded outage ([`recovery`](super::recovery));
    /// `None` where the recorded timeline has no outage with calls before it.
    pub recovery: Option<Recovery>,
    /// Step by step: the share of the calls started in it that were
    /// answered, and the attempts they sent per call.
    pub timeline: Vec<Point>,
}

/// One step of a replay's timeline.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Point {
    /// The step's start, seconds from the range's start.
    pub t: f64,
    /// The share of the calls started in it answered.
    pub answered: f64,
    /// Attempts those calls sent, per call.
    pub amplification: f64,
}

/// Whether `recommended` is worse than `in_force`: fewer calls answered, or more load.
pub fn worse(recommended: &Replayed, in_force: &Replayed) -> bool {
    worse_allowing(recommended, in_force, 0.0)
}

/// The extra load a hedge after p95 is expected to add ("The Tail at Scale": ≈ 5 %).
pub const HEDGE_LOAD: f64 = 0.05;

/// [`worse`], allowing `extra` more load on top of [`LOAD_SLACK`]: the load
/// a recommendation sends by design (a hedge, [`HEDGE_LOAD`]) is its price, not
/// a regression; more than that still is.
pub fn worse_allowing(recommended: &Replayed, in_force: &Replayed, extra: f64) -> bool {
    recommended.answered < in_force.answered - ANSWERED_SLACK
        || recommended.amplification > in_force.amplification * (LOAD_SLACK + extra)
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Start { call: usize },
    Send { call: usize, attempt: u32 },
    Hedge { call: usize, attempt: u32 },
    Done { call: usize, attempt: u32, send: usize, ok: bool, throttled: bool },
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

/// One call's state.
#[derive(Debug, Clone, Copy, Default)]
struct Call {
    started: Nanos,
    previous: Duration,
    /// The attempt under way, its copies sent and still out.
    attempt: u32,
    copies: u32,
    out: u32,
    /// Answered (or given up): later copies' answers are ignored.
    over: bool,
    /// Attempts and copies sent, all told.
    sent: u32,
    ok: bool,
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
    // A recorded timeout is no answer from the dependency but the attempt
    // timeout in force cutting a slow one: replayed as an attempt of 1-2 ×
    // that timeout, which each side's own timeout cuts or not. The other
    // failures are the dependency's; a 429 in the share recorded, on the
    // throttled curve.
    let all = o.all_failures();
    let share_of =
        |kind: &str| if all > 0.0 { o.failures.get(kind).copied().unwrap_or(0.0) / all } else { 0.0 };
    let cut_in_force = o.timeout_in_force.filter(|t| !t.is_zero());
    let timeout_share = if cut_in_force.is_some() { share_of("timeout") } else { 0.0 };
    let throttled_share =
        if timeout_share < 1.0 { (share_of("429") / (1.0 - timeout_share)).min(1.0) } else { 0.0 };
    let mut rng = SimRng::seeded(seed);
    let mut queue: EventQueue<Event> = EventQueue::with_capacity(1024);
    let gap = if rate > 0.0 { 1.0 / rate } else { span };
    for call in 0..total {
        queue.schedule(from_secs_f64(call as f64 * gap), Event::Start { call });
    }
    let mut calls = vec![Call { previous: side.policy.base_delay(), ..Call::default() }; total];
    let mut permits: Vec<Option<retryscope::breaker::BreakerPermit>> = Vec::with_capacity(total);
    let (mut sent, mut answered) = (0u64, Vec::with_capacity(total));
    let deadline = [side.policy.deadline(), caller].into_iter().flatten().min().map(nanos);
    let timeout = side.policy.attempt_timeout().map(nanos);
    let step = o.timeline_step.max(1.0);
    let hedge = side.hedge.filter(|h| h.max_copies > 1);
    while let Some((now, event)) = queue.pop() {
        clock.advance_to(now);
        let (call, attempt, copy) = match event {
            Event::Start { call } => {
                calls[call].started = now;
                if let Some(b) = &budget {
                    b.request_started();
                }
                queue.schedule(now, Event::Send { call, attempt: 1 });
                continue;
            }
            Event::Send { call, attempt } => (call, attempt, false),
            Event::Hedge { call, attempt } => (call, attempt, true),
            Event::Done { call, attempt, send, ok, throttled } => {
                if let Some(permit) = permits.get_mut(send).and_then(Option::take) {
                    if ok { permit.success() } else { permit.failure() }
                }
                if let Some(b) = &budget {
                    if attempt > 1 {
                        b.retry_finished(RetryCause::Transient, ok);
                    } else {
                        b.attempt_finished(ok);
                    }
                }
                let c = &mut calls[call];
                c.out = c.out.saturating_sub(1);
                if c.over || c.attempt != attempt {
                    continue;
                }
                if ok {
                    c.over = true;
                    c.ok = true;
                    answered.push((now - c.started) as f64 / 1e9);
                    continue;
                }
                // A hedged attempt fails when its last copy out fails.
                if c.out > 0 {
                    continue;
                }
                let cause = if throttled { RetryCause::Throttled } else { RetryCause::Transient };
                if attempt >= side.policy.max_attempts()
                    || budget.as_ref().is_some_and(|b| !b.try_acquire_retry(cause))
                {
                    c.over = true;
                    continue;
                }
                let wait = side.policy.delay_after(cause, attempt - 1, c.previous, rng.jitter());
                c.previous = wait;
                // The engine gives up when the next wait cannot fit in the deadline.
                if deadline.is_some_and(|d| now + nanos(wait) >= c.started + d) {
                    c.over = true;
                    continue;
                }
                queue.schedule(now + nanos(wait), Event::Send { call, attempt: attempt + 1 });
                continue;
            }
        };
        let c = &mut calls[call];
        if copy && (c.over || c.attempt != attempt || c.out == 0) {
            continue; // the attempt was answered or is over: no copy
        }
        if !copy {
            (c.attempt, c.copies) = (attempt, 0);
        }
        let permit = match &breaker {
            Some(br) => match br.try_acquire() {
                Ok(permit) => Some(permit),
                // Refused: not sent; a refused first copy ends the attempt.
                Err(_) if c.out == 0 => {
                    c.over = true;
                    continue;
                }
                Err(_) => continue,
            },
            None => None,
        };
        let send = permits.len();
        permits.push(permit);
        sent += 1;
        (c.sent, c.copies, c.out) = (c.sent + 1, c.copies + 1, c.out + 1);
        // The timeline's point i, at i steps from the range's start, is the
        // ratio of the minute before it: the moment is the next point's.
        let i = ((now as f64 / 1e9) / step).ceil() as usize;
        let p = o.timeline.get(i).copied().unwrap_or(0.0);
        let (u, v, w) = (rng.random::<f64>(), rng.random::<f64>(), rng.random::<f64>());
        let fails = u < p * (1.0 - timeout_share);
        let slow = !fails && u < p;
        let throttled = fails && v < throttled_share;
        let took = match cut_in_force {
            Some(t) if slow => nanos(t) + from_secs_f64(t.as_secs_f64() * v),
            _ => from_secs_f64(latency(&q, w)),
        };
        let left = deadline.map(|d| (c.started + d).saturating_sub(now));
        let cut = [timeout, left].into_iter().flatten().min();
        let (took, ok, throttled) = match cut {
            Some(cut) if took > cut => (cut, false, false),
            _ => (took, !fails, throttled),
        };
        queue.schedule(now + took, Event::Done { call, attempt, send, ok, throttled });
        if let Some(h) = hedge
            && c.copies < h.max_copies
        {
            queue.schedule(now + nanos(h.delay), Event::Hedge { call, attempt });
        }
    }
    answered.sort_by(f64::total_cmp);
    let p99 = answered.get(((answered.len() as f64 * 0.99).ceil() as usize).saturating_sub(1)).copied();
    let n = total as u64;
    let share = |a: f64| if n == 0 { 0.0 } else { a / n as f64 };
    let outcomes: Vec<(f64, bool, u32)> =
        calls.iter().map(|c| (c.started as f64 / 1e9, c.ok, c.sent)).collect();
    Ok(Replayed {
        calls: n,
        answered: share(answered.len() as f64),
        p99: p99.unwrap_or(0.0),
        amplification: share(sent as f64),
        recovery: super::recovery::recovery(o, &outcomes),
        timeline: super::recovery::timeline(&outcomes, step),
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
            hedge: None,
        }
    }

    /// The side a file's settings give, the guards it does not write left as `base` has them.
    pub fn from_settings(s: &retryscope_config::DependencySettings, base: &Side) -> Self {
        // A guard the file writes is the file's, `{ enabled = false }` (None) included.
        let sets = s.sets();
        Self {
            policy: s.policy(),
            budget: if sets.budget { s.budget() } else { base.budget },
            breaker: if sets.breaker { s.breaker() } else { base.breaker },
            hedge: s.hedge().or(base.hedge),
        }
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

/// A time to recover as a table and a comment show it.
pub fn recovered(r: &Replayed) -> String {
    match &r.recovery {
        None => "-".to_owned(),
        Some(Recovery { seconds: Some(s), .. }) => format!("{s:.0} s"),
        Some(Recovery { seconds: None, .. }) => "never".to_owned(),
    }
}

impl Compared {
    /// The comment line the file carries.
    pub fn line(&self) -> String {
        let side = |r: &Replayed| {
            format!(
                "answered {:.2} %, p99 {:.0} ms, {:.2} attempts a call, recovered in {}",
                r.answered * 100.0,
                r.p99 * 1000.0,
                r.amplification,
                recovered(r)
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

/// The replays side by side, one row per dependency (`-`: no outage recorded;
/// `never`: not recovered by the range's end).
pub fn table(rows: &[Compared]) -> String {
    let mut out = format!(
        "{:<28} {:>7} {:>9} {:>9} {:>8} {:>8} {:>6} {:>6} {:>7} {:>7}  {}\n",
        "replayed",
        "calls",
        "answered",
        "(advice)",
        "p99 ms",
        "(advice)",
        "load",
        "(adv.)",
        "recover",
        "(adv.)",
        "verdict"
    );
    for r in rows {
        let (a, b) = (&r.in_force, &r.recommended);
        out.push_str(&format!(
            "{:<28} {:>7} {:>8.2}% {:>8.2}% {:>8.0} {:>8.0} {:>6.2} {:>6.2} {:>7} {:>7}  {}\n",
            r.dependency,
            a.calls,
            a.answered * 100.0,
            b.answered * 100.0,
            a.p99 * 1000.0,
            b.p99 * 1000.0,
            a.amplification,
            b.amplification,
            recovered(a),
            recovered(b),
            if r.withheld { "worse: withheld" } else { "written" }
        ));
    }
    out
}
