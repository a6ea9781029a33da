//! The storm of one server: each policy in turn against a server with a fixed
//! capacity through healthy → outage → recovery, sampled as it goes.

use super::metrics::{InProcessReader, Totals};
use super::report::{self, PolicyRun, Summary, Timeline};
use super::server::{Behaviour, SLICE, Server};
use super::{
    StormArgs, StormError, StormPolicy, block_on, chart, delta, error, finish, load, policies, telemetry,
    write_outputs,
};
use retryscope_reqwest::prelude::*;
use std::time::Duration;

/// Runs the storm of one server and prints the report (see [`layers::run`](super::layers::run)
/// for `--layers`).
pub fn run(args: &StormArgs) -> Result<Vec<Summary>, StormError> {
    let timeline = args.validate()?;
    block_on(storm(args, timeline))
}

async fn storm(args: &StormArgs, timeline: Timeline) -> Result<Vec<Summary>, StormError> {
    let telemetry = telemetry::Telemetry::start(args.prometheus.as_deref())?;
    // `--config`: one handle for every policy's client, as one service's
    // clients share one; the watch lives as long as the storm.
    let config = match &args.config {
        Some(path) => {
            let handle = config_handle(path, &telemetry.meter)?;
            eprintln!("storm: --config {} (hash {})", path.display(), handle.snapshot().hash());
            let watch = handle.watch(CONFIG_POLL);
            Some((handle, watch))
        }
        None => None,
    };
    let mut runs = Vec::new();
    // Each policy's client lives as long as the process, as a service's would:
    // its guards, and so its budget and breaker gauges, are still there for the
    // scrapes while the lab lingers.
    let mut clients = Vec::new();
    for &policy in &args.policies {
        eprintln!("storm: {policy} …");
        let handle = config.as_ref().map(|(handle, _)| handle.clone());
        let (run, client) =
            run_policy(args, policy, timeline, &telemetry.meter, &telemetry.reader, handle).await?;
        runs.push(run);
        clients.push(client);
    }
    let rows: Vec<Summary> = runs.iter().map(|r| r.summary(timeline)).collect();
    print!("{}{}", args.header(), report::table(&rows));
    let json = serde_json::json!({
        "header": args.header().trim_end(),
        "summary": rows,
        "runs": runs,
        "slice_ms": SLICE.as_millis() as u64,
    });
    write_outputs(args, "storm", &json, |svg| chart::write_svg(svg, &runs, &rows, timeline))?;
    finish(args, &telemetry).await;
    drop(clients);
    drop(config);
    Ok(rows)
}

/// How often `--config`'s file is polled: a rewrite is in force within about
/// this (plus the handle's settle time), well inside a policy's run.
const CONFIG_POLL: Duration = Duration::from_millis(250);

/// The `--config` handle, recording with the storm's meter. The storm
/// registers no body rule in code and its fallback only for the `breaker`
/// policy, so a file naming either is refused here rather than half-applied.
fn config_handle(
    path: &std::path::Path,
    meter: &opentelemetry::metrics::Meter,
) -> Result<retryscope_config::ConfigHandle, StormError> {
    retryscope_config::ConfigHandle::builder(retryscope_config::KnownNames::new())
        .meter(meter)
        .file(path)
        .build()
        .map_err(|e| error("loading --config", e))
}

async fn run_policy(
    args: &StormArgs,
    policy: StormPolicy,
    timeline: Timeline,
    meter: &opentelemetry::metrics::Meter,
    metrics: &InProcessReader,
    config: Option<retryscope_config::ConfigHandle>,
) -> Result<(PolicyRun, reqwest_middleware::ClientWithMiddleware), StormError> {
    let duration = Duration::from_secs_f64(args.duration);
    let drain = Duration::from_secs(1);
    let slices = usize::try_from((duration + drain).as_millis() / SLICE.as_millis()).unwrap_or(0) + 1;
    let behaviour = Behaviour {
        capacity: args.capacity,
        outage_start: timeline.outage_start,
        outage_len: timeline.outage_end - timeline.outage_start,
        model: args.model(),
    };
    let mut middleware = policy.middleware().map_err(|e| error("building the policy", e))?.meter(meter);
    if let Some(handle) = config {
        middleware = middleware.config(handle);
    }
    let middleware = middleware.build();
    // The HTTP client bounds each attempt by the policies' attempt timeout too,
    // so that no caller waits longer than the server model assumes (its
    // goodput counts only answers within that timeout).
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(policies::ATTEMPT_TIMEOUT)
        .build()
        .map_err(|e| error("building the client", e))?;
    let client = reqwest_middleware::ClientBuilder::new(http).with(middleware).build();
    let load = load::Load { clients: args.clients, rate: args.rate, duration, seed: args.seed };
    let before = latest(metrics, policy).await;
    // The server's clock, the sampler's and the clients' start together, so the
    // server's counters and the telemetry share one time axis.
    let incoming = retryscope_otel::IncomingRequests::from_meter(meter);
    let server =
        Server::start(behaviour, slices, incoming).await.map_err(|e| error("starting the server", e))?;
    let url = format!("http://{}/work", server.addr);
    let sampler = tokio::spawn(sample(metrics.clone(), policy, slices));
    let outcomes = load::run(load, client.clone(), url, policy.name(), drain, slices).await;
    let retries = sampler.await.map_err(|e| error("sampling metrics", e))?;
    let after = latest(metrics, policy).await;
    let run = PolicyRun {
        policy: policy.name(),
        totals: delta(after, before),
        server_received: server.counters.received(),
        server_served: server.counters.served(),
        started: outcomes.received(),
        succeeded: outcomes.served(),
        retries,
    };
    Ok((run, client))
}

/// Retries started per slice, from the instrumentation's cumulative counter.
pub(crate) async fn sample(metrics: InProcessReader, policy: StormPolicy, slices: usize) -> Vec<u64> {
    let mut ticks = tokio::time::interval(SLICE);
    let mut series = Vec::with_capacity(slices);
    let mut previous = None;
    for _ in 0..slices {
        ticks.tick().await;
        let current = metrics.totals(policy.name()).retries;
        series.push(current.saturating_sub(previous.unwrap_or(current)));
        previous = Some(current);
    }
    series
}

/// The newest totals after the reader's next collection.
pub(crate) async fn latest(metrics: &InProcessReader, policy: StormPolicy) -> Totals {
    tokio::time::sleep(SLICE * 2).await;
    metrics.totals(policy.name())
}
