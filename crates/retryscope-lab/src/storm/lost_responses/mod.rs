//! `retryscope storm --lost-responses`: a POST whose response is lost, retried
//! with and without an idempotency key.
//!
//! A [`lossy`] server on loopback runs every POST it is handed — counting
//! executions per logical operation, which the client names in a header — and
//! then loses a share of the responses (30 % by default): half by closing the
//! connection after the work, half by answering 503 after committing. Clients
//! run a fixed number of operations (400 by default, 16 at a time) through a
//! real reqwest client carrying
//! [`RetryMiddleware`](retryscope_reqwest::RetryMiddleware), one
//! [`LostPolicy`] after another, each against a fresh server: no retry, a
//! blind retry (`idempotent`, no key), and `.idempotency_keys()` against
//! the server behind `retryscope_idempotency::IdempotencyLayer`.
//!
//! Without a retry the operations whose response was lost fail though they
//! ran; retried blindly they all complete, and a third of them run twice or
//! more; with keys they all complete and each runs exactly once.

mod chart;
pub mod lossy;
pub mod policies;
pub mod report;

pub use policies::LostPolicy;

use crate::storm::telemetry::Telemetry;
use crate::storm::{StormArgs, StormError, error, finish, write_outputs};
use lossy::{Losses, LossyServer, OPERATION_HEADER};
use opentelemetry::metrics::Meter;
use report::{LostRun, LostSummary};
use reqwest_middleware::ClientWithMiddleware;
use retryscope_reqwest::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The most operations one policy's run may make: the server keeps a counter each.
pub const MAX_OPERATIONS: u32 = 100_000;
/// The most concurrent clients.
pub const MAX_CLIENTS: u32 = 1_024;
/// The highest share of lost responses: beyond it, ten attempts are no longer
/// enough for every operation to get one answer through.
pub const MAX_LOSS: f64 = 0.6;

/// Runs the lost-responses storm (`--lost-responses`) and prints the report.
pub fn run(args: &StormArgs) -> Result<Vec<LostSummary>, StormError> {
    validate(args)?;
    crate::storm::block_on(storm(args))
}

fn validate(args: &StormArgs) -> Result<(), StormError> {
    if !(1..=MAX_OPERATIONS).contains(&args.operations) {
        return Err(StormError::new(format!("--operations must be between 1 and {MAX_OPERATIONS}")));
    }
    if !(1..=MAX_CLIENTS).contains(&args.clients) {
        return Err(StormError::new(format!("--clients must be between 1 and {MAX_CLIENTS}")));
    }
    if !(args.loss.is_finite() && (0.0..=MAX_LOSS).contains(&args.loss)) {
        return Err(StormError::new(format!("--loss must be between 0 and {MAX_LOSS}")));
    }
    if args.lost_policies.is_empty() {
        return Err(StormError::new("--lost-policies names no policy"));
    }
    if !(args.linger.is_finite() && (0.0..=3_600.0).contains(&args.linger)) {
        return Err(StormError::new("--linger must be between 0 and 3600 seconds"));
    }
    Ok(())
}

/// The storm's header line: the operations, the clients and the losses.
pub fn header(args: &StormArgs) -> String {
    format!(
        "storm --lost-responses: {} POST operations, {} at a time; the server runs each POST, then loses {:.0} % \
         of its responses (half by closing the connection, half as a 503), replays included\n",
        args.operations,
        args.clients,
        args.loss * 100.0
    )
}

async fn storm(args: &StormArgs) -> Result<Vec<LostSummary>, StormError> {
    let telemetry = Telemetry::start(args.prometheus.as_deref())?;
    let losses = Losses { share: args.loss, seed: args.seed };
    let mut runs = Vec::new();
    for &policy in &args.lost_policies {
        eprintln!("storm: lost responses, {policy} …");
        runs.push(run_policy(args, policy, losses, &telemetry.meter).await?);
    }
    let rows: Vec<LostSummary> = runs.iter().map(LostRun::summary).collect();
    print!("{}{}", header(args), report::table(&rows));
    let json = serde_json::json!({
        "header": header(args).trim_end(),
        "operations": args.operations,
        "clients": args.clients,
        "loss": args.loss,
        "seed": args.seed,
        "attempts_when_retrying": policies::ATTEMPTS,
        "summary": rows,
        "runs": runs,
    });
    write_outputs(args, "lost-responses", &json, |svg| chart::write_svg(svg, &runs))?;
    finish(args, &telemetry).await;
    Ok(rows)
}

async fn run_policy(
    args: &StormArgs,
    policy: LostPolicy,
    losses: Losses,
    meter: &Meter,
) -> Result<LostRun, StormError> {
    let operations = usize::try_from(args.operations).map_err(|e| error("--operations", e))?;
    let server = LossyServer::start(operations, policy.keyed_server(), losses, meter)
        .await
        .map_err(|e| error("starting the server", e))?;
    let middleware = policy.middleware().map_err(|e| error("building the policy", e))?.meter(meter).build();
    let http = reqwest::Client::builder().no_proxy().build().map_err(|e| error("building the client", e))?;
    let client = reqwest_middleware::ClientBuilder::new(http).with(middleware).build();
    let url = format!("http://{}/orders", server.addr);
    let next = Arc::new(AtomicUsize::new(0));
    let completed: Arc<Vec<AtomicBool>> = Arc::new((0..operations).map(|_| AtomicBool::new(false)).collect());
    let workers: Vec<_> = (0..args.clients)
        .map(|_| {
            let (client, url, next, completed) =
                (client.clone(), url.clone(), Arc::clone(&next), Arc::clone(&completed));
            tokio::spawn(async move {
                loop {
                    let op = next.fetch_add(1, Ordering::Relaxed);
                    let Some(done) = completed.get(op) else { break };
                    done.store(operate(&client, &url, policy, op).await, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.map_err(|e| error("running the clients", e))?;
    }
    let ledger = &server.ledger;
    Ok(LostRun {
        policy: policy.name(),
        executions: ledger.executions(),
        completed: completed.iter().map(|done| done.load(Ordering::Relaxed)).collect(),
        attempts: ledger.arrivals(),
        dropped: ledger.dropped.load(Ordering::Relaxed),
        unavailable: ledger.unavailable.load(Ordering::Relaxed),
        replayed: ledger.replayed.load(Ordering::Relaxed),
        refused: ledger.refused.load(Ordering::Relaxed),
    })
}

/// Runs operation `op` (one POST, retried as `policy` says); whether its caller
/// got a 2xx.
async fn operate(client: &ClientWithMiddleware, url: &str, policy: LostPolicy, op: usize) -> bool {
    let request = client
        .post(url)
        .header(OPERATION_HEADER, op.to_string())
        .header("content-type", "application/json")
        .body(format!("{{\"order\":{op}}}"));
    let request = match policy.options() {
        Some(options) => request.with_extension(options),
        None => request,
    };
    request.send().await.is_ok_and(|response| response.status().is_success())
}
