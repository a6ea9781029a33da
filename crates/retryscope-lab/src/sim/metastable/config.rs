//! What a metastable run is given (the command's arguments, the model's
//! constants, the strategies) and what it gives back, a row per second.

use super::*;

/// The throttle's window unless `--throttle-window` says otherwise: the
/// `AdaptiveThrottle`'s own default (its docs' table), the SRE book's two
/// minutes.
pub(super) const THROTTLE_WINDOW: Duration = Duration::from_secs(120);

/// `retryscope simulate metastable`.
#[derive(Debug, Clone, Args)]
pub struct MetastableArgs {
    /// Logical requests per second (Poisson, whole fleet).
    #[arg(long, default_value_t = 70.0)]
    pub rate: f64,
    /// When server 1 crashes, in seconds.
    #[arg(long, default_value_t = 5)]
    pub crash_start: u32,
    /// How long server 1 stays down, in seconds.
    #[arg(long, default_value_t = 5)]
    pub crash_secs: u32,
    /// Length of the run, in seconds.
    #[arg(long, default_value_t = 60)]
    pub duration: u32,
    /// Strategies to compare (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub strategies: Vec<MetastableStrategy>,
    /// The adaptive throttle's window, in seconds (default: the SRE book's two
    /// minutes); only with the `throttled` strategy, refused otherwise.
    #[arg(long)]
    pub throttle_window: Option<u64>,
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// What the clients do about failed attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MetastableStrategy {
    /// Three fixed retries, at once.
    Naive,
    /// The same retries, within the engine's retry budget.
    Budget,
    /// The same retries; every attempt asks the engine's adaptive throttle.
    Throttled,
    /// The same retries; every attempt takes a slot of an AIMD concurrency limit.
    Limited,
}

impl MetastableStrategy {
    /// Every strategy.
    pub const ALL: [Self; 4] = [Self::Naive, Self::Budget, Self::Throttled, Self::Limited];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Naive => "naive",
            Self::Budget => "budget",
            Self::Throttled => "throttled",
            Self::Limited => "limited",
        }
    }
}

/// The case's constants.
#[derive(Debug, Clone, Copy)]
pub struct MetastableModel {
    /// Servers, in round-robin order; server 1 (index 0) crashes.
    pub servers: usize,
    /// Calls a server runs at once.
    pub concurrency: usize,
    /// Mean of the exponential service time.
    pub service_mean: Duration,
    /// How long a client waits for one attempt.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub retries: u8,
}

impl Default for MetastableModel {
    fn default() -> Self {
        Self {
            servers: 2,
            concurrency: 5,
            service_mean: Duration::from_millis(100),
            timeout: Duration::from_secs(1),
            retries: 3,
        }
    }
}

/// One experiment: a strategy through the crash.
#[derive(Debug, Clone, Copy)]
pub struct MetastableConfig {
    /// The retry strategy.
    pub strategy: MetastableStrategy,
    /// Requests per second.
    pub rate: f64,
    /// Crash start, in seconds.
    pub crash_start: u32,
    /// Crash length, in seconds.
    pub crash_secs: u32,
    /// Run length, in seconds.
    pub duration: u32,
    /// The case's constants.
    pub model: MetastableModel,
    /// The adaptive throttle's window.
    pub throttle_window: Duration,
    /// The user's seed.
    pub seed: u64,
}

impl MetastableConfig {
    /// The published case for `strategy`.
    pub fn new(strategy: MetastableStrategy, seed: u64) -> Self {
        Self {
            strategy,
            rate: 70.0,
            crash_start: 5,
            crash_secs: 5,
            duration: 60,
            model: MetastableModel::default(),
            throttle_window: THROTTLE_WINDOW,
            seed,
        }
    }

    /// The end of the crash, in seconds.
    pub fn crash_end(&self) -> u32 {
        self.crash_start.saturating_add(self.crash_secs)
    }
}

/// One second of one strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetastableRow {
    /// The strategy's name.
    pub strategy: &'static str,
    /// The second (from `t` to `t + 1`).
    pub t: u32,
    /// Logical requests that arrived.
    pub offered: u64,
    /// Requests answered within their client's timeout.
    pub goodput: u64,
    /// Attempts sent to a server (first ones and retries).
    pub sent: u64,
    /// Retries sent.
    pub retries: u64,
    /// Attempts the adaptive throttle or the concurrency limit rejected
    /// locally (never sent).
    pub rejected: u64,
    /// Calls waiting in the servers' queues at the end of the second.
    pub queued: u64,
}
