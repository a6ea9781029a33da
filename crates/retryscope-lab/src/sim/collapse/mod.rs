//! Metastable collapse of a load-sensitive server, and what cures it.
//!
//! # The model
//!
//! Logical requests arrive as one Poisson process for the whole client fleet:
//! 40 per second, 80 per second for 5 s from t = 20 s, over an 80 s run. The
//! server has no queue but slows down with load: with `n` calls in flight,
//! a call takes `1 s + 10 ms · n`. It is modelled as processor sharing: every
//! call needs one unit of work and all calls in flight progress together at
//! `1 / (1 s + 10 ms · n)` units per second, so a call that arrives while the
//! load holds steady takes exactly `1 s + 10 ms · n`, and a spike slows down
//! the calls already in flight too, as it does on a real server. At 40
//! requests per second that settles near 67 calls in flight and 1.7 s per
//! call; the server's throughput `n / (1 s + 10 ms · n)` can never reach 100
//! calls per second.
//!
//! Clients give each attempt 3 s and make up to 3 tries. A timed-out call is
//! *not* cancelled: the server keeps working on it, though nobody waits for
//! the answer any more. That is what makes the failure metastable: once the
//! spike has pushed latency past the timeout, every request times out three
//! times, 40 requests per second become 120 calls per second, more than the
//! server can ever finish, so latency keeps growing after the spike is over.
//!
//! Goodput counts requests answered within their client's timeout, per second
//! of virtual time.
//!
//! | strategy | retry after a timeout |
//! |---|---|
//! | `none` | at once |
//! | `backoff` | after a full-jitter backoff from the engine's [`Policy`] |
//! | `budget` | after the same backoff, if the engine's default [`RetryBudget`] (one per dependency, shared by the fleet, on virtual time) grants it |
//!
//! The backoff (base 200 ms, cap 5 s, the engine's interactive preset) is a
//! parameter this simulator adds: the description fixes only the timeout and
//! the number of tries. Note that backoff delays retries but does not remove
//! any: in the collapsed state every request still makes three calls, so
//! backoff alone cannot bring the offered work back under capacity. The budget
//! can: it caps retries at 10 % of requests plus 10 per second.

mod report;

pub use report::{Phase, phase, report};

use super::events::{EventQueue, NANOS_PER_SEC, Nanos, VirtualClock, from_secs_f64, nanos};
use super::server::{LoadSensitiveServer, NextFinish};
use super::throttles::Unlimited;
use super::{CommonArgs, SimError, derive_seed};
use clap::{Args, ValueEnum};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand_distr::{Distribution, Exp};
use retryscope::budget::{Budget, RetryCause};
use retryscope::{Jitter, JitterRng, Policy, RetryBudget};
use serde::Serialize;
use std::time::Duration;

/// The backoff base of the `backoff` and `budget` strategies.
pub const BACKOFF_BASE: Duration = Duration::from_millis(200);
/// The backoff cap of the `backoff` and `budget` strategies.
pub const BACKOFF_CAP: Duration = Duration::from_secs(5);

/// `retryscope simulate collapse`.
#[derive(Debug, Clone, Args)]
pub struct CollapseArgs {
    /// Logical requests per second outside the spike (Poisson, whole fleet).
    #[arg(long, default_value_t = 40.0)]
    pub rate: f64,
    /// Logical requests per second during the spike.
    #[arg(long, default_value_t = 80.0)]
    pub spike_rate: f64,
    /// When the spike starts, in seconds.
    #[arg(long, default_value_t = 20)]
    pub spike_start: u32,
    /// How long the spike lasts, in seconds.
    #[arg(long, default_value_t = 5)]
    pub spike_secs: u32,
    /// Length of the run, in seconds.
    #[arg(long, default_value_t = 80)]
    pub duration: u32,
    /// Strategies to compare (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub strategies: Vec<CollapseStrategy>,
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// What a client does after a timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CollapseStrategy {
    /// Retry at once.
    None,
    /// Retry after a full-jitter backoff.
    Backoff,
    /// Retry after a full-jitter backoff, within the engine's retry budget.
    Budget,
}

impl CollapseStrategy {
    /// Every strategy.
    pub const ALL: [Self; 3] = [Self::None, Self::Backoff, Self::Budget];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Backoff => "backoff",
            Self::Budget => "budget",
        }
    }
}

/// The server and client constants of the model.
#[derive(Debug, Clone, Copy)]
pub struct CollapseModel {
    /// Latency of a call on an idle server.
    pub base_latency: Duration,
    /// Extra latency per call in flight.
    pub per_call: Duration,
    /// How long a client waits for one attempt.
    pub timeout: Duration,
    /// Attempts per logical request, counting the first.
    pub tries: u8,
}

impl Default for CollapseModel {
    fn default() -> Self {
        Self {
            base_latency: Duration::from_secs(1),
            per_call: Duration::from_millis(10),
            timeout: Duration::from_secs(3),
            tries: 3,
        }
    }
}

/// One experiment: a strategy under the load profile.
#[derive(Debug, Clone, Copy)]
pub struct CollapseConfig {
    /// The retry strategy.
    pub strategy: CollapseStrategy,
    /// Requests per second outside the spike.
    pub rate: f64,
    /// Requests per second during the spike.
    pub spike_rate: f64,
    /// Spike start, in seconds.
    pub spike_start: u32,
    /// Spike length, in seconds.
    pub spike_secs: u32,
    /// Run length, in seconds.
    pub duration: u32,
    /// Server and client constants.
    pub model: CollapseModel,
    /// The user's seed.
    pub seed: u64,
}

impl CollapseConfig {
    /// The default experiment for `strategy`.
    pub fn new(strategy: CollapseStrategy, seed: u64) -> Self {
        Self {
            strategy,
            rate: 40.0,
            spike_rate: 80.0,
            spike_start: 20,
            spike_secs: 5,
            duration: 80,
            model: CollapseModel::default(),
            seed,
        }
    }

    /// The arrival rate at virtual time `t`.
    fn rate_at(&self, t: Nanos) -> f64 {
        let (start, end) = self.spike();
        if (start..end).contains(&t) { self.spike_rate } else { self.rate }
    }

    /// The spike's start and end in virtual time.
    fn spike(&self) -> (Nanos, Nanos) {
        let start = u64::from(self.spike_start) * NANOS_PER_SEC;
        (start, start + u64::from(self.spike_secs) * NANOS_PER_SEC)
    }
}

/// One second of one strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollapseRow {
    /// The strategy's name.
    pub strategy: &'static str,
    /// The second (from `t` to `t + 1`).
    pub t: u32,
    /// Logical requests that arrived.
    pub offered: u64,
    /// Requests answered within their client's timeout.
    pub goodput: u64,
    /// Retries sent.
    pub retries: u64,
}

/// A logical request's progress.
#[derive(Debug, Clone, Copy)]
struct Request {
    /// The attempt in progress (1-based).
    attempt: u8,
    /// Answered in time, or given up.
    finished: bool,
}

/// One attempt on the server.
#[derive(Debug, Clone, Copy)]
struct Call {
    request: u32,
    attempt: u8,
    /// When it was sent (it reaches the server at once).
    sent: Nanos,
}

/// An event in the experiment.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// A new logical request arrives.
    Arrival,
    /// An attempt of `request` reaches the server.
    Send { request: u32 },
    /// The server's next call may be finished (if `generation` is current).
    Finish { generation: u64 },
    /// The client stops waiting for an attempt.
    Timeout { request: u32, attempt: u8 },
}

/// Runs one experiment: one row per second.
///
/// # Errors
///
/// [`SimError`] for settings out of range.
pub fn simulate(config: &CollapseConfig) -> Result<Vec<CollapseRow>, SimError> {
    validate(config)?;
    let mut run = Run::new(config)?;
    run.execute();
    Ok(run.rows())
}

/// One experiment in progress.
struct Run {
    config: CollapseConfig,
    end: Nanos,
    policy: Option<Policy>,
    throttle: Box<dyn Budget>,
    clock: VirtualClock,
    queue: EventQueue<Event>,
    requests: Vec<Request>,
    server: LoadSensitiveServer<Call>,
    /// Drives arrivals only, so every strategy sees the same offered load.
    arrivals: SmallRng,
    /// Drives backoff.
    jitter: JitterRng,
    offered: Vec<u64>,
    goodput: Vec<u64>,
    retries: Vec<u64>,
}

impl Run {
    fn new(config: &CollapseConfig) -> Result<Self, SimError> {
        let clock = VirtualClock::new();
        let engine = |e: &dyn std::fmt::Display| SimError::new(e.to_string());
        let throttle: Box<dyn Budget> = match config.strategy {
            CollapseStrategy::Budget => {
                Box::new(RetryBudget::builder().clock(clock.handle()).build().map_err(|e| engine(&e))?)
            }
            _ => Box::new(Unlimited),
        };
        let policy = match config.strategy {
            CollapseStrategy::None => None,
            _ => Some(
                Policy::builder()
                    .max_attempts(u32::from(config.model.tries))
                    .base_delay(BACKOFF_BASE)
                    .max_delay(BACKOFF_CAP)
                    .jitter(Jitter::Full)
                    .no_deadline()
                    .build()
                    .map_err(|e| engine(&e))?,
            ),
        };
        let seconds = usize::try_from(config.duration).unwrap_or(0);
        Ok(Self {
            config: *config,
            end: u64::from(config.duration) * NANOS_PER_SEC,
            policy,
            throttle,
            clock,
            queue: EventQueue::with_capacity(1024),
            requests: Vec::new(),
            server: LoadSensitiveServer::new(config.model.base_latency, config.model.per_call),
            arrivals: SmallRng::seed_from_u64(derive_seed(config.seed, &[1])),
            jitter: JitterRng::seeded(derive_seed(config.seed, &[2, config.strategy as u64])),
            offered: vec![0; seconds],
            goodput: vec![0; seconds],
            retries: vec![0; seconds],
        })
    }

    fn execute(&mut self) {
        self.schedule_arrival();
        while let Some((now, event)) = self.queue.pop() {
            if now >= self.end {
                break;
            }
            self.clock.advance_to(now);
            match event {
                Event::Arrival => self.arrive(),
                Event::Send { request } => self.send(request),
                Event::Finish { generation } => self.finish(generation),
                Event::Timeout { request, attempt } => self.timeout(request, attempt),
            }
        }
    }

    /// The second `t` falls in.
    fn second(&self) -> usize {
        usize::try_from(self.queue.now() / NANOS_PER_SEC).unwrap_or(usize::MAX)
    }

    /// Schedules the next arrival of the piecewise-constant Poisson process:
    /// a gap that crosses a rate change restarts at the change (the process is
    /// memoryless, so this is exact).
    fn schedule_arrival(&mut self) {
        let mut from = self.queue.now();
        loop {
            let rate = self.config.rate_at(from);
            // Rates are validated positive and finite.
            let gap = Exp::new(rate).map_or(u64::MAX, |d| from_secs_f64(d.sample(&mut self.arrivals)));
            let next = from.saturating_add(gap);
            let boundary = self.next_rate_change(from);
            if next < boundary || boundary == Nanos::MAX {
                self.queue.schedule(next, Event::Arrival);
                return;
            }
            from = boundary;
        }
    }

    /// The first rate change strictly after `t`, or `Nanos::MAX`.
    fn next_rate_change(&self, t: Nanos) -> Nanos {
        let (start, end) = self.config.spike();
        [start, end].into_iter().find(|&b| b > t).unwrap_or(Nanos::MAX)
    }

    fn arrive(&mut self) {
        let second = self.second();
        self.offered[second] += 1;
        self.throttle.request_started();
        let request = u32::try_from(self.requests.len()).unwrap_or(u32::MAX);
        self.requests.push(Request { attempt: 1, finished: false });
        self.send(request);
        self.schedule_arrival();
    }

    /// An attempt reaches the server; the client starts its timer.
    fn send(&mut self, request: u32) {
        let attempt = self.requests[request as usize].attempt;
        let now = self.queue.now();
        let next = self.server.admit(now, Call { request, attempt, sent: now });
        self.schedule_finish(next);
        self.queue.schedule_in(nanos(self.config.model.timeout), Event::Timeout { request, attempt });
    }

    fn schedule_finish(&mut self, next: NextFinish) {
        self.queue.schedule(next.at, Event::Finish { generation: next.generation });
    }

    /// The server may have finished a call: answer it if its client still waits.
    fn finish(&mut self, generation: u64) {
        let Some((call, next)) = self.server.finish(self.queue.now(), generation) else { return };
        if let Some(next) = next {
            self.schedule_finish(next);
        }
        self.answer(call);
    }

    fn answer(&mut self, Call { request, attempt, sent }: Call) {
        let state = &mut self.requests[request as usize];
        // Only the attempt the client is still waiting for counts; the server
        // did the work for the others in vain.
        let waited = self.queue.now() - sent <= nanos(self.config.model.timeout);
        if state.finished || state.attempt != attempt || !waited {
            return;
        }
        state.finished = true;
        self.throttle.attempt_finished(true);
        let second = self.second();
        self.goodput[second] += 1;
    }

    fn timeout(&mut self, request: u32, attempt: u8) {
        let state = self.requests[request as usize];
        if state.finished || state.attempt != attempt {
            return;
        }
        self.throttle.attempt_finished(false);
        if attempt >= self.config.model.tries || !self.throttle.try_acquire_retry(RetryCause::Transient) {
            self.requests[request as usize].finished = true;
            return;
        }
        self.requests[request as usize].attempt = attempt + 1;
        let second = self.second();
        self.retries[second] += 1;
        let wait = match &self.policy {
            // Full jitter does not depend on the previous delay; the base stands in.
            Some(policy) => nanos(policy.delay(u32::from(attempt - 1), BACKOFF_BASE, &mut self.jitter)),
            None => 0,
        };
        self.queue.schedule_in(wait, Event::Send { request });
    }

    fn rows(&self) -> Vec<CollapseRow> {
        (0..self.config.duration)
            .zip(self.offered.iter().zip(&self.goodput).zip(&self.retries))
            .map(|(t, ((&offered, &goodput), &retries))| CollapseRow {
                strategy: self.config.strategy.name(),
                t,
                offered,
                goodput,
                retries,
            })
            .collect()
    }
}

fn validate(config: &CollapseConfig) -> Result<(), SimError> {
    for (flag, rate) in [("--rate", config.rate), ("--spike-rate", config.spike_rate)] {
        if !(rate > 0.0 && rate <= 1e5) {
            return Err(SimError::new(format!("{flag} must be above 0 and at most 1e5, got {rate}")));
        }
    }
    if !(1..=86_400).contains(&config.duration) {
        return Err(SimError::new(format!("--duration must be within 1..=86400, got {}", config.duration)));
    }
    Ok(())
}
