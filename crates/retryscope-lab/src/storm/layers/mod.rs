//! `retryscope storm --layers N`: retries multiplying down a live call chain.
//!
//! Open-loop users call service 1, which calls service 2, … down to the
//! struggling server at the bottom, which goes through healthy → outage →
//! recovery. Every service above the bottom calls the next one through a real
//! reqwest client carrying [`RetryMiddleware`](retryscope_reqwest::RetryMiddleware);
//! the users do not retry. Each policy of [`LayerPolicy`] gets a fresh chain,
//! one after another, and the report shows what every service received, as the
//! service itself counted it: with 4 attempts at each of the 2 retrying
//! services of a 3-service chain, a total outage turns one user request into 16
//! calls at the bottom; retrying at one layer, into 4.

mod chart;
pub mod policies;
pub mod report;

pub use policies::LayerPolicy;

use crate::storm::chain::{Caller, Chain};
use crate::storm::metrics::{InProcessReader, Totals};
use crate::storm::report::Timeline;
use crate::storm::server::{Behaviour, Model, SLICE};
use crate::storm::telemetry::Telemetry;
use crate::storm::{StormArgs, StormError, delta, error, finish, load, write_outputs};
use opentelemetry::metrics::Meter;
use report::{LayerSummary, LayeredRun, ServiceRun};
use retryscope_otel::IncomingRequests;
use retryscope_reqwest::prelude::*;
use std::time::Duration;

/// Runs the layered storm (`--layers`) and prints the report.
pub fn run(args: &StormArgs) -> Result<Vec<LayerSummary>, StormError> {
    let services = args.layers.ok_or_else(|| StormError::new("the layered storm needs --layers"))?;
    let services = usize::try_from(services).map_err(|e| error("--layers", e))?;
    let timeline = args.validate()?;
    crate::storm::block_on(storm(args, services, timeline))
}

async fn storm(
    args: &StormArgs,
    services: usize,
    timeline: Timeline,
) -> Result<Vec<LayerSummary>, StormError> {
    let telemetry = Telemetry::start(args.prometheus.as_deref())?;
    let incoming = IncomingRequests::from_meter(&telemetry.meter);
    let mut runs = Vec::new();
    // Each policy's chain, and so its clients and their gauges, lives as long as
    // the process, as the plain storm's clients do.
    let mut chains = Vec::new();
    for &policy in &args.layer_policies {
        eprintln!("storm: {services} layers, {policy} …");
        let (run, chain) = run_policy(args, services, policy, timeline, &telemetry, &incoming).await?;
        runs.push(run);
        chains.push(chain);
    }
    let rows: Vec<LayerSummary> = runs.iter().flat_map(|r| r.summary(timeline)).collect();
    print!("{}", report::table(&rows));
    let json = serde_json::json!({
        "services": services,
        "attempts_per_layer": policies::ATTEMPTS,
        "summary": rows,
        "runs": runs,
        "slice_ms": SLICE.as_millis() as u64,
    });
    write_outputs(args, "storm-layers", &json, |svg| chart::write_svg(svg, &runs, timeline))?;
    finish(args, &telemetry).await;
    drop(chains);
    Ok(rows)
}

/// The `retryscope.operation` of service `k`'s calls to the next one.
fn operation(policy: LayerPolicy, k: usize) -> String {
    format!("{policy}/service-{k}")
}

async fn run_policy(
    args: &StormArgs,
    services: usize,
    policy: LayerPolicy,
    timeline: Timeline,
    telemetry: &Telemetry,
    incoming: &IncomingRequests,
) -> Result<(LayeredRun, Chain), StormError> {
    let duration = Duration::from_secs_f64(args.duration);
    let drain = Duration::from_secs(1);
    let slices = usize::try_from((duration + drain).as_millis() / SLICE.as_millis()).unwrap_or(0) + 1;
    let bottom = Behaviour {
        capacity: args.capacity,
        outage_start: timeline.outage_start,
        outage_len: timeline.outage_end - timeline.outage_start,
        // The layered storm's figures are about multiplication down the chain:
        // its bottom sheds perfectly, so any load it keeps is the chain's doing.
        model: Model::Shed,
    };
    let callers = 1..services;
    let before = outgoing(&telemetry.reader, policy, callers.clone()).await;
    let chain =
        Chain::start(services, bottom, slices, incoming, |k| caller(policy, k, &telemetry.meter)).await?;
    // The users give up after one attempt: every retry in the chain is a service's.
    let http = reqwest::Client::builder().no_proxy().build().map_err(|e| error("building the client", e))?;
    let users = reqwest_middleware::ClientBuilder::new(http).build();
    let load = load::Load { clients: args.clients, rate: args.rate, duration, seed: args.seed };
    load::run(load, users, chain.url(), policy.name(), drain, slices).await;
    let after = outgoing(&telemetry.reader, policy, callers).await;
    let run = LayeredRun {
        policy: policy.name(),
        services: chain
            .services
            .iter()
            .enumerate()
            .map(|(i, s)| ServiceRun {
                service: s.name.clone(),
                received: s.counters.received(),
                served: s.counters.served(),
                attempts: s.attempts.by_bucket(),
                outgoing: after.get(i).zip(before.get(i)).map(|(&a, &b)| delta(a, b)),
            })
            .collect(),
    };
    Ok((run, chain))
}

/// Service `k`'s client to the next service under `policy`.
fn caller(policy: LayerPolicy, k: usize, meter: &Meter) -> Result<Caller, StormError> {
    let middleware = policy.middleware().map_err(|e| error("building the policy", e))?.meter(meter).build();
    let http = reqwest::Client::builder().no_proxy().build().map_err(|e| error("building the client", e))?;
    let client = reqwest_middleware::ClientBuilder::new(http).with(middleware).build();
    Ok(Caller { client, operation: operation(policy, k).into() })
}

/// The totals of the calls services `callers` made, after the reader's next
/// collection.
async fn outgoing(
    metrics: &InProcessReader,
    policy: LayerPolicy,
    callers: std::ops::Range<usize>,
) -> Vec<Totals> {
    tokio::time::sleep(SLICE * 2).await;
    callers.map(|k| metrics.totals(&operation(policy, k))).collect()
}
