//! Retry amplification across the layers of a call chain (Google SRE book,
//! "Handling Overload": retry at one layer only).
//!
//! # The model
//!
//! A user request enters layer 1; layer *i* calls layer *i* + 1, down to the
//! bottom service (layer *depth* + 1), which fails each call independently with
//! probability `p`. Only the bottom fails; every layer above answers with what
//! its own call downstream returned. Each of the `depth` calling layers may make
//! up to `attempts` attempts per call it serves.
//!
//! | strategy | who retries |
//! |---|---|
//! | `every-layer` | every layer, up to `attempts` times: the default of most stacks |
//! | `one-layer` | only the layer right above the failing service; when its retries run out it answers "already retried" and no layer above retries that answer (retryscope's `retry_at_one_layer`) |
//!
//! The table shows, per user request, how many calls each layer receives: the
//! simulated mean over `--requests` seeded user requests, and the closed form.
//! With `every-layer`, a call that layer *i* makes fails with probability
//! `f_i`, where `f_depth = p` and `f_i = f_(i+1)^attempts`; it takes
//! `1 + f_i + … + f_i^(attempts-1)` attempts on average, and the bottom receives
//! the product of those over the layers — `attempts^depth` when the bottom is
//! down. With `one-layer`, the bottom receives `1 + p + … + p^(attempts-1)` and
//! every other layer one call, at any depth.

use super::output::{Report, Table};
use super::rng::SimRng;
use super::{CommonArgs, SimError, derive_seed};
use clap::{Args, ValueEnum};
use rand::RngExt;
use serde::Serialize;

/// The deepest chain accepted.
pub const MAX_DEPTH: u32 = 8;
/// The most attempts per call accepted.
pub const MAX_ATTEMPTS: u32 = 10;
/// The most calls one user request may cause at the bottom (`attempts^depth`),
/// so that a simulation always ends quickly.
pub const MAX_CALLS_PER_REQUEST: u64 = 1_000_000;
/// The most user requests accepted.
pub const MAX_REQUESTS: u32 = 1_000_000;

/// `retryscope simulate layers`.
#[derive(Debug, Clone, Args)]
pub struct LayersArgs {
    /// Calling layers above the failing service.
    #[arg(long, default_value_t = 3)]
    pub depth: u32,
    /// Attempts each layer may make per call it serves, counting the first.
    #[arg(long, default_value_t = 4)]
    pub attempts: u32,
    /// Probability that the bottom service fails a call.
    #[arg(long, default_value_t = 1.0)]
    pub failure_rate: f64,
    /// Simulated user requests.
    #[arg(long, default_value_t = 10_000)]
    pub requests: u32,
    /// Strategies to compare (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub strategies: Vec<LayersStrategy>,
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Which layers retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LayersStrategy {
    /// Every layer retries.
    EveryLayer,
    /// Only the layer above the failing service retries.
    OneLayer,
}

impl LayersStrategy {
    /// Every strategy.
    pub const ALL: [Self; 2] = [Self::EveryLayer, Self::OneLayer];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::EveryLayer => "every-layer",
            Self::OneLayer => "one-layer",
        }
    }

    /// Attempts layer `layer` (1-based) of a `depth`-deep chain makes per call.
    fn attempts_at(self, layer: u32, depth: u32, attempts: u32) -> u32 {
        match self {
            Self::EveryLayer => attempts,
            Self::OneLayer if layer == depth => attempts,
            Self::OneLayer => 1,
        }
    }
}

/// One chain to simulate.
#[derive(Debug, Clone, Copy)]
pub struct Chain {
    /// Calling layers above the failing service.
    pub depth: u32,
    /// Attempts per call, counting the first.
    pub attempts: u32,
    /// Probability that the bottom fails a call.
    pub failure_rate: f64,
    /// Who retries.
    pub strategy: LayersStrategy,
}

impl Chain {
    /// Checks the ranges, so that a simulation always ends quickly.
    ///
    /// # Errors
    ///
    /// [`SimError`] naming the setting out of range.
    pub fn validate(&self) -> Result<(), SimError> {
        if !(1..=MAX_DEPTH).contains(&self.depth) {
            return Err(SimError::new(format!("--depth must be 1..={MAX_DEPTH}, not {}", self.depth)));
        }
        if !(1..=MAX_ATTEMPTS).contains(&self.attempts) {
            return Err(SimError::new(format!(
                "--attempts must be 1..={MAX_ATTEMPTS}, not {}",
                self.attempts
            )));
        }
        if !(0.0..=1.0).contains(&self.failure_rate) {
            return Err(SimError::new(format!("--failure-rate must be 0..=1, not {}", self.failure_rate)));
        }
        let worst = u64::from(self.attempts).checked_pow(self.depth).unwrap_or(u64::MAX);
        if worst > MAX_CALLS_PER_REQUEST {
            return Err(SimError::new(format!(
                "--attempts {} at --depth {} can make {worst} calls per user request; at most {MAX_CALLS_PER_REQUEST}",
                self.attempts, self.depth
            )));
        }
        Ok(())
    }

    /// Calls each layer receives per user request, from the closed form: index
    /// 0 is layer 1 (always 1), the last is the bottom service.
    pub fn expected(&self) -> Vec<f64> {
        let depth = self.depth as usize;
        // failure[i]: probability that a call made by layer i+1 fails.
        let mut failure = vec![self.failure_rate; depth];
        for i in (0..depth.saturating_sub(1)).rev() {
            let below = self.strategy.attempts_at(i as u32 + 2, self.depth, self.attempts);
            // An "already retried" answer is not retried: under one-layer, the
            // layers above pass on the failure of the one that retried.
            failure[i] = failure[i + 1].powi(below as i32);
        }
        let mut calls = vec![1.0];
        for (i, &f) in failure.iter().enumerate() {
            let attempts = self.strategy.attempts_at(i as u32 + 1, self.depth, self.attempts);
            let per_call: f64 = (0..attempts).map(|k| f.powi(k as i32)).sum();
            let received = calls[i] * per_call;
            calls.push(received);
        }
        calls
    }

    /// Calls each layer received over `requests` user requests, simulated with
    /// a generator seeded from `seed`.
    pub fn simulate(&self, requests: u32, seed: u64) -> Vec<u64> {
        let mut run =
            Run { chain: *self, rng: SimRng::seeded(seed), received: vec![0; self.depth as usize + 1] };
        for _ in 0..requests {
            run.serve(1);
        }
        run.received
    }
}

/// One simulation in progress.
struct Run {
    chain: Chain,
    rng: SimRng,
    received: Vec<u64>,
}

impl Run {
    /// Layer `layer` serves one call; whether it succeeded.
    fn serve(&mut self, layer: u32) -> bool {
        self.received[layer as usize - 1] += 1;
        if layer > self.chain.depth {
            return self.rng.random::<f64>() >= self.chain.failure_rate;
        }
        let attempts = self.chain.strategy.attempts_at(layer, self.chain.depth, self.chain.attempts);
        (0..attempts).any(|_| self.serve(layer + 1))
    }
}

/// One row: a layer of one strategy's chain.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayersRow {
    /// The strategy's name.
    pub strategy: &'static str,
    /// Calling layers above the failing service.
    pub depth: u32,
    /// Attempts per call.
    pub attempts: u32,
    /// Probability that the bottom fails a call.
    pub failure_rate: f64,
    /// The layer, 1 = the one users call; `depth + 1` = the failing service.
    pub layer: u32,
    /// Calls the layer received per user request, simulated.
    pub calls_per_request: f64,
    /// The same from the closed form.
    pub expected: f64,
}

/// Runs the experiment for every strategy asked for.
///
/// # Errors
///
/// [`SimError`] for settings out of range.
pub fn rows(args: &LayersArgs) -> Result<Vec<LayersRow>, SimError> {
    if !(1..=MAX_REQUESTS).contains(&args.requests) {
        return Err(SimError::new(format!("--requests must be 1..={MAX_REQUESTS}, not {}", args.requests)));
    }
    let strategies =
        if args.strategies.is_empty() { LayersStrategy::ALL.to_vec() } else { args.strategies.clone() };
    let mut rows = Vec::new();
    for strategy in strategies {
        let chain =
            Chain { depth: args.depth, attempts: args.attempts, failure_rate: args.failure_rate, strategy };
        chain.validate()?;
        let seed = derive_seed(
            args.common.seed,
            &[strategy as u64, u64::from(args.depth), u64::from(args.attempts)],
        );
        let received = chain.simulate(args.requests, seed);
        for ((layer, calls), expected) in (1..).zip(received).zip(chain.expected()) {
            rows.push(LayersRow {
                strategy: strategy.name(),
                depth: args.depth,
                attempts: args.attempts,
                failure_rate: args.failure_rate,
                layer,
                calls_per_request: calls as f64 / f64::from(args.requests),
                expected,
            });
        }
    }
    Ok(rows)
}

/// The table and JSON for `retryscope simulate layers`.
///
/// # Errors
///
/// [`SimError`] for settings out of range.
pub fn report(args: &LayersArgs) -> Result<Report, SimError> {
    let rows = rows(args)?;
    let mut table =
        Table::new(&["strategy", "depth", "attempts", "failure_rate", "layer", "calls/request", "expected"]);
    for row in &rows {
        let layer = if row.layer == row.depth + 1 {
            format!("{} (bottom)", row.layer)
        } else {
            row.layer.to_string()
        };
        table.row(vec![
            row.strategy.to_owned(),
            row.depth.to_string(),
            row.attempts.to_string(),
            format!("{:.2}", row.failure_rate),
            layer,
            format!("{:.2}", row.calls_per_request),
            format!("{:.2}", row.expected),
        ]);
    }
    Report::new(args.common.format, table.render(), &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(depth: u32, attempts: u32, failure_rate: f64, strategy: LayersStrategy) -> Chain {
        Chain { depth, attempts, failure_rate, strategy }
    }

    #[test]
    fn every_layer_multiplies_retries_when_the_bottom_is_down() {
        for (depth, bottom) in [(1, 4), (2, 16), (3, 64), (4, 256)] {
            let c = chain(depth, 4, 1.0, LayersStrategy::EveryLayer);
            assert_eq!(c.simulate(100, 1).last().copied(), Some(100 * bottom), "depth {depth}");
            assert_eq!(c.expected().last().copied(), Some(bottom as f64));
        }
    }

    #[test]
    fn one_layer_sends_the_bottom_one_layers_worth_at_any_depth() {
        for depth in 1..=4 {
            let c = chain(depth, 4, 1.0, LayersStrategy::OneLayer);
            let received = c.simulate(100, 1);
            assert_eq!(received.last().copied(), Some(400), "depth {depth}");
            assert!(received[..received.len() - 1].iter().all(|&calls| calls == 100), "{received:?}");
        }
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        assert!(chain(0, 4, 1.0, LayersStrategy::EveryLayer).validate().is_err());
        assert!(chain(3, 0, 1.0, LayersStrategy::EveryLayer).validate().is_err());
        assert!(chain(3, 4, 1.5, LayersStrategy::EveryLayer).validate().is_err());
        assert!(chain(8, 10, 1.0, LayersStrategy::EveryLayer).validate().is_err(), "10^8 calls per request");
        assert!(chain(6, 10, 1.0, LayersStrategy::EveryLayer).validate().is_ok());
    }
}
