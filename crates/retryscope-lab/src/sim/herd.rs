//! The thundering herd of optimistic-concurrency writers, after "Exponential
//! Backoff And Jitter" (Marc Brooker, AWS Architecture Blog, 2015).
//!
//! # The model
//!
//! It follows the simulator published with the post. `N` clients start at
//! t = 0 and each wants to update one database row exactly once:
//!
//! 1. it reads the row's version (the read reaches the server after one hop,
//!    the reply returns one hop later);
//! 2. it writes conditionally on that version; the server accepts the write
//!    only if the version is unchanged, and bumps it;
//! 3. after a failed write its attempt counter `n` goes 1, 2, … and its next
//!    read reaches the server one hop plus `backoff(n)` after the reply.
//!
//! Every hop takes |Normal(10 ms, sd 2 ms)|. The server is single-threaded and
//! handles messages in arrival order, so a read sees every write that arrived
//! before it. Backoff: base 5 ms, cap 2 s, multiplier 2, `backoff(n)` drawn by
//! the engine's [`Policy::delay`] with `retry = n` (so the first backoff is
//! around `base · 2`, as in the post), and decorrelated jitter starts from
//! `prev = base`. `none` retries right after the failed write's reply.
//!
//! "calls" are writes (the work the contended row sees) and "time" is when the
//! trial's last message is processed; both are averaged over the trials.
//!
//! One write per round always wins, so every strategy terminates; a safety
//! bound on attempts per client (far above what any strategy needs) still
//! guarantees it, and any client that hits it is reported.
//!
//! Clients that a server told the same `Retry-After` at once are the herd's
//! other shape; [`told`](super::told) simulates them (`simulate told`).

use super::events::{EventQueue, Nanos, from_millis_f64, nanos, to_millis};
use super::output::{Panel, Report, Series, Table, write_svg};
use super::rng::SimRng;
use super::{CommonArgs, SimError, derive_seed};
use clap::{Args, ValueEnum};
use rand_distr::{Distribution, Normal};
use retryscope::{Jitter, Policy};
use serde::Serialize;
use std::time::Duration;

/// The base delay of the post's backoff.
pub const BASE: Duration = Duration::from_millis(5);
/// The cap of the post's backoff.
pub const CAP: Duration = Duration::from_millis(2_000);
/// Mean network hop, in milliseconds.
pub const HOP_MEAN_MS: f64 = 10.0;
/// Standard deviation of a network hop, in milliseconds.
pub const HOP_SD_MS: f64 = 2.0;
/// Attempts per client after which it gives up: a guard, far above need (with
/// `none`, the worst case, a client makes at most `clients` attempts).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 100_000;
/// The most clients accepted on the command line.
pub const MAX_CLIENTS: u32 = 100_000;

/// `retryscope simulate herd`.
#[derive(Debug, Clone, Args)]
pub struct HerdArgs {
    /// Contending clients; a comma-separated list runs each count.
    #[arg(long, value_delimiter = ',', default_value = "100")]
    pub clients: Vec<u32>,
    /// Trials averaged per strategy and client count.
    #[arg(long, default_value_t = 100)]
    pub trials: u32,
    /// Strategies to compare (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub strategies: Vec<HerdStrategy>,
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// How a client waits after a failed write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HerdStrategy {
    /// Retry at once.
    None,
    /// Capped exponential backoff, no jitter.
    Expo,
    /// Half the exponential delay plus a uniform share of the other half.
    Equal,
    /// Uniform between zero and the exponential delay.
    Full,
    /// Uniform between the base and three times the previous delay, capped.
    Decorrelated,
}

impl HerdStrategy {
    /// Every strategy, in the order the post introduces them.
    pub const ALL: [Self; 5] = [Self::None, Self::Expo, Self::Equal, Self::Full, Self::Decorrelated];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Expo => "expo",
            Self::Equal => "equal",
            Self::Full => "full",
            Self::Decorrelated => "decorrelated",
        }
    }

    /// The engine policy computing this strategy's delays; `None` for no wait.
    pub fn policy(self) -> Option<Policy> {
        let jitter = match self {
            Self::None => return None,
            Self::Expo => Jitter::None,
            Self::Equal => Jitter::Equal,
            Self::Full => Jitter::Full,
            Self::Decorrelated => Jitter::Decorrelated,
        };
        let policy = Policy::builder()
            .base_delay(BASE)
            .max_delay(CAP)
            .multiplier(2.0)
            .jitter(jitter)
            .no_deadline()
            .build();
        // Constant, valid settings: `build` cannot refuse them.
        policy.ok()
    }
}

/// One experiment: a strategy at a client count.
#[derive(Debug, Clone, Copy)]
pub struct HerdConfig {
    /// The backoff strategy.
    pub strategy: HerdStrategy,
    /// Contending clients.
    pub clients: u32,
    /// Trials averaged.
    pub trials: u32,
    /// The user's seed.
    pub seed: u64,
    /// The safety bound on attempts per client.
    pub max_attempts: u32,
}

/// One result row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HerdRow {
    /// The strategy's name.
    pub strategy: &'static str,
    /// Contending clients.
    pub clients: u32,
    /// Writes per trial, averaged.
    pub calls: f64,
    /// Time of the last message per trial, in milliseconds, averaged.
    pub time_ms: f64,
}

/// A row plus the totals behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct HerdOutcome {
    /// The averaged results.
    pub row: HerdRow,
    /// Writes over all trials (the simulated attempts).
    pub writes: u64,
    /// Clients that hit the safety bound, over all trials (should be 0).
    pub gave_up: u64,
}

/// A message in flight, delivered at its scheduled time.
#[derive(Debug, Clone, Copy)]
enum Message {
    /// A read reaches the server.
    Read { client: u32 },
    /// The version read reaches the client.
    ReadReply { client: u32, version: u32 },
    /// A conditional write reaches the server.
    Write { client: u32, version: u32 },
    /// The write's outcome reaches the client.
    WriteReply { client: u32, ok: bool },
}

/// A client's backoff state.
#[derive(Debug, Clone, Copy)]
struct Client {
    /// Failed writes so far.
    attempt: u32,
    /// The previous backoff (the base before the first), for decorrelated jitter.
    previous: Duration,
}

/// Runs every trial of one experiment.
pub fn simulate(config: &HerdConfig) -> HerdOutcome {
    let mut sim = Trial::new(config);
    let (mut writes, mut gave_up, mut total_time) = (0_u64, 0_u64, 0_u64);
    for trial in 0..config.trials {
        let mut rng =
            SimRng::seeded(derive_seed(config.seed, &[u64::from(config.clients), u64::from(trial)]));
        let result = sim.run(&mut rng);
        writes += result.writes;
        gave_up += result.gave_up;
        total_time += result.end;
    }
    let trials = f64::from(config.trials.max(1));
    let row = HerdRow {
        strategy: config.strategy.name(),
        clients: config.clients,
        calls: writes as f64 / trials,
        time_ms: to_millis(total_time) / trials,
    };
    HerdOutcome { row, writes, gave_up }
}

/// Totals of one trial.
#[derive(Debug, Clone, Copy)]
struct TrialResult {
    writes: u64,
    gave_up: u64,
    end: Nanos,
}

/// The reusable state of a trial: queue and clients are allocated once per
/// experiment, not per trial.
struct Trial {
    policy: Option<Policy>,
    count: usize,
    clients: Vec<Client>,
    queue: EventQueue<Message>,
    hop: Normal<f64>,
    max_attempts: u32,
}

impl Trial {
    fn new(config: &HerdConfig) -> Self {
        let n = usize::try_from(config.clients).unwrap_or(usize::MAX);
        Self {
            policy: config.strategy.policy(),
            count: n,
            clients: Vec::with_capacity(n),
            queue: EventQueue::with_capacity(n.saturating_mul(2)),
            // Positive constant parameters: `Normal::new` cannot fail.
            hop: Normal::new(HOP_MEAN_MS, HOP_SD_MS).unwrap_or_else(|_| unreachable!()),
            max_attempts: config.max_attempts,
        }
    }

    /// One network hop: |Normal(10 ms, 2 ms)|.
    fn hop(&self, rng: &mut SimRng) -> Nanos {
        from_millis_f64(self.hop.sample(rng).abs())
    }

    fn run(&mut self, rng: &mut SimRng) -> TrialResult {
        let n = self.count;
        self.clients.clear();
        self.clients.resize(n, Client { attempt: 0, previous: BASE });
        self.queue.reset();
        for client in 0..n {
            let at = self.hop(rng);
            self.queue.schedule(at, Message::Read { client: index(client) });
        }
        let (mut version, mut writes, mut gave_up) = (0_u32, 0_u64, 0_u64);
        while let Some((_, message)) = self.queue.pop() {
            let hop = self.hop(rng);
            let next = match message {
                Message::Read { client } => Message::ReadReply { client, version },
                Message::ReadReply { client, version } => Message::Write { client, version },
                Message::Write { client, version: read } => {
                    writes += 1;
                    let ok = read == version;
                    if ok {
                        version += 1;
                    }
                    Message::WriteReply { client, ok }
                }
                Message::WriteReply { ok: true, .. } => continue,
                Message::WriteReply { client, ok: false } => match self.backoff(client, rng) {
                    Some(wait) => {
                        self.queue.schedule_in(hop + wait, Message::Read { client });
                        continue;
                    }
                    None => {
                        gave_up += 1;
                        continue;
                    }
                },
            };
            self.queue.schedule_in(hop, next);
        }
        TrialResult { writes, gave_up, end: self.queue.now() }
    }

    /// Counts a failed write and returns the wait before the next read, or
    /// `None` when the client has hit the safety bound.
    fn backoff(&mut self, client: u32, rng: &mut SimRng) -> Option<Nanos> {
        let state = &mut self.clients[client as usize];
        state.attempt += 1;
        if state.attempt >= self.max_attempts {
            return None;
        }
        let Some(policy) = &self.policy else { return Some(0) };
        let delay = policy.delay(state.attempt, state.previous, rng.jitter());
        state.previous = delay;
        Some(nanos(delay))
    }
}

/// A client index as carried in messages (client counts are bounded by
/// [`MAX_CLIENTS`]).
fn index(client: usize) -> u32 {
    u32::try_from(client).unwrap_or(u32::MAX)
}

/// Runs the experiments `args` asks for and renders them.
///
/// # Errors
///
/// [`SimError`] for settings out of range or an unwritable chart.
pub fn report(args: &HerdArgs) -> Result<Report, SimError> {
    validate(args)?;
    let strategies =
        if args.strategies.is_empty() { HerdStrategy::ALL.to_vec() } else { args.strategies.clone() };
    let mut outcomes = Vec::new();
    for &strategy in &strategies {
        for &clients in &args.clients {
            let config = HerdConfig {
                strategy,
                clients,
                trials: args.trials,
                seed: args.common.seed,
                max_attempts: DEFAULT_MAX_ATTEMPTS,
            };
            outcomes.push(simulate(&config));
        }
    }
    let rows: Vec<HerdRow> = outcomes.iter().map(|o| o.row.clone()).collect();
    let mut report = Report::new(args.common.format, table(&rows), &rows)?;
    report.notes = outcomes
        .iter()
        .filter(|o| o.gave_up > 0)
        .map(|o| {
            format!(
                "{} at {} clients: {} client(s) hit the safety bound of {DEFAULT_MAX_ATTEMPTS} attempts",
                o.row.strategy, o.row.clients, o.gave_up
            )
        })
        .collect();
    if let Some(path) = &args.common.svg {
        write_svg(path, &chart(&rows, &strategies))?;
    }
    Ok(report)
}

fn validate(args: &HerdArgs) -> Result<(), SimError> {
    if args.clients.is_empty() {
        return Err(SimError::new("--clients needs at least one client count"));
    }
    if let Some(bad) = args.clients.iter().find(|c| !(1..=MAX_CLIENTS).contains(*c)) {
        return Err(SimError::new(format!("--clients must be within 1..={MAX_CLIENTS}, got {bad}")));
    }
    if args.trials == 0 {
        return Err(SimError::new("--trials must be at least 1"));
    }
    Ok(())
}

fn table(rows: &[HerdRow]) -> String {
    let mut table = Table::new(&["strategy", "clients", "calls", "time_ms"]);
    for r in rows {
        table.row(vec![
            r.strategy.to_owned(),
            r.clients.to_string(),
            format!("{:.1}", r.calls),
            format!("{:.1}", r.time_ms),
        ]);
    }
    table.render()
}

/// The post's two figures: calls and completion time against client count.
fn chart(rows: &[HerdRow], strategies: &[HerdStrategy]) -> Vec<Panel> {
    let series = |value: fn(&HerdRow) -> f64| {
        let names = strategies.iter().map(|s| s.name());
        Series::per_strategy(names, rows, |r| r.strategy, |r| (f64::from(r.clients), value(r)))
    };
    vec![
        Panel {
            title: "Calls (writes per trial)".into(),
            x_label: "clients".into(),
            y_label: "calls".into(),
            series: series(|r| r.calls),
        },
        Panel {
            title: "Completion time".into(),
            x_label: "clients".into(),
            y_label: "milliseconds".into(),
            series: series(|r| r.time_ms),
        },
    ]
}
