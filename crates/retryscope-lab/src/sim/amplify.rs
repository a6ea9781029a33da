//! Load amplification by retries, after "Fixing retries with token buckets and
//! circuit breakers" (Marc Brooker, 2022).
//!
//! # The model
//!
//! Open-loop clients (100 by default) each start logical requests as a Poisson
//! process (10 per second) for 10 s, then stop starting new ones and let the
//! requests in progress drain. Every network hop takes an exponentially
//! distributed time with mean 10 ms. The server fails each call independently
//! with probability `p`, whatever the load: the question is only how much
//! extra work each strategy sends to a server that is failing.
//!
//! Every client has its own throttle, driven through the engine's
//! [`Budget`] trait exactly as the engine's retry loop drives it: a request
//! starts (`request_started`), every attempt ends (`attempt_finished`), and a
//! retry goes out only if the policy has attempts left *and*
//! `try_acquire_retry` grants it.
//!
//! | strategy | retries | throttle |
//! |---|---|---|
//! | `none` | 0 | — |
//! | `retries3` | up to 3 | none ([`Unlimited`]) |
//! | `bucket` | up to 3 | the post's token bucket ([`AdaptiveBucket`]) |
//! | `breaker` | up to 3 | the post's retry breaker ([`FailureRatioBreaker`]) |
//! | `grpc` | up to 3 | the engine's [`TokenBucket`], max 10 tokens, ratio 0.1 |
//! | `aws` | up to 3 | the AWS SDK standard-mode quota ([`RetryQuota::aws_standard`]) |
//! | `budget` | up to 3 | the engine's default [`RetryBudget`] on virtual time |
//!
//! Retries wait a full-jitter backoff from the engine's [`Policy`]
//! (base 10 ms, cap 1 s). The post's comparison is about how many calls each
//! strategy makes, which backoff does not change when failures are
//! independent of load; backoff only matters here for the time-windowed
//! `budget`, and real clients back off, so they do here.
//!
//! Amplification = calls the server saw / first tries; success rate =
//! logical requests that eventually succeeded / logical requests.

use super::events::{EventQueue, Nanos, VirtualClock, from_millis_f64, from_secs_f64, nanos};
use super::output::{Panel, Report, Series, Table, write_svg};
use super::rng::SimRng;
use super::throttles::{AdaptiveBucket, FailureRatioBreaker, Unlimited};
use super::{CommonArgs, SimError, derive_seed};
use clap::{Args, ValueEnum};
use rand::RngExt;
use rand_distr::{Distribution, Exp};
use retryscope::budget::RetryQuota;
use retryscope::budget::{Budget, RetryCause};
use retryscope::clock::ManualClock;
use retryscope::{Jitter, Policy, RetryBudget, TokenBucket};
use serde::Serialize;
use std::time::Duration;

/// The retrying strategies' backoff base.
pub const BACKOFF_BASE: Duration = Duration::from_millis(10);
/// The retrying strategies' backoff cap.
pub const BACKOFF_CAP: Duration = Duration::from_secs(1);
/// Mean network hop, in milliseconds.
pub const HOP_MEAN_MS: f64 = 10.0;
/// Attempts allowed to retrying strategies (3 retries).
pub const MAX_ATTEMPTS: u8 = 4;
/// The most clients accepted on the command line.
pub const MAX_CLIENTS: u32 = 100_000;

/// `retryscope simulate amplify`.
#[derive(Debug, Clone, Args)]
pub struct AmplifyArgs {
    /// Open-loop clients, each with its own throttle.
    #[arg(long, default_value_t = 100)]
    pub clients: u32,
    /// Logical requests per second each client starts (Poisson).
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// Seconds during which clients start requests (then they drain).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Server failure probabilities to simulate, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,0.05,0.1,0.2,0.5")]
    pub failure_rates: Vec<f64>,
    /// Strategies to compare (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub strategies: Vec<AmplifyStrategy>,
    /// Shared flags.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// What a client does after a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AmplifyStrategy {
    /// Never retry.
    None,
    /// Up to 3 retries, unthrottled.
    #[value(name = "retries3")]
    Retries3,
    /// Up to 3 retries while the post's per-client token bucket allows.
    Bucket,
    /// Up to 3 retries while the client's failure ratio is at most 10 %.
    Breaker,
    /// Up to 3 retries under gRPC retry throttling (the engine's TokenBucket).
    Grpc,
    /// Up to 3 retries under the AWS SDK standard-mode retry quota.
    Aws,
    /// Up to 3 retries under the engine's default RetryBudget.
    Budget,
}

impl AmplifyStrategy {
    /// Every strategy.
    pub const ALL: [Self; 7] =
        [Self::None, Self::Retries3, Self::Bucket, Self::Breaker, Self::Grpc, Self::Aws, Self::Budget];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Retries3 => "retries3",
            Self::Bucket => "bucket",
            Self::Breaker => "breaker",
            Self::Grpc => "grpc",
            Self::Aws => "aws",
            Self::Budget => "budget",
        }
    }

    /// Attempts allowed per logical request, counting the first.
    pub fn max_attempts(self) -> u8 {
        if self == Self::None { 1 } else { MAX_ATTEMPTS }
    }

    /// A fresh per-client throttle; `clock` follows virtual time.
    ///
    /// # Errors
    ///
    /// [`SimError`] if the engine refuses the settings (it does not: they are
    /// constants within its ranges).
    pub fn throttle(self, clock: &ManualClock) -> Result<Box<dyn Budget>, SimError> {
        let engine = |e: retryscope::SettingError| SimError::new(e.to_string());
        Ok(match self {
            Self::None | Self::Retries3 => Box::new(Unlimited),
            Self::Bucket => Box::new(AdaptiveBucket::new()),
            Self::Breaker => Box::new(FailureRatioBreaker::new()),
            Self::Grpc => {
                Box::new(TokenBucket::builder().max_tokens(10).token_ratio(0.1).build().map_err(engine)?)
            }
            Self::Aws => Box::new(RetryQuota::aws_standard()),
            Self::Budget => Box::new(RetryBudget::builder().clock(clock.clone()).build().map_err(engine)?),
        })
    }
}

/// The backoff every retrying strategy uses.
///
/// # Errors
///
/// Never in practice: the settings are valid constants.
pub fn backoff_policy() -> Result<Policy, SimError> {
    Policy::builder()
        .max_attempts(u32::from(MAX_ATTEMPTS))
        .base_delay(BACKOFF_BASE)
        .max_delay(BACKOFF_CAP)
        .jitter(Jitter::Full)
        .no_deadline()
        .build()
        .map_err(|e| SimError::new(e.to_string()))
}

/// One experiment: a strategy at a failure rate.
#[derive(Debug, Clone, Copy)]
pub struct AmplifyConfig {
    /// The retry strategy.
    pub strategy: AmplifyStrategy,
    /// Probability that the server fails a call.
    pub failure_rate: f64,
    /// Open-loop clients.
    pub clients: u32,
    /// Logical requests per second per client.
    pub rate: f64,
    /// Seconds during which requests start.
    pub duration: f64,
    /// The user's seed.
    pub seed: u64,
}

impl AmplifyConfig {
    /// The experiment with the post's load: 100 clients at 10 requests per
    /// second for 10 s.
    pub fn new(strategy: AmplifyStrategy, failure_rate: f64, seed: u64) -> Self {
        Self { strategy, failure_rate, clients: 100, rate: 10.0, duration: 10.0, seed }
    }
}

/// One result row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AmplifyRow {
    /// The strategy's name.
    pub strategy: &'static str,
    /// Probability that the server fails a call.
    pub failure_rate: f64,
    /// Logical requests that succeeded / logical requests.
    pub success_rate: f64,
    /// Calls / first tries.
    pub amplification: f64,
}

/// A row plus the counts behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct AmplifyOutcome {
    /// The ratios.
    pub row: AmplifyRow,
    /// Logical requests (= first tries).
    pub requests: u64,
    /// Calls the server saw (the simulated attempts).
    pub calls: u64,
    /// Logical requests that succeeded.
    pub succeeded: u64,
}

/// An event in the experiment.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// A client starts a logical request.
    Start { client: u32 },
    /// An attempt reaches the server.
    Call { client: u32, attempt: u8 },
    /// The server's answer reaches the client.
    Answer { client: u32, attempt: u8, ok: bool },
}

/// Runs one experiment.
///
/// # Errors
///
/// [`SimError`] for settings out of range.
pub fn simulate(config: &AmplifyConfig) -> Result<AmplifyOutcome, SimError> {
    validate_config(config)?;
    let mut run = Run::new(config)?;
    run.execute();
    let (requests, calls, succeeded) = (run.requests, run.calls, run.succeeded);
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let row = AmplifyRow {
        strategy: config.strategy.name(),
        failure_rate: config.failure_rate,
        success_rate: ratio(succeeded, requests),
        amplification: ratio(calls, requests),
    };
    Ok(AmplifyOutcome { row, requests, calls, succeeded })
}

/// One experiment in progress.
struct Run {
    failure_rate: f64,
    end_of_arrivals: Nanos,
    max_attempts: u8,
    policy: Policy,
    throttles: Vec<Box<dyn Budget>>,
    clock: VirtualClock,
    queue: EventQueue<Event>,
    rng: SimRng,
    hop: Exp<f64>,
    gap: Exp<f64>,
    requests: u64,
    calls: u64,
    succeeded: u64,
}

impl Run {
    fn new(config: &AmplifyConfig) -> Result<Self, SimError> {
        let clock = VirtualClock::new();
        let throttles = (0..config.clients)
            .map(|_| config.strategy.throttle(&clock.handle()))
            .collect::<Result<_, _>>()?;
        let exp = |rate: f64| Exp::new(rate).map_err(|e| SimError::new(format!("bad rate {rate}: {e}")));
        Ok(Self {
            failure_rate: config.failure_rate,
            end_of_arrivals: from_secs_f64(config.duration),
            max_attempts: config.strategy.max_attempts(),
            policy: backoff_policy()?,
            throttles,
            clock,
            queue: EventQueue::with_capacity(usize::try_from(config.clients).unwrap_or(0) * 2),
            rng: SimRng::seeded(derive_seed(config.seed, &[config.failure_rate.to_bits()])),
            hop: exp(1.0 / HOP_MEAN_MS)?,
            gap: exp(config.rate)?,
            requests: 0,
            calls: 0,
            succeeded: 0,
        })
    }

    fn hop(&mut self) -> Nanos {
        from_millis_f64(self.hop.sample(&mut self.rng))
    }

    /// Schedules `client`'s next logical request, if it falls before the end
    /// of arrivals.
    fn schedule_start(&mut self, client: u32) {
        let at = self.queue.now() + from_secs_f64(self.gap.sample(&mut self.rng));
        if at < self.end_of_arrivals {
            self.queue.schedule(at, Event::Start { client });
        }
    }

    fn execute(&mut self) {
        for client in 0..self.throttles.len() {
            self.schedule_start(u32::try_from(client).unwrap_or(u32::MAX));
        }
        while let Some((now, event)) = self.queue.pop() {
            self.clock.advance_to(now);
            match event {
                Event::Start { client } => self.start(client),
                Event::Call { client, attempt } => self.call(client, attempt),
                Event::Answer { client, attempt, ok } => self.answer(client, attempt, ok),
            }
        }
    }

    fn start(&mut self, client: u32) {
        self.requests += 1;
        self.throttles[client as usize].request_started();
        let hop = self.hop();
        self.queue.schedule_in(hop, Event::Call { client, attempt: 1 });
        self.schedule_start(client);
    }

    fn call(&mut self, client: u32, attempt: u8) {
        self.calls += 1;
        let ok = self.rng.random::<f64>() >= self.failure_rate;
        let hop = self.hop();
        self.queue.schedule_in(hop, Event::Answer { client, attempt, ok });
    }

    fn answer(&mut self, client: u32, attempt: u8, ok: bool) {
        let throttle = &self.throttles[client as usize];
        // As the engine settles an attempt: a retry as the retry its grant paid for.
        if attempt > 1 {
            throttle.retry_finished(RetryCause::Transient, ok);
        } else {
            throttle.attempt_finished(ok);
        }
        if ok {
            self.succeeded += 1;
        } else if attempt < self.max_attempts && throttle.try_acquire_retry(RetryCause::Transient) {
            // Full jitter does not depend on the previous delay; the base stands in.
            let wait = self.policy.delay(u32::from(attempt - 1), BACKOFF_BASE, self.rng.jitter());
            let hop = self.hop();
            self.queue.schedule_in(nanos(wait) + hop, Event::Call { client, attempt: attempt + 1 });
        }
    }
}

fn validate_config(config: &AmplifyConfig) -> Result<(), SimError> {
    let p = config.failure_rate;
    if !(0.0..=1.0).contains(&p) {
        return Err(SimError::new(format!("failure rates must be within 0..=1, got {p}")));
    }
    if !(1..=MAX_CLIENTS).contains(&config.clients) {
        return Err(SimError::new(format!(
            "--clients must be within 1..={MAX_CLIENTS}, got {}",
            config.clients
        )));
    }
    if !(config.rate > 0.0 && config.rate <= 1e6) {
        return Err(SimError::new(format!("--rate must be above 0 and at most 1e6, got {}", config.rate)));
    }
    if !(config.duration > 0.0 && config.duration <= 86_400.0) {
        return Err(SimError::new(format!(
            "--duration must be above 0 and at most 86400, got {}",
            config.duration
        )));
    }
    Ok(())
}

/// Runs the experiments `args` asks for and renders them.
///
/// # Errors
///
/// [`SimError`] for settings out of range or an unwritable chart.
pub fn report(args: &AmplifyArgs) -> Result<Report, SimError> {
    if args.failure_rates.is_empty() {
        return Err(SimError::new("--failure-rates needs at least one rate"));
    }
    let strategies =
        if args.strategies.is_empty() { AmplifyStrategy::ALL.to_vec() } else { args.strategies.clone() };
    let mut rows = Vec::new();
    for &failure_rate in &args.failure_rates {
        for &strategy in &strategies {
            let config = AmplifyConfig {
                strategy,
                failure_rate,
                clients: args.clients,
                rate: args.rate,
                duration: args.duration,
                seed: args.common.seed,
            };
            rows.push(simulate(&config)?.row);
        }
    }
    if let Some(path) = &args.common.svg {
        write_svg(path, &chart(&rows, &strategies))?;
    }
    Report::new(args.common.format, table(&rows), &rows)
}

fn table(rows: &[AmplifyRow]) -> String {
    let mut table = Table::new(&["strategy", "failure_rate", "success_rate", "amplification"]);
    for r in rows {
        table.row(vec![
            r.strategy.to_owned(),
            format!("{:.2}", r.failure_rate),
            format!("{:.4}", r.success_rate),
            format!("{:.4}", r.amplification),
        ]);
    }
    table.render()
}

/// Amplification and success rate against the failure rate, per strategy.
fn chart(rows: &[AmplifyRow], strategies: &[AmplifyStrategy]) -> Vec<Panel> {
    let series = |value: fn(&AmplifyRow) -> f64| {
        let names = strategies.iter().map(|s| s.name());
        Series::per_strategy(names, rows, |r| r.strategy, |r| (r.failure_rate, value(r)))
    };
    vec![
        Panel {
            title: "Load amplification".into(),
            x_label: "server failure rate".into(),
            y_label: "calls / first tries".into(),
            series: series(|r| r.amplification),
        },
        Panel {
            title: "Client success rate".into(),
            x_label: "server failure rate".into(),
            y_label: "succeeded / requests".into(),
            series: series(|r| r.success_rate),
        },
    ]
}
