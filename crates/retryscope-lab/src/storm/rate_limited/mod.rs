//! `retryscope storm --rate-limited`: clients offering twice a gateway's
//! quota, with and without a pacer.
//!
//! A [`gateway`] on loopback enforces a quota (200 requests per fixed 1-s
//! window by default) and says so on every answer: `RateLimit` and
//! `RateLimit-Policy` on its 200s, the same plus `Retry-After` on its 429s.
//! Open-loop clients offer about twice the quota through a real reqwest client
//! carrying [`RetryMiddleware`](retryscope_reqwest::RetryMiddleware), one
//! [`RatePolicy`] after another: every call on its own (`per-call`), a
//! [`Pacer`] per dependency (`pacer`, the default), or the
//! pacer in adaptive mode (`adaptive`). The report shows what each did to the
//! gateway — how many of its attempts were answered 429, how much of the quota
//! it turned into 200s — and what the callers saw: latency and failed calls,
//! by reason.
//!
//! Half of what the clients offer cannot be served by any policy: the quota
//! is the limit. What a policy decides is where the other half fails — at the
//! gateway, as 429s sent for nothing, or in the client, unsent.

mod chart;
pub mod fleet;
pub mod gateway;
pub mod policies;
pub mod report;

pub use policies::RatePolicy;

use crate::storm::server::{Counters, SLICE};
use crate::storm::telemetry::Telemetry;
use crate::storm::{StormArgs, StormError, error, finish, load, policies::ATTEMPT_TIMEOUT, write_outputs};
use gateway::{Gateway, Quota, QuotaHeaders};
use opentelemetry::metrics::Meter;
use report::{RateRun, RateSummary, failure_reason, reason};
use retryscope::Pacer;
use retryscope_otel::IncomingRequests;
use retryscope_reqwest::prelude::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The most calls one policy's run may plan (`--clients × --rate ×
/// --duration`): the report keeps each call's latency.
pub const MAX_CALLS: f64 = 1_000_000.0;

/// Runs the rate-limited storm (`--rate-limited`) and prints the report.
pub fn run(args: &StormArgs) -> Result<Vec<RateSummary>, StormError> {
    validate(args)?;
    crate::storm::block_on(storm(args))
}

/// Runs the rate-limited storm as a fleet (`--rate-limited --replicas N`)
/// and prints the report: see [`fleet`].
pub fn run_fleet(args: &StormArgs, replicas: u32) -> Result<Vec<fleet::FleetSummary>, StormError> {
    validate(args)?;
    fleet::run(args, replicas)
}

fn validate(args: &StormArgs) -> Result<(), StormError> {
    args.validate_load()?;
    if args.quota == 0 || args.window == 0 || args.window > 3_600 {
        return Err(StormError::new("--quota must be above zero and --window between 1 and 3600 s"));
    }
    if !(args.deadline.is_finite() && (0.1..=60.0).contains(&args.deadline)) {
        return Err(StormError::new("--deadline must be between 0.1 and 60 seconds"));
    }
    if f64::from(args.clients) * args.rate * args.duration > MAX_CALLS {
        return Err(StormError::new(format!(
            "--clients × --rate × --duration plans more than {MAX_CALLS} calls per policy"
        )));
    }
    if args.rate_policies.is_empty() {
        return Err(StormError::new("--rate-policies names no policy"));
    }
    Ok(())
}

fn quota(args: &StormArgs) -> Quota {
    Quota { requests: args.quota, window_s: args.window }
}

/// The storm's header line: the load, the gateway and the callers' deadline.
pub fn header(args: &StormArgs) -> String {
    let quota = quota(args);
    format!(
        "storm --rate-limited: {} clients × {}/s = {:.0} requests/s; gateway quota {} requests per fixed {} s window \
         ({:.0}/s, {} headers), 429 with Retry-After beyond it; calls bounded by {} s; {} s of load per policy\n",
        args.clients,
        args.rate,
        f64::from(args.clients) * args.rate,
        quota.requests,
        quota.window_s,
        quota.per_second(),
        match args.quota_headers {
            QuotaHeaders::Draft => "RateLimit",
            QuotaHeaders::Vendor => "X-RateLimit-*",
        },
        args.deadline,
        args.duration
    )
}

async fn storm(args: &StormArgs) -> Result<Vec<RateSummary>, StormError> {
    let telemetry = Telemetry::start(args.prometheus.as_deref())?;
    let quota = quota(args);
    let (load_time, window) =
        (Duration::from_secs_f64(args.duration), Duration::from_secs(args.window.into()));
    let mut runs = Vec::new();
    // Each policy's client, and so its guards and their gauges, lives as long
    // as the process, as the other storms' clients do.
    let mut clients = Vec::new();
    for &policy in &args.rate_policies {
        eprintln!("storm: rate-limited, {policy} …");
        let (run, client) = run_policy(args, policy, quota, &telemetry.meter).await?;
        runs.push(run);
        clients.push(client);
    }
    let rows: Vec<RateSummary> =
        runs.iter().map(|r| r.summary(load_time, window, quota.per_second())).collect();
    print!("{}{}", header(args), report::table(&rows));
    let json = serde_json::json!({
        "header": header(args).trim_end(),
        "quota": { "requests": quota.requests, "window_s": quota.window_s, "per_second": quota.per_second() },
        "offered_per_s": f64::from(args.clients) * args.rate,
        "deadline_s": args.deadline,
        "quota_headers": format!("{:?}", args.quota_headers).to_lowercase(),
        "target": {
            "max_429_per_1000": report::TARGET_429_PER_1000,
            "min_goodput_share": report::TARGET_GOODPUT_SHARE,
        },
        "summary": rows,
        "runs": runs,
        "slice_ms": SLICE.as_millis() as u64,
    });
    write_outputs(args, "storm-rate-limited", &json, |svg| {
        chart::write_svg(svg, &runs, &rows, quota.per_second())
    })?;
    finish(args, &telemetry).await;
    drop(clients);
    Ok(rows)
}

/// What the callers saw, collected as their calls finish: by the storm for
/// one process, and by each replica of the fleet storm for its own calls.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) succeeded: u64,
    pub(crate) failed_by_reason: BTreeMap<&'static str, u64>,
    pub(crate) latencies_ok: Vec<f64>,
    pub(crate) latencies_failed: Vec<f64>,
}

impl Tally {
    /// Counts one finished call, by its outcome and its latency.
    pub(crate) fn record(&mut self, call: &load::Finished) {
        let latency = call.latency.as_secs_f64();
        match failure_reason(&call.result) {
            None => {
                self.succeeded += 1;
                self.latencies_ok.push(latency);
            }
            Some(why) => {
                *self.failed_by_reason.entry(why).or_default() += 1;
                self.latencies_failed.push(latency);
            }
        }
    }

    /// Counts `cancelled` calls the drain cut short, as unfinished.
    pub(crate) fn unfinished(&mut self, cancelled: u64) {
        if cancelled > 0 {
            *self.failed_by_reason.entry(reason::UNFINISHED).or_default() += cancelled;
        }
    }
}

async fn run_policy(
    args: &StormArgs,
    policy: RatePolicy,
    quota: Quota,
    meter: &Meter,
) -> Result<(RateRun, reqwest_middleware::ClientWithMiddleware), StormError> {
    let duration = Duration::from_secs_f64(args.duration);
    let deadline = Duration::from_secs_f64(args.deadline);
    // Every call ends within its deadline: the drain lets the last ones finish.
    let drain = deadline + Duration::from_secs(1);
    let slices = usize::try_from((duration + drain).as_millis() / SLICE.as_millis()).unwrap_or(0) + 1;
    let (middleware, pacer) = policy.middleware(deadline).map_err(|e| error("building the policy", e))?;
    let middleware = middleware.meter(meter).build();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(ATTEMPT_TIMEOUT)
        .build()
        .map_err(|e| error("building the client", e))?;
    let client = reqwest_middleware::ClientBuilder::new(http).with(middleware).build();
    let gateway = Gateway::start(quota, args.quota_headers, slices, IncomingRequests::from_meter(meter))
        .await
        .map_err(|e| error("starting the gateway", e))?;
    let url = format!("http://{}/work", gateway.addr);
    let load = load::Load { clients: args.clients, rate: args.rate, duration, seed: args.seed };
    let tally = Arc::new(Mutex::new(Tally::default()));
    let record = {
        let tally = Arc::clone(&tally);
        move |call: load::Finished| tally.lock().unwrap_or_else(PoisonError::into_inner).record(&call)
    };
    let started = Arc::new(Counters::new(slices));
    let paced = Arc::new(Mutex::new(Vec::with_capacity(slices)));
    let sampler = pacer.map(|pacer| tokio::spawn(sample(pacer, Arc::clone(&paced), slices)));
    let cancelled =
        load::drive(load, client.clone(), url, policy.name(), drain, Arc::clone(&started), Arc::new(record))
            .await;
    if let Some(sampler) = sampler {
        sampler.abort();
    }
    let allowed_rate = std::mem::take(&mut *paced.lock().unwrap_or_else(PoisonError::into_inner));
    let mut tally = std::mem::take(&mut *tally.lock().unwrap_or_else(PoisonError::into_inner));
    tally.unfinished(cancelled);
    let run = RateRun {
        policy: policy.name(),
        server_received: gateway.counters.received(),
        server_served: gateway.counters.served(),
        calls: started.received().iter().map(|&n| u64::from(n)).sum(),
        succeeded: tally.succeeded,
        failed_by_reason: tally.failed_by_reason,
        latencies_ok: tally.latencies_ok,
        latencies_failed: tally.latencies_failed,
        allowed_rate,
    };
    Ok((run, client))
}

/// Appends the pace in force ([`Pacer::allowed_rate`]) to `series` at the end
/// of each slice, at most `slices` times: `None` where nothing was in force.
async fn sample(pacer: Pacer, series: Arc<Mutex<Vec<Option<f64>>>>, slices: usize) {
    let mut ticks = tokio::time::interval(SLICE);
    ticks.tick().await;
    for _ in 0..slices {
        ticks.tick().await;
        series.lock().unwrap_or_else(PoisonError::into_inner).push(pacer.allowed_rate());
    }
}
