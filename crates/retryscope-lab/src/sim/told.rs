//! The herd's "server-told" scenario: many clients one server told the same
//! `Retry-After` at the same moment, and when they come back.
//!
//! # The model
//!
//! `N` clients each get a 429 (or 503) with `Retry-After: d` at t = 0 — one
//! overloaded server answered them all at once — and each sends its retry when
//! its wait is over. A client's *return* is that moment. There is no network in
//! the model: a network adds about the same delay to every client, which moves
//! the spike but does not spread it.
//!
//! | strategy | the wait |
//! |---|---|
//! | `as-told` | exactly `d`: what retryscope did before hints became floors, and what a client that sleeps on the header does |
//! | `retryscope` | what the engine waits: [`Hint::wait`] on `Retry-After: d`, with the first backoff of [`Policy::interactive`] as the computed delay and the longest wait that policy allows right after the failure (its deadline, at most its `max_server_delay`) as the limit |
//!
//! Each client draws from its own generator, seeded from `--seed` and its index
//! (real clients do not share one), so a client's wait does not depend on how
//! many others there are.
//!
//! Per strategy and client count the table gives the earliest and latest
//! return, the spread between them, the mean wait (what spreading costs), and
//! the most returns inside any 10 ms window — the spike the server sees. The
//! chart shows the returns per 10 ms and the clients back so far, over time.

use super::events::{Nanos, nanos, to_millis};
use super::herd::MAX_CLIENTS;
use super::output::{Panel, Report, Series, Table, write_svg};
use super::{CommonArgs, SimError, derive_seed};
use clap::{Args, ValueEnum};
use retryscope::{Hint, JitterRng, Policy};
use serde::Serialize;
use std::time::Duration;

/// The `Retry-After` every client is told when `--retry-after` is not given.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// The width of the window in which returns count as one spike, and of the
/// chart's bins: about the 11.5 ms within which 20 real loopback clients told
/// `Retry-After: 1` all came back when the hint was used exactly (issue 20).
pub const WINDOW: Duration = Duration::from_millis(10);

/// `retryscope simulate told`.
#[derive(Debug, Clone, Args)]
pub struct ToldArgs {
    /// Clients told at once; a comma-separated list runs each count.
    #[arg(long, value_delimiter = ',', default_value = "100")]
    pub clients: Vec<u32>,
    /// The `Retry-After` every client is told: seconds (`1`, `1.5s`) or
    /// milliseconds (`500ms`); below the 15 s that `Policy::interactive()` can
    /// wait right after a failure.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub retry_after: Duration,
    /// Strategies to compare (default: both).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub strategies: Vec<ToldStrategy>,
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// How a client turns the server's hint into a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ToldStrategy {
    /// Wait exactly the hint.
    AsTold,
    /// Wait what the engine's `Hint::wait` decides.
    Retryscope,
}

impl ToldStrategy {
    /// Both strategies: the naive one first, as the baseline.
    pub const ALL: [Self; 2] = [Self::AsTold, Self::Retryscope];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::AsTold => "as-told",
            Self::Retryscope => "retryscope",
        }
    }
}

/// The policy whose backoff and limits the `retryscope` strategy uses: the
/// preset an interactive client (the kind a 429 storm is made of) starts from.
pub fn policy() -> Policy {
    Policy::interactive()
}

/// The longest wait `policy` allows right after a failure at t = 0: what the
/// driver passes to [`Hint::wait`] as its limit (the deadline, at most
/// `max_server_delay`); a longer hint makes the engine give up instead.
pub fn limit(policy: &Policy) -> Duration {
    let server = policy.max_server_delay();
    policy.deadline().map_or(server, |d| d.min(server))
}

/// One experiment: a strategy, a client count and a hint.
#[derive(Debug, Clone, Copy)]
pub struct ToldConfig {
    /// How the hint becomes a wait.
    pub strategy: ToldStrategy,
    /// Clients told at once.
    pub clients: u32,
    /// The `Retry-After` they are told.
    pub retry_after: Duration,
    /// The user's seed.
    pub seed: u64,
}

impl ToldConfig {
    /// The command's defaults (100 clients, `Retry-After: 1 s`) for `strategy`.
    pub fn new(strategy: ToldStrategy, seed: u64) -> Self {
        Self { strategy, clients: 100, retry_after: DEFAULT_RETRY_AFTER, seed }
    }
}

/// One result row; times are milliseconds after the hint was received.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToldRow {
    /// The strategy's name.
    pub strategy: &'static str,
    /// Clients told at once.
    pub clients: u32,
    /// The hint, in milliseconds.
    pub retry_after_ms: f64,
    /// The earliest return.
    pub first_ms: f64,
    /// The latest return.
    pub last_ms: f64,
    /// Latest minus earliest return.
    pub spread_ms: f64,
    /// The mean wait.
    pub mean_ms: f64,
    /// The most returns inside any 10 ms window.
    pub peak_10ms: u32,
}

/// A row plus the returns behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToldOutcome {
    /// The summary.
    pub row: ToldRow,
    /// Every client's return, in nanoseconds, earliest first.
    pub returns: Vec<Nanos>,
    /// Clients whose wait reached the deadline, so that the engine gave up
    /// instead of retrying (0 unless the hint is within a spread of the limit).
    pub gave_up: u32,
}

/// Runs one experiment.
///
/// # Errors
///
/// [`SimError`] if the client count or the hint is out of range.
pub fn simulate(config: &ToldConfig) -> Result<ToldOutcome, SimError> {
    validate_clients(config.clients)?;
    let policy = policy();
    let limit = limit(&policy);
    validate_retry_after(config.retry_after, limit)?;
    let hint = Hint::retry_after(config.retry_after);
    let mut returns = Vec::with_capacity(usize::try_from(config.clients).unwrap_or(0));
    let mut gave_up = 0;
    for client in 0..config.clients {
        let wait = match config.strategy {
            ToldStrategy::AsTold => config.retry_after,
            ToldStrategy::Retryscope => {
                let mut rng = JitterRng::seeded(derive_seed(config.seed, &[u64::from(client)]));
                // The first retry's backoff (retry 0, previous = base), as the
                // driver computes it before looking at the hint.
                let computed = policy.delay(0, policy.base_delay(), &mut rng);
                hint.wait(computed, limit, &mut rng).0
            }
        };
        // The driver gives up on a wait that would end at or past the deadline.
        if wait >= limit {
            gave_up += 1;
            continue;
        }
        returns.push(nanos(wait));
    }
    returns.sort_unstable();
    let row = summarise(config, &returns);
    Ok(ToldOutcome { row, returns, gave_up })
}

fn summarise(config: &ToldConfig, returns: &[Nanos]) -> ToldRow {
    let first = returns.first().copied().unwrap_or(0);
    let last = returns.last().copied().unwrap_or(0);
    let total: u128 = returns.iter().map(|&r| u128::from(r)).sum();
    let mean = if returns.is_empty() { 0.0 } else { total as f64 / returns.len() as f64 };
    ToldRow {
        strategy: config.strategy.name(),
        clients: config.clients,
        retry_after_ms: to_millis(nanos(config.retry_after)),
        first_ms: to_millis(first),
        last_ms: to_millis(last),
        spread_ms: to_millis(last - first),
        mean_ms: mean / 1e6,
        peak_10ms: peak(returns, nanos(WINDOW)),
    }
}

/// The most of the sorted `returns` inside any window `[t, t + width)`; the
/// busiest window can always be taken to start at a return.
pub fn peak(returns: &[Nanos], width: Nanos) -> u32 {
    let mut best = 0;
    let mut end = 0;
    for (start, &t) in returns.iter().enumerate() {
        while end < returns.len() && returns[end] < t.saturating_add(width) {
            end += 1;
        }
        best = best.max(end - start);
    }
    u32::try_from(best).unwrap_or(u32::MAX)
}

/// Parses `--retry-after`: seconds (`1`, `1.5s`) or milliseconds (`500ms`).
///
/// # Errors
///
/// A message for clap if `s` is not a finite, non-negative duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    let (number, scale) = match text.strip_suffix("ms") {
        Some(n) => (n, 1e-3),
        None => (text.strip_suffix('s').unwrap_or(text), 1.0),
    };
    let value: f64 = number.trim().parse().map_err(|_| {
        format!("`{s}` is not a duration: give seconds (`1`, `1.5s`) or milliseconds (`500ms`)")
    })?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("a Retry-After cannot be negative or infinite, got `{s}`"));
    }
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("`{s}` is too long a duration"))
}

fn validate_clients(clients: u32) -> Result<(), SimError> {
    if (1..=MAX_CLIENTS).contains(&clients) {
        Ok(())
    } else {
        Err(SimError::new(format!("--clients must be within 1..={MAX_CLIENTS}, got {clients}")))
    }
}

fn validate_retry_after(retry_after: Duration, limit: Duration) -> Result<(), SimError> {
    // At the limit or above, the engine does not wait at all (it gives up with
    // `HintTooLong` or `DeadlineExceeded`), so there would be no return to show.
    if retry_after < limit {
        Ok(())
    } else {
        Err(SimError::new(format!(
            "--retry-after must be below {limit:?}, the longest wait Policy::interactive() allows \
             after a failure (a longer hint makes it give up), got {retry_after:?}"
        )))
    }
}

/// Runs the experiments `args` asks for and renders them.
///
/// # Errors
///
/// [`SimError`] for settings out of range or an unwritable chart.
pub fn report(args: &ToldArgs) -> Result<Report, SimError> {
    if args.clients.is_empty() {
        return Err(SimError::new("--clients needs at least one client count"));
    }
    let strategies =
        if args.strategies.is_empty() { ToldStrategy::ALL.to_vec() } else { args.strategies.clone() };
    let mut outcomes = Vec::new();
    for &clients in &args.clients {
        for &strategy in &strategies {
            let config =
                ToldConfig { strategy, clients, retry_after: args.retry_after, seed: args.common.seed };
            outcomes.push(simulate(&config)?);
        }
    }
    let rows: Vec<ToldRow> = outcomes.iter().map(|o| o.row.clone()).collect();
    let mut report = Report::new(args.common.format, table(&rows), &rows)?;
    report.notes = outcomes.iter().filter_map(gave_up_note).collect();
    if let Some(path) = &args.common.svg {
        write_svg(path, &chart(&outcomes))?;
    }
    Ok(report)
}

/// Says so when the engine would have given up on some of `outcome`'s clients
/// (their wait reached the deadline), since the table only shows the others.
fn gave_up_note(outcome: &ToldOutcome) -> Option<String> {
    let ToldOutcome { row, gave_up, .. } = outcome;
    (*gave_up > 0).then(|| {
        format!(
            "{} at {} clients: {gave_up} client(s) would have waited until the deadline, so the engine gave up on them",
            row.strategy, row.clients
        )
    })
}

fn table(rows: &[ToldRow]) -> String {
    let mut table = Table::new(&[
        "strategy",
        "clients",
        "retry_after_ms",
        "first_ms",
        "last_ms",
        "spread_ms",
        "mean_ms",
        "peak_10ms",
    ]);
    for r in rows {
        table.row(vec![
            r.strategy.to_owned(),
            r.clients.to_string(),
            format!("{:.1}", r.retry_after_ms),
            format!("{:.1}", r.first_ms),
            format!("{:.1}", r.last_ms),
            format!("{:.1}", r.spread_ms),
            format!("{:.1}", r.mean_ms),
            r.peak_10ms.to_string(),
        ]);
    }
    table.render()
}

/// Returns per 10 ms bin, and clients back so far, per strategy and client
/// count, on one time axis from the first bin any client returns in to the last.
fn chart(outcomes: &[ToldOutcome]) -> Vec<Panel> {
    let width = nanos(WINDOW);
    let returns = outcomes.iter().flat_map(|o| o.returns.iter().copied());
    let (lo, hi) = returns.fold((Nanos::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)));
    if lo > hi {
        return Vec::new();
    }
    // One empty bin either side, so that a one-bin spike is drawn as a peak.
    let first_bin = (lo / width).saturating_sub(1);
    let last_bin = hi / width + 1;
    let name = |o: &ToldOutcome| {
        if outcomes.iter().any(|other| other.row.clients != o.row.clients) {
            format!("{} ({} clients)", o.row.strategy, o.row.clients)
        } else {
            o.row.strategy.to_owned()
        }
    };
    let mut per_bin = Vec::new();
    let mut cumulative = Vec::new();
    for o in outcomes {
        let mut counts = vec![0_u32; usize::try_from(last_bin - first_bin + 1).unwrap_or(0)];
        for &t in &o.returns {
            if let Some(c) = usize::try_from(t / width - first_bin).ok().and_then(|i| counts.get_mut(i)) {
                *c += 1;
            }
        }
        let x = |i: usize| to_millis((first_bin + i as u64) * width);
        per_bin.push(Series {
            name: name(o),
            points: counts.iter().enumerate().map(|(i, &c)| (x(i), f64::from(c))).collect(),
        });
        // Clients back by the end of each bin.
        let mut back = 0_u32;
        let points = counts
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                back += c;
                (x(i + 1), f64::from(back))
            })
            .collect();
        cumulative.push(Series { name: name(o), points });
    }
    vec![
        Panel {
            title: "Returns per 10 ms".into(),
            x_label: "milliseconds after the hint".into(),
            y_label: "clients".into(),
            series: per_bin,
        },
        Panel {
            title: "Clients back".into(),
            x_label: "milliseconds after the hint".into(),
            y_label: "clients".into(),
            series: cumulative,
        },
    ]
}
