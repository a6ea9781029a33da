//! A published metastable retry case: a short crash of one of two servers
//! leaves naive retries in overload long after it ends.
//!
//! # The model
//!
//! The case of Marc Brooker's stability simulator as the issue tracker states it:
//! logical requests arrive open-loop (one Poisson process, 70 per second) for 60 s.
//! Every attempt goes to the next of two servers in turn (round robin). A server
//! runs 5 calls at once and queues the rest first in, first out, without bound;
//! a call takes an exponentially distributed time of mean 100 ms, so each
//! server does about 50 calls per second and the pair about 100: 70 % busy.
//! Server 1 crashes at 5 s and is back at 10 s: a crash loses the calls it
//! held, and while it is down every attempt sent to it fails at once (a refused
//! connection). A client waits 1 s for an attempt and then gives up on it,
//! but the server is not told: a call queued behind the timeout still takes
//! its turn and its 100 ms, for nobody. That is what can keep the system
//! down after the crash: once queues are longer than a second, every attempt
//! times out, each request makes four attempts, 280 calls per second are
//! offered to a pair that does 100, and the queues only grow.
//!
//! Goodput counts requests answered within their client's timeout, per second
//! of virtual time.
//!
//! | strategy | after a failed attempt (timeout or refused) |
//! |---|---|
//! | `naive` | 3 fixed retries, at once |
//! | `budget` | the same retries, if the engine's default [`RetryBudget`] (one per dependency, shared by the fleet, on virtual time) grants them |
//! | `throttled` | the same retries; and every attempt, first ones included, asks the engine's [`AdaptiveThrottle`] (the SRE book's client-side throttling, K = 2, its two-minute window, on virtual time) and is rejected locally with its probability |
//! | `limited` | the same retries; and every attempt, first ones included, takes a slot of the engine's [`ConcurrencyLimiter`] (AIMD, Netflix's defaults), and is rejected locally when none is free; a timeout or a refusal is a drop, an answer in time a success |
//!
//! The clients share one guard, as a fleet whose guards are shared would; the
//! model's constants are the case's, and nothing else is tuned.

mod config;
mod report;

pub use config::{MetastableArgs, MetastableConfig, MetastableModel, MetastableRow, MetastableStrategy};
pub use report::{RECOVERED_RUN, RECOVERED_SHARE, recovered_at, report};

use super::events::{EventQueue, NANOS_PER_SEC, Nanos, VirtualClock, from_secs_f64, nanos};
use super::{CommonArgs, SimError, derive_seed};
use clap::{Args, ValueEnum};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp};
use retryscope::RetryBudget;
use retryscope::budget::{Budget, RetryCause};
use retryscope::overload::{AdaptiveThrottle, Aimd, ConcurrencyLimiter, LimitPermit, Priority};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// A logical request's progress.
#[derive(Debug, Clone, Copy)]
struct Request {
    /// The attempt in progress (1-based).
    attempt: u8,
    /// Answered in time, or given up.
    finished: bool,
}

/// One attempt on a server.
#[derive(Debug, Clone, Copy)]
struct Call {
    request: u32,
    attempt: u8,
    /// When it was sent (it reaches the server at once).
    sent: Nanos,
}

/// A server that runs `concurrency` calls and queues the rest.
#[derive(Debug)]
struct Server {
    up: bool,
    running: usize,
    queue: VecDeque<Call>,
    /// Bumped by a crash: completions of calls the crash lost are stale.
    epoch: u32,
}

/// An event in the experiment.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// A new logical request arrives.
    Arrival,
    /// An attempt of `request` is sent.
    Send { request: u32 },
    /// A server finished a call.
    Done { server: u8, epoch: u32, call: Call },
    /// The client stops waiting for an attempt.
    Timeout { request: u32, attempt: u8 },
    /// Server 1 crashes.
    Crash,
    /// Server 1 is back.
    Recover,
    /// The end of a second: the queues are sampled.
    Tick,
}

/// The guard in front of the servers.
enum Guard {
    Unlimited,
    Budget(RetryBudget),
    Throttled(AdaptiveThrottle),
    /// The limiter, and the slot each attempt in flight holds.
    Limited(ConcurrencyLimiter, HashMap<(u32, u8), (LimitPermit, Nanos)>),
}

/// Runs one experiment: one row per second.
///
/// # Errors
///
/// [`SimError`] for settings out of range.
pub fn simulate(config: &MetastableConfig) -> Result<Vec<MetastableRow>, SimError> {
    validate(config)?;
    let mut run = Run::new(config)?;
    run.execute();
    Ok(run.rows())
}

/// Per-second counters.
#[derive(Debug, Clone, Copy, Default)]
struct Second {
    offered: u64,
    goodput: u64,
    sent: u64,
    retries: u64,
    rejected: u64,
    queued: u64,
}

/// One experiment in progress.
struct Run {
    config: MetastableConfig,
    end: Nanos,
    guard: Guard,
    clock: VirtualClock,
    queue: EventQueue<Event>,
    requests: Vec<Request>,
    servers: Vec<Server>,
    next_server: usize,
    service: Exp<f64>,
    /// Drives arrivals only, so every strategy sees the same offered load.
    arrivals: SmallRng,
    /// Drives service times.
    work: SmallRng,
    /// Drives the throttle's draws.
    draws: SmallRng,
    seconds: Vec<Second>,
}

impl Run {
    fn new(config: &MetastableConfig) -> Result<Self, SimError> {
        let clock = VirtualClock::new();
        let engine = |e: &dyn std::fmt::Display| SimError::new(e.to_string());
        let guard = match config.strategy {
            MetastableStrategy::Naive => Guard::Unlimited,
            MetastableStrategy::Budget => {
                Guard::Budget(RetryBudget::builder().clock(clock.handle()).build().map_err(|e| engine(&e))?)
            }
            MetastableStrategy::Limited => {
                Guard::Limited(ConcurrencyLimiter::new(Aimd::default()), HashMap::new())
            }
            MetastableStrategy::Throttled => Guard::Throttled(
                AdaptiveThrottle::builder()
                    .window(config.throttle_window)
                    .clock(clock.handle())
                    .build()
                    .map_err(|e| engine(&e))?,
            ),
        };
        let service = Exp::new(1.0 / config.model.service_mean.as_secs_f64())
            .map_err(|e| SimError::new(format!("service time: {e}")))?;
        let servers = (0..config.model.servers)
            .map(|_| Server { up: true, running: 0, queue: VecDeque::new(), epoch: 0 })
            .collect();
        Ok(Self {
            config: *config,
            end: u64::from(config.duration) * NANOS_PER_SEC,
            guard,
            clock,
            queue: EventQueue::with_capacity(4096),
            requests: Vec::new(),
            servers,
            next_server: 0,
            service,
            arrivals: SmallRng::seed_from_u64(derive_seed(config.seed, &[1])),
            work: SmallRng::seed_from_u64(derive_seed(config.seed, &[2])),
            draws: SmallRng::seed_from_u64(derive_seed(config.seed, &[3, config.strategy as u64])),
            seconds: vec![Second::default(); usize::try_from(config.duration).unwrap_or(0)],
        })
    }

    fn execute(&mut self) {
        self.schedule_arrival();
        self.queue.schedule(u64::from(self.config.crash_start) * NANOS_PER_SEC, Event::Crash);
        self.queue.schedule(u64::from(self.config.crash_end()) * NANOS_PER_SEC, Event::Recover);
        for t in 1..=self.config.duration {
            // Just before the second ends, so that the sample lands in it.
            self.queue.schedule(u64::from(t) * NANOS_PER_SEC - 1, Event::Tick);
        }
        while let Some((now, event)) = self.queue.pop() {
            if now >= self.end {
                break;
            }
            self.clock.advance_to(now);
            match event {
                Event::Arrival => self.arrive(),
                Event::Send { request } => self.send(request),
                Event::Done { server, epoch, call } => self.done(usize::from(server), epoch, call),
                Event::Timeout { request, attempt } => self.failed(request, attempt),
                Event::Crash => self.crash(0),
                Event::Recover => self.servers[0].up = true,
                Event::Tick => {
                    let queued = self.servers.iter().map(|s| s.queue.len() as u64).sum();
                    self.now_second().queued = queued;
                }
            }
        }
    }

    fn now_second(&mut self) -> &mut Second {
        let t = usize::try_from(self.queue.now() / NANOS_PER_SEC).unwrap_or(usize::MAX);
        let last = self.seconds.len().saturating_sub(1);
        &mut self.seconds[t.min(last)]
    }

    fn schedule_arrival(&mut self) {
        let gap =
            Exp::new(self.config.rate).map_or(u64::MAX, |d| from_secs_f64(d.sample(&mut self.arrivals)));
        self.queue.schedule_in(gap, Event::Arrival);
    }

    fn arrive(&mut self) {
        self.now_second().offered += 1;
        if let Guard::Budget(budget) = &self.guard {
            budget.request_started();
        }
        let request = u32::try_from(self.requests.len()).unwrap_or(u32::MAX);
        self.requests.push(Request { attempt: 1, finished: false });
        self.send(request);
        self.schedule_arrival();
    }

    /// An attempt: asked of the throttle, then sent to the next server; a
    /// server that is down refuses it at once.
    fn send(&mut self, request: u32) {
        let attempt = self.requests[request as usize].attempt;
        if let Guard::Throttled(throttle) = &self.guard
            && !throttle.admit(self.draws.random::<f64>())
        {
            // A local rejection ends the request: it was never sent.
            self.requests[request as usize].finished = true;
            self.now_second().rejected += 1;
            return;
        }
        if let Guard::Limited(limiter, permits) = &mut self.guard {
            match limiter.try_acquire(Priority::Critical) {
                Some(permit) => {
                    permits.insert((request, attempt), (permit, self.queue.now()));
                }
                None => {
                    self.requests[request as usize].finished = true;
                    self.now_second().rejected += 1;
                    return;
                }
            }
        }
        self.now_second().sent += 1;
        if attempt > 1 {
            self.now_second().retries += 1;
        }
        let index = self.next_server;
        self.next_server = (self.next_server + 1) % self.servers.len();
        if !self.servers[index].up {
            self.failed(request, attempt);
            return;
        }
        let now = self.queue.now();
        let call = Call { request, attempt, sent: now };
        self.queue.schedule_in(nanos(self.config.model.timeout), Event::Timeout { request, attempt });
        if self.servers[index].running < self.config.model.concurrency {
            self.start(index, call);
        } else {
            self.servers[index].queue.push_back(call);
        }
    }

    fn start(&mut self, index: usize, call: Call) {
        let server = &mut self.servers[index];
        server.running += 1;
        let epoch = server.epoch;
        let work = from_secs_f64(self.service.sample(&mut self.work));
        let server = u8::try_from(index).unwrap_or(u8::MAX);
        self.queue.schedule_in(work, Event::Done { server, epoch, call });
    }

    /// A server finished a call — whether or not its client still waits —
    /// and takes the next one from its queue.
    fn done(&mut self, index: usize, epoch: u32, call: Call) {
        if self.servers[index].epoch != epoch {
            return;
        }
        self.servers[index].running -= 1;
        if let Some(next) = self.servers[index].queue.pop_front() {
            self.start(index, next);
        }
        let state = &mut self.requests[call.request as usize];
        let waited = self.queue.now() - call.sent <= nanos(self.config.model.timeout);
        if state.finished || state.attempt != call.attempt || !waited {
            return;
        }
        state.finished = true;
        let rtt = Duration::from_nanos(self.queue.now() - call.sent);
        match &mut self.guard {
            Guard::Budget(budget) => budget.attempt_finished(true),
            Guard::Throttled(throttle) => throttle.accepted(),
            Guard::Limited(_, permits) => {
                if let Some((permit, _)) = permits.remove(&(call.request, call.attempt)) {
                    permit.success(rtt);
                }
            }
            Guard::Unlimited => {}
        }
        self.now_second().goodput += 1;
    }

    /// An attempt timed out or was refused: retry it, if the strategy lets it.
    fn failed(&mut self, request: u32, attempt: u8) {
        let state = self.requests[request as usize];
        if state.finished || state.attempt != attempt {
            return;
        }
        if let Guard::Limited(_, permits) = &mut self.guard
            && let Some((permit, sent)) = permits.remove(&(request, attempt))
        {
            // A refusal (at once) or a timeout.
            permit.dropped(Duration::from_nanos(self.queue.now() - sent));
        }
        let retry = attempt <= self.config.model.retries
            && match &self.guard {
                Guard::Budget(budget) => {
                    budget.attempt_finished(false);
                    budget.try_acquire_retry(RetryCause::Transient)
                }
                Guard::Unlimited | Guard::Throttled(_) | Guard::Limited(..) => true,
            };
        if !retry {
            self.requests[request as usize].finished = true;
            return;
        }
        self.requests[request as usize].attempt = attempt + 1;
        self.queue.schedule_in(0, Event::Send { request });
    }

    /// A crash loses every call the server held; their clients time out.
    fn crash(&mut self, index: usize) {
        let server = &mut self.servers[index];
        server.up = false;
        server.running = 0;
        server.queue.clear();
        server.epoch += 1;
    }

    fn rows(&self) -> Vec<MetastableRow> {
        (0..self.config.duration)
            .zip(&self.seconds)
            .map(|(t, s)| MetastableRow {
                strategy: self.config.strategy.name(),
                t,
                offered: s.offered,
                goodput: s.goodput,
                sent: s.sent,
                retries: s.retries,
                rejected: s.rejected,
                queued: s.queued,
            })
            .collect()
    }
}

fn validate(config: &MetastableConfig) -> Result<(), SimError> {
    if !(config.rate > 0.0 && config.rate <= 1e4) {
        return Err(SimError::new(format!("--rate must be above 0 and at most 1e4, got {}", config.rate)));
    }
    if !(1..=3_600).contains(&config.duration) {
        return Err(SimError::new(format!("--duration must be within 1..=3600, got {}", config.duration)));
    }
    if config.crash_end() > config.duration {
        return Err(SimError::new(format!(
            "the crash ({}..{} s) must end within --duration ({} s)",
            config.crash_start,
            config.crash_end(),
            config.duration
        )));
    }
    Ok(())
}
