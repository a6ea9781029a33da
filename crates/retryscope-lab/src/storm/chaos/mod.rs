//! `retryscope storm --chaos SPEC`: the outage injected, not simulated.
//!
//! The server is healthy throughout (the storm's server, no outage). What fails
//! is injected into the clients: each rule of the [SPEC](spec) is a
//! [`FaultMiddleware`] *below* the policy's [`RetryMiddleware`](retryscope_reqwest::RetryMiddleware), armed during
//! its window, so the retries, budgets and breakers meet the faults exactly as
//! they would meet real ones — and the server receives what the retries add.
//! The same policies as the plain storm are compared, one after another, each
//! against the same seeded sequence of faults.
//!
//! Two counting middlewares around the fault stack say how many attempts the
//! faults answered in place of the server (`injected`); faults that delay a
//! call or break a body without replacing it (`latency`, `slow-body`,
//! `broken-body`) let the attempt through and are not in that count, but are
//! in `retryscope.faults.injected`, which the storm's telemetry exports.

pub mod spec;

use super::metrics::InProcessReader;
use super::one_server::{latest, sample};
use super::report::{PolicyRun, Timeline, peak_per_second, slice_index};
use super::server::{Behaviour, SLICE, Server};
use super::{StormArgs, StormError, StormPolicy, block_on, chart, delta, error, finish, load, policies};
use super::{telemetry, write_outputs};
use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use retryscope_reqwest::fault::{FaultMiddleware, Faults};
use retryscope_reqwest::prelude::*;
use serde::Serialize;
use spec::ChaosSpec;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use spec::{ChaosItem, ChaosSpecError, MAX_ITEMS};

/// Runs the chaos storm (`--chaos SPEC`) and prints the report.
pub fn run(args: &StormArgs) -> Result<Vec<ChaosSummary>, StormError> {
    let spec = validate(args)?;
    block_on(storm(args, spec))
}

fn validate(args: &StormArgs) -> Result<ChaosSpec, StormError> {
    args.validate_load()?;
    let spec: ChaosSpec =
        args.chaos.as_deref().unwrap_or_default().parse().map_err(|e| error("--chaos", e))?;
    let duration = Duration::from_secs_f64(args.duration);
    for item in &spec.items {
        if let Some((_, to)) = item.window
            && to > duration
        {
            return Err(StormError::new(format!(
                "--chaos: the window of {} ends after the {} s run",
                item.rule, args.duration
            )));
        }
    }
    if args.policies.is_empty() {
        return Err(StormError::new("--policies names no policy"));
    }
    Ok(spec)
}

/// When the faults are armed, as the report's phases: from the earliest
/// window's start to the latest one's end (a rule without a window: the run).
fn chaos_window(spec: &ChaosSpec, duration: Duration) -> Timeline {
    let windows = spec.items.iter().map(|item| item.window.unwrap_or((Duration::ZERO, duration)));
    let (start, end) =
        windows.fold((duration, Duration::ZERO), |(start, end), (from, to)| (start.min(from), end.max(to)));
    Timeline { outage_start: start.min(end), outage_end: end }
}

/// The storm's header line.
pub fn header(args: &StormArgs, spec: &ChaosSpec) -> String {
    format!(
        "storm --chaos {spec}: {} clients × {}/s = {:.0} requests/s for {} s per policy against a healthy server \
         (capacity {}/s); faults injected below the retries, seeded ({})\n",
        args.clients,
        args.rate,
        f64::from(args.clients) * args.rate,
        args.duration,
        args.capacity,
        args.seed
    )
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChaosSummary {
    /// The policy's name.
    pub policy: &'static str,
    /// Logical requests started.
    pub requests: u64,
    /// Attempts made (the instrumentation's count).
    pub attempts: u64,
    /// Attempts a fault answered in place of the server.
    pub injected: u64,
    /// `injected / attempts`.
    pub injected_share: f64,
    /// Retries per logical request.
    pub retry_ratio: f64,
    /// Share of the logical requests started while faults were armed that succeeded.
    pub ok_during: f64,
    /// Share of those started after the last window that succeeded; `None`
    /// when the faults were armed to the end.
    pub ok_after: Option<f64>,
    /// Logical requests that ended without success.
    pub failed: u64,
    /// Requests the server received per logical request: the load the retries added.
    pub server_load: f64,
    /// The busiest second at the server, as a multiple of the offered load.
    pub peak_load: f64,
}

/// Counts the requests that pass it.
#[derive(Debug, Clone, Default)]
struct Count(Arc<AtomicU64>);

#[async_trait::async_trait]
impl Middleware for Count {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        self.0.fetch_add(1, Ordering::Relaxed);
        next.run(request, extensions).await
    }
}

async fn storm(args: &StormArgs, spec: ChaosSpec) -> Result<Vec<ChaosSummary>, StormError> {
    let telemetry = telemetry::Telemetry::start(args.prometheus.as_deref())?;
    let duration = Duration::from_secs_f64(args.duration);
    let window = chaos_window(&spec, duration);
    let mut runs = Vec::new();
    let mut rows = Vec::new();
    let mut clients = Vec::new();
    for &policy in &args.policies {
        eprintln!("storm: chaos, {policy} …");
        let (run, row, client) =
            run_policy(args, &spec, policy, window, &telemetry.meter, &telemetry.reader).await?;
        runs.push(run);
        rows.push(row);
        clients.push(client);
    }
    print!("{}{}", header(args, &spec), table(&rows));
    let items: Vec<_> = spec
        .items
        .iter()
        .map(|item| {
            let (from, to) = item.window.unwrap_or((Duration::ZERO, duration));
            serde_json::json!({ "rule": item.rule.to_string(), "from_s": from.as_secs_f64(), "to_s": to.as_secs_f64() })
        })
        .collect();
    let json = serde_json::json!({
        "header": header(args, &spec).trim_end(),
        "spec": spec.to_string(),
        "items": items,
        "window_s": [window.outage_start.as_secs_f64(), window.outage_end.as_secs_f64()],
        "summary": rows,
        "runs": runs,
        "slice_ms": SLICE.as_millis() as u64,
    });
    let chart_rows: Vec<_> = runs.iter().map(|r| r.summary(window)).collect();
    write_outputs(args, "chaos", &json, |svg| chart::write_svg(svg, &runs, &chart_rows, window))?;
    finish(args, &telemetry).await;
    drop(clients);
    Ok(rows)
}

async fn run_policy(
    args: &StormArgs,
    spec: &ChaosSpec,
    policy: StormPolicy,
    window: Timeline,
    meter: &opentelemetry::metrics::Meter,
    metrics: &InProcessReader,
) -> Result<(PolicyRun, ChaosSummary, reqwest_middleware::ClientWithMiddleware), StormError> {
    let duration = Duration::from_secs_f64(args.duration);
    // A stall lasts until the attempt timeout: the drain lets the last one end.
    let drain = policies::ATTEMPT_TIMEOUT + Duration::from_secs(1);
    let slices = usize::try_from((duration + drain).as_millis() / SLICE.as_millis()).unwrap_or(0) + 1;
    // Healthy: no outage. Only the injected faults fail.
    let behaviour = Behaviour {
        capacity: args.capacity,
        outage_start: duration,
        outage_len: Duration::ZERO,
        model: args.model(),
    };
    let middleware = policy.middleware().map_err(|e| error("building the policy", e))?.meter(meter).build();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(policies::ATTEMPT_TIMEOUT)
        .build()
        .map_err(|e| error("building the client", e))?;
    // One `Faults` per item, so that each has its own window; each seeded
    // apart (the same seed would draw the same calls for every rule), and the
    // same for every policy, so that each meets the same sequence of faults.
    let armed: Vec<(Faults, (Duration, Duration))> = spec
        .items
        .iter()
        .zip(0u64..)
        .map(|(item, i)| {
            let faults = Faults::builder()
                .rule(item.rule.clone())
                .seed(args.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .meter(meter.clone())
                .build();
            (faults, item.window.unwrap_or((Duration::ZERO, duration)))
        })
        .collect();
    let (above, below) = (Count::default(), Count::default());
    let mut builder = reqwest_middleware::ClientBuilder::new(http).with(middleware).with(above.clone());
    for (faults, _) in &armed {
        builder = builder.with(FaultMiddleware::new(faults.clone()));
    }
    let client = builder.with(below.clone()).build();
    let load = load::Load { clients: args.clients, rate: args.rate, duration, seed: args.seed };
    let before = latest(metrics, policy).await;
    let incoming = retryscope_otel::IncomingRequests::from_meter(meter);
    let server =
        Server::start(behaviour, slices, incoming).await.map_err(|e| error("starting the server", e))?;
    let url = format!("http://{}/work", server.addr);
    let sampler = tokio::spawn(sample(metrics.clone(), policy, slices));
    // The switches: each item armed from its window's start to its end, on
    // the clock the clients start on.
    let start = tokio::time::Instant::now();
    let switches: Vec<_> = armed
        .iter()
        .map(|(faults, (from, to))| {
            let (faults, from, to) = (faults.clone(), *from, *to);
            tokio::spawn(async move {
                tokio::time::sleep_until(start + from).await;
                faults.enable();
                tokio::time::sleep_until(start + to).await;
                faults.disable();
            })
        })
        .collect();
    let outcomes = load::run(load, client.clone(), url, policy.name(), drain, slices).await;
    for switch in switches {
        switch.abort();
    }
    for (faults, _) in &armed {
        faults.disable();
    }
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
    let injected = above.0.load(Ordering::Relaxed).saturating_sub(below.0.load(Ordering::Relaxed));
    let row = summary(&run, injected, window, f64::from(args.clients) * args.rate);
    Ok((run, row, client))
}

fn summary(run: &PolicyRun, injected: u64, window: Timeline, offered_per_s: f64) -> ChaosSummary {
    let t = run.totals;
    let ratio = |part: f64, whole: f64| if whole > 0.0 { part / whole } else { 0.0 };
    let (start, end) = (slice_index(window.outage_start), slice_index(window.outage_end));
    let share = |range: std::ops::Range<usize>| {
        let sum =
            |v: &[u32]| v.get(range.clone()).unwrap_or_default().iter().map(|&n| f64::from(n)).sum::<f64>();
        let started = sum(&run.started);
        (started > 0.0).then(|| sum(&run.succeeded) / started)
    };
    let received: u64 = run.server_received.iter().map(|&n| u64::from(n)).sum();
    ChaosSummary {
        policy: run.policy,
        requests: t.requests,
        attempts: t.attempts,
        injected,
        injected_share: ratio(injected as f64, t.attempts as f64),
        retry_ratio: ratio(t.retries as f64, t.requests as f64),
        ok_during: share(start..end).unwrap_or(0.0),
        ok_after: share(end..run.started.len()),
        failed: t.failed,
        server_load: ratio(received as f64, t.requests as f64),
        peak_load: ratio(peak_per_second(&run.server_received), offered_per_s),
    }
}

/// The report as a text table.
pub fn table(rows: &[ChaosSummary]) -> String {
    let mut out = format!(
        "{:<12} {:>9} {:>15} {:>8} {:>11} {:>11} {:>9} {:>9} {:>7}\n",
        "policy",
        "injected",
        "ok during chaos",
        "ok after",
        "retry ratio",
        "server load",
        "peak load",
        "requests",
        "failed"
    );
    for r in rows {
        let after = r.ok_after.map_or_else(|| "—".to_owned(), |s| format!("{:.0}%", s * 100.0));
        out.push_str(&format!(
            "{:<12} {:>8.1}% {:>14.0}% {:>8} {:>11.2} {:>10.2}x {:>8.1}x {:>9} {:>7}\n",
            r.policy,
            r.injected_share * 100.0,
            r.ok_during * 100.0,
            after,
            r.retry_ratio,
            r.server_load,
            r.peak_load,
            r.requests,
            r.failed
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chaos_window_spans_every_item_and_a_rule_without_one_spans_the_run() {
        let run = Duration::from_secs(8);
        let spec: ChaosSpec = "503@30:1s-3s,reset@5:2s-5s".parse().unwrap();
        let w = chaos_window(&spec, run);
        assert_eq!((w.outage_start, w.outage_end), (Duration::from_secs(1), Duration::from_secs(5)));
        let spec: ChaosSpec = "503@30:1s-3s,stall@1".parse().unwrap();
        let w = chaos_window(&spec, run);
        assert_eq!((w.outage_start, w.outage_end), (Duration::ZERO, run));
    }
}
