//! `retryscope simulate`: deterministic simulations in virtual time that
//! reproduce published retry experiments.
//!
//! Every experiment runs on one discrete-event queue ([`events`]) in virtual
//! time, draws every random number from generators seeded from `--seed`, and
//! drives the engine's own code — [`Policy::delay`](retryscope::Policy::delay)
//! for backoff and jitter, [`RetryBudget`](retryscope::RetryBudget) and
//! [`TokenBucket`](retryscope::TokenBucket) on a
//! [`ManualClock`](retryscope::clock::ManualClock) for throttling — so the same
//! seed always prints byte-identical output, and what is measured is what the
//! library does.
//!
//! - [`herd`]: "Exponential Backoff And Jitter" (Marc Brooker, AWS
//!   Architecture Blog, 2015) — contending optimistic-concurrency writers.
//! - [`amplify`]: "Fixing retries with token buckets and circuit breakers"
//!   (Marc Brooker, 2022) — how much extra load each retry strategy puts on a
//!   failing server.
//! - [`collapse`]: a load-sensitive server tipped into metastable failure by a
//!   spike, with and without backoff and a retry budget.
//! - [`metastable`]: a published metastable retry case — one of two
//!   servers down for 5 s, naive retries overloaded long after — with the
//!   retry budget, the SRE book's adaptive throttle and an AIMD concurrency
//!   limit.
//! - [`layers`]: retries multiplying down a call chain (Google SRE book,
//!   "Handling Overload"), and retrying at one layer only.
//! - [`told`]: the herd's "server-told" scenario — clients one server told the
//!   same `Retry-After` at the same moment, waiting exactly the hint or as the
//!   engine's [`Hint::wait`](retryscope::Hint::wait) decides.

pub mod amplify;
pub mod collapse;
pub mod events;
pub mod herd;
pub mod layers;
pub mod metastable;
pub mod output;
pub mod rng;
pub mod server;
pub mod throttles;
pub mod told;

use clap::{Args, Subcommand, ValueEnum};
use std::fmt;
use std::path::PathBuf;

/// The seed used when `--seed` is not given.
pub const DEFAULT_SEED: u64 = 42;

/// `retryscope simulate`: pick an experiment.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The experiment to run.
    #[command(subcommand)]
    pub experiment: Experiment,
}

/// The simulated experiments.
#[derive(Debug, Subcommand)]
pub enum Experiment {
    /// Contending writers with every backoff flavour ("Exponential Backoff And Jitter", AWS, 2015).
    Herd(herd::HerdArgs),
    /// Load amplification of retry strategies against a failing server (Brooker, 2022).
    Amplify(amplify::AmplifyArgs),
    /// Metastable collapse of a load-sensitive server after a spike, and its cure.
    Collapse(collapse::CollapseArgs),
    /// One of two servers down for 5 s: naive retries stay overloaded after it, throttled clients recover.
    Metastable(metastable::MetastableArgs),
    /// Retries multiplying down a call chain, and retrying at one layer only (SRE book).
    Layers(layers::LayersArgs),
    /// Clients told the same Retry-After at once: exactly as told, or spread by the engine's hint rule.
    Told(told::ToldArgs),
}

/// Flags every experiment shares.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Seed of every random number drawn: the same seed prints the same bytes.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// How to print the results.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write a chart of the results to this SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// An aligned, human-readable table.
    Table,
    /// A JSON array of row objects.
    Json,
}

/// Why a simulation could not run or its results could not be written: a
/// setting out of range, or what failed, with the failure as its
/// [`source`](std::error::Error::source).
#[derive(Debug, Clone)]
pub struct SimError {
    message: String,
    // Shared so that the error stays `Clone`.
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl SimError {
    /// An error with this message and nothing underneath.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), source: None }
    }

    /// What failed (`message`), caused by `source`.
    pub fn caused(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self { message: message.into(), source: Some(std::sync::Arc::from(source.into())) }
    }
}

/// Equal when the messages are; sources are not compared (errors have no equality).
impl PartialEq for SimError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl Eq for SimError {}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Runs the chosen experiment and prints its results to stdout.
///
/// # Errors
///
/// [`SimError`] for settings out of range, or when the chart or the output
/// cannot be written.
pub fn run(args: &SimulateArgs) -> Result<(), SimError> {
    let report = match &args.experiment {
        Experiment::Herd(a) => herd::report(a)?,
        Experiment::Amplify(a) => amplify::report(a)?,
        Experiment::Collapse(a) => collapse::report(a)?,
        Experiment::Metastable(a) => metastable::report(a)?,
        Experiment::Layers(a) => layers::report(a)?,
        Experiment::Told(a) => told::report(a)?,
    };
    output::print(&report)
}

/// Derives an independent seed for one run from the user's seed and the run's
/// coordinates (SplitMix64 finaliser), so each run's randomness depends only on
/// what it simulates, not on which other runs were asked for or in what order.
pub fn derive_seed(seed: u64, coordinates: &[u64]) -> u64 {
    coordinates.iter().fold(splitmix(seed), |acc, &c| splitmix(acc ^ splitmix(c)))
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
