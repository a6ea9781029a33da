//! `retryscope storm`: a live retry storm on loopback, one policy after another.
//!
//! A server with a fixed capacity goes through healthy → outage → recovery while
//! open-loop clients call it through a real reqwest client carrying
//! [`RetryMiddleware`](retryscope_reqwest::RetryMiddleware). The report shows
//! what each policy did to the server: how much load it added, how long the
//! server took to recover, and what the callers saw.
//!
//! With `--layers N`, the struggling server is the bottom of a [`chain`] of
//! services, each calling the next through the middleware: see [`layers`].
//! With `--rate-limited`, the server is a gateway with a quota instead, and the
//! policies compared are ways of pacing: see [`rate_limited`]. With
//! `--slow-tail`, the server is healthy but slow now and then, and the
//! policies compared are ways of hedging: see [`slow_tail`].
//! With `--lost-responses`, the server does its work and then loses a share
//! of the answers, and the policies compared retry a POST with and without an
//! idempotency key: see [`lost_responses`].
//! With `--jobs`, job workers on a real nats-server take jobs whose dependency
//! is down for longer than a naive worker's retry window: see [`jobs`].
//! With `--chaos SPEC`, the server stays healthy and the outage is injected
//! into the clients, below their retries: see [`chaos`].

pub mod chain;
pub mod chaos;
mod chart;
mod error;
pub mod jobs;
pub mod layers;
mod load;
pub mod lost_responses;
pub mod metrics;
mod one_server;
mod own_server;
mod policies;
pub mod rate_limited;
pub mod report;
mod runner;
pub mod server;
pub mod slow_tail;
mod telemetry;

pub use error::StormError;
pub use one_server::run;
pub use policies::StormPolicy;

pub(crate) use error::error;
pub(crate) use runner::{block_on, delta, finish, write_outputs};

use clap::Args;
use clap::builder::ArgPredicate;
use layers::LayerPolicy;
use report::Timeline;
use server::{Model, Overload};
use std::path::PathBuf;
use std::time::Duration;

/// Flags of `retryscope storm`.
#[derive(Debug, Clone, Args)]
pub struct StormArgs {
    /// Concurrent clients (10 by default with --layers, 40 with --rate-limited,
    /// 32 with --slow-tail, 16 with --lost-responses).
    #[arg(
        long,
        default_value_t = 50,
        default_value_if("layers", ArgPredicate::IsPresent, "10"),
        default_value_if("rate_limited", "true", "40"),
        default_value_if("slow_tail", "true", "32"),
        default_value_if("lost_responses", "true", "16")
    )]
    pub clients: u32,
    /// Logical requests per second per client.
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    /// Seconds of load per policy (8 by default with --layers, with
    /// --slow-tail and with --chaos, 10 with --rate-limited).
    #[arg(
        long,
        default_value_t = 16.0,
        default_value_if("layers", ArgPredicate::IsPresent, "8"),
        default_value_if("chaos", ArgPredicate::IsPresent, "8"),
        default_value_if("rate_limited", "true", "10"),
        default_value_if("slow_tail", "true", "8")
    )]
    pub duration: f64,
    /// The outage as START:LENGTH in seconds from the start of each policy's run
    /// (2.5:3 by default with --layers).
    #[arg(
        long,
        default_value = "3:4",
        default_value_if("layers", ArgPredicate::IsPresent, "2.5:3"),
        value_parser = parse_outage
    )]
    pub outage: (f64, f64),
    /// Requests per second the server can serve: with `--server queue`, its
    /// workers are `capacity × service time` (rounded, at least one).
    #[arg(long, default_value_t = DEFAULT_CAPACITY)]
    pub capacity: u32,
    /// What the server does above capacity: `queue` (default) queues and
    /// degrades like a real server, `shed` refuses at once and for free.
    /// The layered storm always sheds.
    #[arg(long, value_enum, default_value_t = ServerKind::Queue)]
    pub server: ServerKind,
    /// Milliseconds of work per request (`--server queue`), failed or served.
    #[arg(long, default_value_t = DEFAULT_SERVICE_MS)]
    pub service_ms: u32,
    /// Requests that may wait for a worker (`--server queue`); more are refused at once.
    #[arg(long, default_value_t = DEFAULT_QUEUE)]
    pub queue: u32,
    /// Policies to compare, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "naive,backoff,full-jitter,budget,breaker,throttled,limited"
    )]
    pub policies: Vec<StormPolicy>,
    /// Run the layered storm instead: a chain of this many services (2 to 4),
    /// each calling the next through the middleware, the last one the
    /// struggling server; compares --layer-policies, not --policies.
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=chain::MAX_SERVICES as i64))]
    pub layers: Option<u32>,
    /// Policies the layered storm compares, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "per-layer,one-layer,budget")]
    pub layer_policies: Vec<LayerPolicy>,
    /// Run the rate-limited storm instead: a gateway with a quota (--quota per
    /// --window) answering 429 with Retry-After beyond it, clients offering
    /// about twice the quota; compares --rate-policies, not --policies. The
    /// other storms' server and outage flags do not apply, and are refused.
    #[arg(
        long,
        conflicts_with_all = [
            "layers", "layer_policies", "policies", "outage", "capacity", "server", "service_ms", "queue"
        ]
    )]
    pub rate_limited: bool,
    /// Requests the gateway of --rate-limited answers 200 per window.
    #[arg(long, default_value_t = 200, requires = "rate_limited")]
    pub quota: u32,
    /// The gateway's fixed quota window, in whole seconds.
    #[arg(long, default_value_t = 1, requires = "rate_limited")]
    pub window: u32,
    /// How the gateway of --rate-limited reports its quota: `draft`
    /// (`RateLimit`, the reset in whole seconds) or `vendor` (`X-RateLimit-*`,
    /// the reset to the millisecond).
    #[arg(long, value_enum, default_value_t = rate_limited::gateway::QuotaHeaders::Draft, requires = "rate_limited")]
    pub quota_headers: rate_limited::gateway::QuotaHeaders,
    /// Seconds a call of --rate-limited may take, attempts and waits
    /// (including time held by a pacer) together.
    #[arg(long, default_value_t = 5.0, requires = "rate_limited")]
    pub deadline: f64,
    /// Policies the rate-limited storm compares, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "per-call,pacer,adaptive", requires = "rate_limited")]
    pub rate_policies: Vec<rate_limited::RatePolicy>,
    /// Run the rate-limited storm as a fleet: this many client processes
    /// (2 to 32) against one gateway and one quota, --clients split among
    /// them; compares --fleet-policies, not --rate-policies.
    #[arg(long, requires = "rate_limited")]
    pub replicas: Option<u32>,
    /// The Redis the fleet's `shared` policy shares its pace through
    /// (default: RETRYSCOPE_REDIS_URL); refused if none answers.
    #[arg(long, requires = "replicas")]
    pub redis: Option<String>,
    /// Policies the fleet storm compares, comma-separated: `local`, `shared`,
    /// `shared-redis-down` (its own redis-server, stopped mid-storm),
    /// `adaptive`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "local,shared,shared-redis-down,adaptive",
        requires = "replicas"
    )]
    pub fleet_policies: Vec<rate_limited::fleet::FleetPolicy>,
    /// Serve the first replica's metrics (its client's and its share's) for
    /// Prometheus on this address; --prometheus serves the gateway's.
    #[arg(long, requires = "replicas")]
    pub replica_prometheus: Option<String>,
    /// Run the slow-tail storm instead: a healthy server that answers a small
    /// share of requests (--slow-share) slowly (--slow-ms), the clients'
    /// calls hedged through the engine; compares --hedge-policies, not
    /// --policies. The other storms' server, outage and policy flags do not
    /// apply, and are refused.
    #[arg(
        long,
        conflicts_with_all = [
            "rate_limited", "layers", "layer_policies", "policies", "outage", "capacity", "server",
            "service_ms", "queue"
        ]
    )]
    pub slow_tail: bool,
    /// Share of the slow-tail server's requests that are slow, drawn per
    /// request (a hedge is slow with the same probability).
    #[arg(long, default_value_t = 0.02, requires = "slow_tail")]
    pub slow_share: f64,
    /// Milliseconds a slow request of --slow-tail takes.
    #[arg(long, default_value_t = 1_000, requires = "slow_tail")]
    pub slow_ms: u32,
    /// The other requests of --slow-tail take between this and twice this,
    /// in milliseconds.
    #[arg(long, default_value_t = 2, requires = "slow_tail")]
    pub fast_ms: u32,
    /// The hedging delay of the `fixed` policy, in milliseconds; the
    /// `percentile` policy's until it has a window of latencies to read.
    #[arg(long, default_value_t = 50, requires = "slow_tail")]
    pub hedge_delay_ms: u32,
    /// The quantile of the `percentile` policy's delay, above 0 and below 1.
    #[arg(long, default_value_t = slow_tail::policies::QUANTILE, requires = "slow_tail")]
    pub hedge_quantile: f64,
    /// Policies the slow-tail storm compares, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "none,fixed,percentile", requires = "slow_tail")]
    pub hedge_policies: Vec<slow_tail::HedgingPolicy>,
    /// Run the lost-responses storm instead: a server that runs every POST,
    /// then loses --loss of its responses (the connection closed, or a 503,
    /// after the work); --operations POSTs, --clients at a time, compared over
    /// --lost-policies. The other storms' load, server and outage flags do not
    /// apply, and are refused.
    #[arg(
        long,
        conflicts_with_all = [
            "layers", "layer_policies", "policies", "outage", "capacity", "server", "service_ms", "queue",
            "rate_limited", "slow_tail", "rate", "duration"
        ]
    )]
    pub lost_responses: bool,
    /// Logical operations (one POST each) per policy of --lost-responses.
    #[arg(long, default_value_t = 400, requires = "lost_responses")]
    pub operations: u32,
    /// The share of responses the server of --lost-responses loses, 0 to 0.6.
    #[arg(long, default_value_t = 0.3, requires = "lost_responses")]
    pub loss: f64,
    /// Policies the lost-responses storm compares, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "no-retry,retry-no-keys,retry-keys",
        requires = "lost_responses"
    )]
    pub lost_policies: Vec<lost_responses::LostPolicy>,
    /// Run the jobs storm instead: `--job-count` jobs on a real nats-server
    /// (`--nats-url`, or one started from PATH), calling a dependency down for
    /// the first `--down` seconds; a naive worker against the retryscope
    /// worker. The other storms' flags do not apply, and are refused.
    #[arg(
        long,
        conflicts_with_all = [
            "layers", "layer_policies", "policies", "outage", "capacity", "server", "service_ms", "queue",
            "rate_limited", "slow_tail", "lost_responses", "rate", "duration"
        ]
    )]
    pub jobs: bool,
    /// Jobs the jobs storm enqueues per worker.
    #[arg(long, default_value_t = 200, requires = "jobs")]
    pub job_count: u32,
    /// Seconds the jobs storm's dependency is down from the start.
    #[arg(long, default_value_t = 3.0, requires = "jobs")]
    pub down: f64,
    /// The nats-server of the jobs storm (default: start one from PATH).
    #[arg(long, requires = "jobs")]
    pub nats_url: Option<String>,
    /// Run the chaos storm instead: the server stays healthy and the outage
    /// is injected into the clients, below their retries, as SPEC says:
    /// fault rules, comma-separated, each `KIND@PERCENT[@DEPENDENCY][/ROUTE]`
    /// with an optional window `:FROM-TO` of each policy's run, e.g.
    /// `503@30%:0s-4s,stall@5%`. Compares --policies. The outage flag and the
    /// other storms' flags do not apply, and are refused.
    #[arg(
        long,
        value_name = "SPEC",
        conflicts_with_all = [
            "layers", "layer_policies", "outage", "rate_limited", "slow_tail", "lost_responses", "jobs"
        ]
    )]
    pub chaos: Option<String>,
    /// A retryscope-config file (`.toml` or `.json`) every policy's client
    /// takes its calls' settings from, as a service built with
    /// `.config(handle)` would: the file's retry policy and retried statuses
    /// replace each policy's, and its budget, breaker and pacer replace the
    /// policy's guards where the file writes them. The file is polled every
    /// 250 ms and reloaded when it changes (a bad rewrite refused, the last
    /// good one kept); `retryscope_config_active` and
    /// `retryscope_config_reloads_total` go to the storm's metrics. A bad
    /// file is refused before the storm starts, with its line and column.
    /// The default storm only: the others refuse it.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = [
            "layers", "layer_policies", "rate_limited", "slow_tail", "lost_responses", "jobs", "chaos"
        ]
    )]
    pub config: Option<PathBuf>,
    /// Seeds the clients' start phases (with --lost-responses, which responses
    /// are lost; with --chaos, which attempts meet a fault).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Where the chart (storm.svg) and the summary (storm.json) go; with
    /// --layers, storm-layers.svg and storm-layers.json; with --chaos,
    /// chaos.svg and chaos.json; with --rate-limited,
    /// storm-rate-limited.svg and storm-rate-limited.json; with --slow-tail,
    /// slow-tail.svg and slow-tail.json; with --lost-responses,
    /// lost-responses.svg and lost-responses.json.
    #[arg(long, default_value = "out/storm")]
    pub out: PathBuf,
    /// Serve the metrics for Prometheus on this address, e.g. 127.0.0.1:9464.
    #[arg(long)]
    pub prometheus: Option<String>,
    /// Keep serving metrics this many seconds after the run (for a last scrape).
    #[arg(long, default_value_t = 0.0)]
    pub linger: f64,
}

/// The server's default capacity, in requests per second.
pub const DEFAULT_CAPACITY: u32 = 750;
/// The default service time of `--server queue`, in milliseconds.
pub const DEFAULT_SERVICE_MS: u32 = 20;
/// The default queue bound of `--server queue`.
pub const DEFAULT_QUEUE: u32 = 3_000;

/// `--server`: the server model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerKind {
    /// Bounded workers and queue, a service time per request: degrades under overload.
    Queue,
    /// Perfect shedding: an instant, free 503 above capacity.
    Shed,
}

fn parse_outage(s: &str) -> Result<(f64, f64), String> {
    let (start, len) = s.split_once(':').ok_or("expected START:LENGTH in seconds, e.g. 3:2")?;
    let number = |v: &str| v.trim().parse::<f64>().map_err(|e| format!("{v:?}: {e}"));
    Ok((number(start)?, number(len)?))
}

impl StormArgs {
    fn validate(&self) -> Result<Timeline, StormError> {
        self.validate_load()?;
        if !(1..=10_000).contains(&self.service_ms) {
            return Err(StormError::new("--service-ms must be between 1 and 10000"));
        }
        if !(1..=100_000).contains(&self.queue) {
            return Err(StormError::new("--queue must be between 1 and 100000"));
        }
        if self.workers() > 10_000 {
            return Err(StormError::new("--capacity × --service-ms gives more than 10000 workers"));
        }
        let (start, len) = self.outage;
        if !(start.is_finite()
            && len.is_finite()
            && start >= 0.0
            && len >= 0.0
            && start + len <= self.duration)
        {
            return Err(StormError::new(format!(
                "--outage {start}:{len} must lie within the {}s run",
                self.duration
            )));
        }
        Ok(Timeline {
            outage_start: Duration::from_secs_f64(start),
            outage_end: Duration::from_secs_f64(start + len),
        })
    }

    /// The checks every storm shares: the clients' load and the linger.
    pub(crate) fn validate_load(&self) -> Result<(), StormError> {
        let positive = |name: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(StormError::new(format!("--{name} must be above zero")))
            }
        };
        positive("duration", self.duration)?;
        positive("rate", self.rate)?;
        if !(0.01..=10_000.0).contains(&self.rate) {
            return Err(StormError::new("--rate must be between 0.01 and 10000 requests per second"));
        }
        positive("clients", f64::from(self.clients))?;
        positive("capacity", f64::from(self.capacity))?;
        if !(self.linger.is_finite() && self.linger >= 0.0 && self.linger <= 3_600.0) {
            return Err(StormError::new("--linger must be between 0 and 3600 seconds"));
        }
        if self.duration > 3_600.0 {
            return Err(StormError::new("--duration is limited to an hour"));
        }
        Ok(())
    }

    /// Workers of `--server queue`: enough to serve `--capacity` per second.
    fn workers(&self) -> u64 {
        (u64::from(self.capacity) * u64::from(self.service_ms)).div_ceil(1_000).max(1)
    }

    /// The single server's model.
    pub fn model(&self) -> Model {
        match self.server {
            ServerKind::Shed => Model::Shed,
            ServerKind::Queue => Model::Queue(Overload {
                workers: u32::try_from(self.workers()).unwrap_or(u32::MAX),
                service: Duration::from_millis(u64::from(self.service_ms)),
                queue: self.queue,
                patience: policies::ATTEMPT_TIMEOUT,
            }),
        }
    }

    /// The storm's header line: the load, the server and the outage.
    pub fn header(&self) -> String {
        let (start, len) = self.outage;
        let load = format!(
            "{} clients × {}/s = {:.0} requests/s",
            self.clients,
            self.rate,
            f64::from(self.clients) * self.rate
        );
        let server = match self.model() {
            Model::Shed => format!("capacity {}/s, perfect shedding (instant 503 above it)", self.capacity),
            Model::Queue(o) => format!(
                "capacity {:.0}/s ({} workers × {} ms), queue ≤ {} ({:.1} s wait when full; callers wait {} s)",
                o.capacity(),
                o.workers,
                o.service.as_millis(),
                o.queue,
                o.full_queue_wait().as_secs_f64(),
                o.patience.as_secs_f64()
            ),
        };
        format!("storm: {load}; server {server}; outage {start}:{len} s of {} s\n", self.duration)
    }
}
