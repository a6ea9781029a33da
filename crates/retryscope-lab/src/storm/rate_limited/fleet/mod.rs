//! `retryscope storm --rate-limited --replicas N`: the rate-limited storm as
//! a fleet. N client *processes* (the lab binary run again as hidden
//! `fleet-replica`s, see [`replica`]) call one gateway with one quota, as the
//! replicas of a service spend one API key; each offers its part of the load
//! (`--clients` split among them). The [`FleetPolicy`]s compare how the
//! replicas pace: each alone (`local`), sharing gates and the quota through
//! [`RedisPaceShare`](retryscope_redis::RedisPaceShare) on a real Redis
//! (`shared`: `--redis`, else `RETRYSCOPE_REDIS_URL`, else a `redis-server`
//! the storm starts itself), the same while the storm's own `redis-server` is stopped a
//! third into the load and started again at two thirds (`shared-redis-down`),
//! or each with the adaptive limiter (`adaptive`).
//!
//! The replicas live as long as the storm: each is killed when the storm
//! drops it (any error included), ends by itself when its standard input
//! closes (the storm died, however), and has a deadline of its own. They stay
//! in the storm's process group, so that a Ctrl-C reaches them all.

mod redis_server;
pub mod replica;
mod run;

use crate::storm::rate_limited::chart;
use crate::storm::rate_limited::gateway::{Gateway, Quota};
use crate::storm::rate_limited::report::{self, RateRun, RateSummary, reason};
use crate::storm::server::SLICE;
use crate::storm::telemetry::Telemetry;
use crate::storm::{StormArgs, StormError, error, finish, write_outputs};
use redis_server::{RedisServer, ping};
use replica::ReplicaReport;
use retryscope_otel::IncomingRequests;
use run::run_policy;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::process::Stdio;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The most replicas a fleet storm runs.
pub const MAX_REPLICAS: u32 = 32;
/// The environment variable the Redis URL defaults to.
pub const REDIS_URL_ENV: &str = "RETRYSCOPE_REDIS_URL";
/// How long the replicas have to say `READY`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a Redis has to answer the storm's `PING`.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// How the replicas of the fleet storm pace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetPolicy {
    /// A [`Pacer`](retryscope::Pacer) per process, each learning alone.
    Local,
    /// The same pacers sharing gates and the quota through Redis.
    Shared,
    /// `shared`, on the storm's own `redis-server`, stopped a third into the
    /// load and started again at two thirds: the fallback and the rejoin.
    SharedRedisDown,
    /// An adaptive pacer per process ([`Pacer::adaptive`](retryscope::Pacer::adaptive)).
    Adaptive,
}

impl FleetPolicy {
    /// Every policy, in the order the report shows them.
    pub const ALL: [FleetPolicy; 4] =
        [FleetPolicy::Local, FleetPolicy::Shared, FleetPolicy::SharedRedisDown, FleetPolicy::Adaptive];

    /// The name on the command line and in reports.
    pub const fn name(self) -> &'static str {
        match self {
            FleetPolicy::Local => "local",
            FleetPolicy::Shared => "shared",
            FleetPolicy::SharedRedisDown => "shared-redis-down",
            FleetPolicy::Adaptive => "adaptive",
        }
    }

    /// Whether the replicas share their pace through Redis.
    pub const fn is_shared(self) -> bool {
        matches!(self, FleetPolicy::Shared | FleetPolicy::SharedRedisDown)
    }
}

impl fmt::Display for FleetPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FleetPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<_> = Self::ALL.iter().map(|p| p.name()).collect();
            format!("unknown policy {s:?}; expected one of {}", names.join(", "))
        })
    }
}

/// One row of the fleet report: the gateway's figures as the single-process
/// storm reports them, and the fleet's own.
#[derive(Debug, Clone, Serialize)]
pub struct FleetSummary {
    /// 429s, goodput, latency and failed calls over the whole fleet.
    #[serde(flatten)]
    pub rate: RateSummary,
    /// The replicas.
    pub replicas: u32,
    /// The successful calls of the replica that had the fewest, as a share
    /// of a fair part (all successes / replicas): 1 is perfectly fair.
    pub worst_replica_share: f64,
    /// The share of replica-slices during which the pace was shared
    /// (`retryscope.pace.shared` = 1); `None` for a policy without a share.
    pub shared_share: Option<f64>,
    /// Fallbacks to local pacing, summed over the replicas
    /// (`retryscope.pace.shared.fallbacks`).
    pub fallbacks: u32,
}

/// Everything measured for one policy of the fleet.
#[derive(Debug, Clone, Serialize)]
pub struct FleetRun {
    /// The gateway's counts and the fleet's calls together.
    #[serde(flatten)]
    pub run: RateRun,
    /// Per slice, how many replicas had their pace shared; empty without a share.
    pub shared_replicas: Vec<u32>,
    /// Each replica's successful calls, in the order they were started.
    pub succeeded_per_replica: Vec<u64>,
    /// When the storm stopped its Redis and started it again, in seconds
    /// from the start of the load (`shared-redis-down` only).
    pub redis_down_s: Option<(f64, f64)>,
    #[serde(skip)]
    fallbacks: u32,
}

/// Runs the fleet storm and prints its report.
pub(crate) fn run(args: &StormArgs, replicas: u32) -> Result<Vec<FleetSummary>, StormError> {
    validate(args, replicas)?;
    crate::storm::block_on(storm(args, replicas))
}

fn validate(args: &StormArgs, replicas: u32) -> Result<(), StormError> {
    if !(2..=MAX_REPLICAS).contains(&replicas) {
        return Err(StormError::new(format!("--replicas must be between 2 and {MAX_REPLICAS}")));
    }
    if args.clients < replicas {
        return Err(StormError::new(
            "--clients must be at least --replicas: each replica runs its part of them",
        ));
    }
    if args.fleet_policies.is_empty() {
        return Err(StormError::new("--fleet-policies names no policy"));
    }
    Ok(())
}

/// The Redis of the `shared` policy: `--redis`, else `RETRYSCOPE_REDIS_URL`.
fn redis_url(args: &StormArgs) -> Option<String> {
    args.redis.clone().or_else(|| std::env::var(REDIS_URL_ENV).ok().filter(|url| !url.is_empty()))
}

/// The storm's header line.
pub fn header(args: &StormArgs, replicas: u32) -> String {
    format!(
        "storm --rate-limited --replicas {replicas}: {replicas} client processes, {} clients × {}/s in all \
         ({:.0} requests/s) against one gateway: quota {} requests per fixed {} s window ({:.0}/s); \
         calls bounded by {} s; {} s of load per policy\n",
        args.clients,
        args.rate,
        f64::from(args.clients) * args.rate,
        args.quota,
        args.window,
        f64::from(args.quota) / f64::from(args.window.max(1)),
        args.deadline,
        args.duration
    )
}

async fn storm(args: &StormArgs, replicas: u32) -> Result<Vec<FleetSummary>, StormError> {
    let mut shared_url = redis_url(args);
    // The shared run's Redis when the user named none: the storm's own, for
    // the whole storm (the documented command runs as printed), as
    // `storm --jobs` starts its own nats-server.
    let mut own_shared = None;
    if args.fleet_policies.contains(&FleetPolicy::Shared) {
        // Refused before anything starts: a shared run without a Redis would
        // measure local pacing under the name "shared".
        let url = match shared_url.clone() {
            Some(url) => url,
            None => {
                let own = RedisServer::start(
                    format!(
                        "the shared policy needs a Redis, and neither --redis nor {REDIS_URL_ENV} names one"
                    ),
                    "--redis URL, or leave `shared` out of --fleet-policies",
                )
                .await?;
                eprintln!("storm: no --redis given: started redis-server at {}", own.url());
                own_shared.insert(own).url()
            }
        };
        if !ping(&url, PING_TIMEOUT).await {
            return Err(StormError::new(format!(
                "the shared policy needs a Redis, and none answered at {url}"
            )));
        }
        shared_url = Some(url);
    }
    let telemetry = Telemetry::start(args.prometheus.as_deref())?;
    let quota = Quota { requests: args.quota, window_s: args.window };
    let (load, window) = (Duration::from_secs_f64(args.duration), Duration::from_secs(args.window.into()));
    let mut runs = Vec::new();
    for &policy in &args.fleet_policies {
        eprintln!("storm: rate-limited fleet of {replicas}, {policy} …");
        runs.push(run_policy(args, policy, replicas, quota, shared_url.as_deref(), &telemetry).await?);
    }
    let rows: Vec<FleetSummary> = runs.iter().map(|r| summary(r, replicas, load, window, quota)).collect();
    print!("{}{}", header(args, replicas), table(&rows));
    let json = serde_json::json!({
        "header": header(args, replicas).trim_end(),
        "replicas": replicas,
        "quota": { "requests": quota.requests, "window_s": quota.window_s, "per_second": quota.per_second() },
        "offered_per_s": f64::from(args.clients) * args.rate,
        "deadline_s": args.deadline,
        "target": {
            "policy": FleetPolicy::Shared.name(),
            "max_429_per_1000": report::TARGET_429_PER_1000,
            "min_goodput_share": report::TARGET_GOODPUT_SHARE,
        },
        "summary": rows,
        "runs": runs,
        "slice_ms": SLICE.as_millis() as u64,
    });
    let rate_runs: Vec<RateRun> = runs.iter().map(|r| r.run.clone()).collect();
    let rate_rows: Vec<RateSummary> = rows.iter().map(|r| r.rate.clone()).collect();
    write_outputs(args, "storm-rate-limited-fleet", &json, |svg| {
        chart::write_svg(svg, &rate_runs, &rate_rows, quota.per_second())
    })?;
    finish(args, &telemetry).await;
    drop(own_shared);
    Ok(rows)
}

fn summary(run: &FleetRun, replicas: u32, load: Duration, window: Duration, quota: Quota) -> FleetSummary {
    let rate = run.run.summary(load, window, quota.per_second());
    let total: u64 = run.succeeded_per_replica.iter().sum();
    let fair = total as f64 / f64::from(replicas.max(1));
    let worst = run.succeeded_per_replica.iter().copied().min().unwrap_or(0);
    let slices = run.shared_replicas.len() as f64 * f64::from(replicas);
    let shared: f64 = run.shared_replicas.iter().map(|&n| f64::from(n)).sum();
    FleetSummary {
        rate,
        replicas,
        worst_replica_share: if fair > 0.0 { worst as f64 / fair } else { 0.0 },
        shared_share: (!run.shared_replicas.is_empty() && slices > 0.0).then(|| shared / slices),
        fallbacks: run.fallbacks,
    }
}

/// The fleet report as a text table.
pub fn table(rows: &[FleetSummary]) -> String {
    let mut out = format!(
        "{:<18} {:>12} {:>9} {:>13} {:>9} {:>9} {:>8} {:>10} {:>7}  {}\n",
        "policy",
        "429s / 1000",
        "of quota",
        "worst replica",
        "p99 ok",
        "p99 all",
        "shared",
        "fallbacks",
        "target",
        "failed by reason"
    );
    for r in rows {
        let reasons: Vec<String> = r.rate.failed_by_reason.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!(
            "{:<18} {:>12.1} {:>8.1}% {:>12.1}% {:>9} {:>9} {:>8} {:>10} {:>7}  {}\n",
            r.rate.policy,
            r.rate.per_1000_429,
            r.rate.goodput_share * 100.0,
            r.worst_replica_share * 100.0,
            seconds(r.rate.p99_ok_s),
            seconds(r.rate.p99_all_s),
            r.shared_share.map_or_else(|| "-".to_owned(), |s| format!("{:.0}%", s * 100.0)),
            r.fallbacks,
            if r.rate.meets_target { "met" } else { "missed" },
            if reasons.is_empty() { "-".to_owned() } else { reasons.join(", ") },
        ));
    }
    out
}

fn seconds(s: Option<f64>) -> String {
    s.map_or_else(|| "-".to_owned(), |s| format!("{s:.2} s"))
}

/// The fleet's run: the gateway's counts and the replicas' calls together.
fn merge(
    policy: FleetPolicy,
    gateway: &Gateway,
    reports: Vec<ReplicaReport>,
    redis_down_s: Option<(f64, f64)>,
) -> FleetRun {
    let mut run = RateRun {
        policy: policy.name(),
        server_received: gateway.counters.received(),
        server_served: gateway.counters.served(),
        calls: 0,
        succeeded: 0,
        failed_by_reason: BTreeMap::new(),
        latencies_ok: Vec::new(),
        latencies_failed: Vec::new(),
        allowed_rate: Vec::new(),
    };
    let slices = reports.iter().map(|r| r.shared.len()).max().unwrap_or(0);
    let mut shared_replicas = vec![0; slices];
    let (mut succeeded_per_replica, mut fallbacks) = (Vec::new(), 0);
    for report in reports {
        run.calls += report.calls;
        run.succeeded += report.succeeded;
        for (why, n) in report.failed_by_reason {
            *run.failed_by_reason.entry(known_reason(&why)).or_default() += n;
        }
        run.latencies_ok.extend(report.latencies_ok);
        run.latencies_failed.extend(report.latencies_failed);
        for (slot, shared) in shared_replicas.iter_mut().zip(report.shared) {
            *slot += u32::from(shared);
        }
        succeeded_per_replica.push(report.succeeded);
        fallbacks += report.fallbacks;
    }
    FleetRun { run, shared_replicas, succeeded_per_replica, redis_down_s, fallbacks }
}

/// A failure reason a replica reported, as one of the names the report
/// knows (anything else, which this lab never writes, is `other`).
fn known_reason(why: &str) -> &'static str {
    use retryscope_otel::names;
    [
        reason::RATE_LIMITED,
        reason::ANSWERED_429,
        reason::OTHER_STATUS,
        reason::TRANSPORT,
        reason::UNFINISHED,
        names::STOP_PERMANENT,
        names::STOP_UNREPEATABLE,
        names::STOP_ATTEMPTS_EXHAUSTED,
        names::STOP_DEADLINE_EXCEEDED,
        names::STOP_HINT_TOO_LONG,
        names::STOP_BUDGET_EXHAUSTED,
        names::STOP_CIRCUIT_OPEN,
        names::STOP_UPSTREAM_RETRY,
        names::STOP_REJECTED_LOCALLY,
        names::STOP_CONCURRENCY_LIMITED,
    ]
    .into_iter()
    .find(|known| *known == why)
    .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_by_name_and_unknown_ones_are_refused() {
        for policy in FleetPolicy::ALL {
            assert_eq!(policy.name().parse::<FleetPolicy>(), Ok(policy));
        }
        assert!("pacer".parse::<FleetPolicy>().is_err());
        assert_eq!(known_reason("429"), reason::ANSWERED_429);
        assert_eq!(known_reason("anything"), "other");
    }
}
