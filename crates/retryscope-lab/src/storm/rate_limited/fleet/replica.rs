//! One replica of the fleet storm, as its own process: the lab binary run
//! again with the hidden subcommand `fleet-replica` by the storm.
//!
//! It speaks to the storm on its standard streams, one line each: it prints
//! `READY` once its client is built (and, when shared, once the share sees
//! the whole fleet), waits for `GO <gateway URL>` on its standard input, sends its load,
//! and prints `RESULT <json>` ([`ReplicaReport`]). It ends on its own when
//! its standard input closes (the storm is gone, however it ended) or when
//! its own deadline passes: a replica never outlives its storm.

use crate::storm::StormError;
use crate::storm::error;
use crate::storm::load;
use crate::storm::policies::ATTEMPT_TIMEOUT;
use crate::storm::rate_limited::RatePolicy;
use crate::storm::rate_limited::Tally;
use crate::storm::rate_limited::fleet::FleetPolicy;
use crate::storm::server::{Counters, SLICE};
use crate::storm::telemetry::Telemetry;
use retryscope_redis::RedisPaceShare;
use retryscope_reqwest::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long a shared replica waits for the share to see the whole fleet.
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a replica waits for `GO` after `READY`.
const GO_TIMEOUT: Duration = Duration::from_secs(60);

/// The orders of one replica (`retryscope fleet-replica`, hidden: the fleet
/// storm starts it).
#[derive(Debug, Clone, clap::Args)]
pub struct ReplicaArgs {
    /// The pacing policy.
    #[arg(long)]
    pub policy: FleetPolicy,
    /// The Redis the pace is shared through (shared policies only).
    #[arg(long)]
    pub redis: Option<String>,
    /// The quota's name in Redis.
    #[arg(long, default_value = "storm-fleet")]
    pub quota_name: String,
    /// How many replicas the fleet has.
    #[arg(long)]
    pub replicas: u32,
    /// Concurrent clients of this replica.
    #[arg(long)]
    pub clients: u32,
    /// Logical requests per second per client.
    #[arg(long)]
    pub rate: f64,
    /// Seconds of load.
    #[arg(long)]
    pub duration: f64,
    /// Seconds a call may take.
    #[arg(long)]
    pub deadline: f64,
    /// Seeds the clients' phases.
    #[arg(long)]
    pub seed: u64,
    /// Serve this replica's metrics for Prometheus on this address.
    #[arg(long)]
    pub prometheus: Option<String>,
    /// Keep serving metrics this many seconds after the load.
    #[arg(long, default_value_t = 0.0)]
    pub linger: f64,
}

/// What one replica measured, sent to the storm as JSON.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReplicaReport {
    /// Logical requests started.
    pub calls: u64,
    /// Of those, the ones that ended in a 200.
    pub succeeded: u64,
    /// The others, by reason.
    pub failed_by_reason: BTreeMap<String, u64>,
    /// Latency of each successful call, in seconds.
    pub latencies_ok: Vec<f64>,
    /// Latency of each failed call, in seconds.
    pub latencies_failed: Vec<f64>,
    /// Per slice of the load and drain, whether the pace was shared then
    /// (`retryscope.pace.shared`); empty for a policy without a share.
    pub shared: Vec<bool>,
    /// How many times the share fell back to local pacing.
    pub fallbacks: u32,
}

/// Runs one replica (see the module's docs).
pub fn run(args: &ReplicaArgs) -> Result<(), StormError> {
    let positive = |v: f64| v.is_finite() && v > 0.0;
    let in_range = positive(args.duration)
        && positive(args.deadline)
        && positive(args.rate)
        && (0.0..=3_600.0).contains(&args.linger)
        && args.duration + args.deadline <= 86_400.0
        && (1..=super::MAX_REPLICAS).contains(&args.replicas)
        && args.clients > 0;
    if !in_range {
        return Err(StormError::new(
            "a replica's orders are out of range (it is started by the fleet storm)",
        ));
    }
    crate::storm::block_on(async {
        let deadline = Duration::from_secs_f64(args.duration + args.deadline + 1.0 + args.linger)
            + JOIN_TIMEOUT
            + GO_TIMEOUT;
        match tokio::time::timeout(deadline, replica(args)).await {
            Ok(result) => result,
            Err(_) => Err(StormError::new("the replica ran past its deadline")),
        }
    })
}

async fn replica(args: &ReplicaArgs) -> Result<(), StormError> {
    let telemetry = Telemetry::start(args.prometheus.as_deref())?;
    let deadline = Duration::from_secs_f64(args.deadline);
    let (builder, _pacer) = match args.policy {
        FleetPolicy::Adaptive => RatePolicy::Adaptive,
        _ => RatePolicy::Pacer,
    }
    .middleware(deadline)
    .map_err(|e| error("building the policy", e))?;
    let share = match (args.policy.is_shared(), &args.redis) {
        (false, _) => None,
        (true, None) => return Err(StormError::new("a shared replica needs --redis")),
        (true, Some(url)) => {
            let client = redis::Client::open(url.as_str()).map_err(|e| error("--redis", e))?;
            let share = RedisPaceShare::builder(client, &args.quota_name)
                .meter(telemetry.meter.clone())
                .build()
                .map_err(|e| error("building the share", e))?;
            Some(share)
        }
    };
    let builder = match &share {
        Some(share) => builder.pace_shared(share.clone()),
        None => builder,
    };
    let middleware = builder.meter(&telemetry.meter).build();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(ATTEMPT_TIMEOUT)
        .build()
        .map_err(|e| error("building the client", e))?;
    let client = reqwest_middleware::ClientBuilder::new(http).with(middleware).build();

    if let Some(share) = &share {
        let joining = Instant::now();
        while !(share.is_shared() && share.live_replicas() >= args.replicas) {
            if joining.elapsed() > JOIN_TIMEOUT {
                return Err(StormError::new(format!(
                    "the share did not see the {} replicas within {JOIN_TIMEOUT:?}: {share:?}",
                    args.replicas
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    println!("READY");
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    // `GO <url>`: the gateway starts once the whole fleet is ready, so that
    // its quota windows start with the load.
    let url = match tokio::time::timeout(GO_TIMEOUT, lines.next_line()).await {
        Ok(Ok(Some(line))) => match line.trim().strip_prefix("GO ") {
            Some(url) => url.to_owned(),
            None => return Err(StormError::new("the storm did not say GO")),
        },
        _ => return Err(StormError::new("the storm did not say GO")),
    };
    // The storm gone (its end of the pipe closed), this replica ends too.
    tokio::spawn(async move {
        while let Ok(Some(_)) = lines.next_line().await {}
        std::process::exit(3);
    });

    let duration = Duration::from_secs_f64(args.duration);
    let drain = deadline + Duration::from_secs(1);
    let slices = usize::try_from((duration + drain).as_millis() / SLICE.as_millis()).unwrap_or(0) + 1;
    let shared = Arc::new(Mutex::new(Vec::with_capacity(slices)));
    let sampler = share.clone().map(|share| {
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(SLICE);
            for _ in 0..slices {
                ticks.tick().await;
                shared.lock().unwrap_or_else(PoisonError::into_inner).push(share.is_shared());
            }
        })
    });
    let tally = Arc::new(Mutex::new(Tally::default()));
    let record = {
        let tally = Arc::clone(&tally);
        move |call: load::Finished| tally.lock().unwrap_or_else(PoisonError::into_inner).record(&call)
    };
    let load = load::Load { clients: args.clients, rate: args.rate, duration, seed: args.seed };
    let started = Arc::new(Counters::new(slices));
    let cancelled = load::drive(
        load,
        client.clone(),
        url,
        args.policy.name(),
        drain,
        Arc::clone(&started),
        Arc::new(record),
    )
    .await;
    if let Some(sampler) = sampler {
        sampler.abort();
    }
    let mut tally = std::mem::take(&mut *tally.lock().unwrap_or_else(PoisonError::into_inner));
    tally.unfinished(cancelled);
    let report = ReplicaReport {
        calls: started.received().iter().map(|&n| u64::from(n)).sum(),
        succeeded: tally.succeeded,
        failed_by_reason: tally.failed_by_reason.into_iter().map(|(why, n)| (why.to_owned(), n)).collect(),
        latencies_ok: tally.latencies_ok,
        latencies_failed: tally.latencies_failed,
        shared: std::mem::take(&mut *shared.lock().unwrap_or_else(PoisonError::into_inner)),
        fallbacks: share.as_ref().map_or(0, |s| s.fallbacks()),
    };
    let json = serde_json::to_string(&report).map_err(|e| error("writing the report", e))?;
    println!("RESULT {json}");
    telemetry.flush();
    if args.linger > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(args.linger)).await;
    }
    drop(client);
    Ok(())
}
