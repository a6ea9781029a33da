//! `retryscope storm --slow-tail`: hedged requests against a server with a
//! slow tail, and what they cost.
//!
//! A [`server`] on loopback answers most requests in a few milliseconds and a
//! small share of them (2 % by default) in a second: with no hedging, that
//! share *is* the p99. Open-loop clients call it through the engine's
//! [`hedge`](retryscope::hedge) around a real reqwest call, with a real
//! [`RetryBudget`] charged for every hedge, one [`HedgingPolicy`] after
//! another: none, a hedge after a fixed delay, and a hedge after the p95 of
//! the recent latencies. The report shows what the callers saw — p50, p99 and
//! p99.9 latency, failed calls — and what it cost the server: the requests it
//! received per call (the extra load) and the copies it was still working on
//! when their caller cancelled them.

mod chart;
pub mod policies;
pub mod report;
pub mod server;

pub use policies::HedgingPolicy;

use crate::storm::server::SLICE;
use crate::storm::telemetry::Telemetry;
use crate::storm::{StormArgs, StormError, error, finish, write_outputs};
use rand::{RngExt, SeedableRng};
use report::{TailRun, TailSummary};
use retryscope::dependency::Dependency;
use retryscope::hedge::HedgePolicy;
use retryscope::{RetryBudget, Retryable};
use retryscope_otel::OtelObserver;
use server::{SlowTailServer, Tail};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

/// The most calls one policy's run may plan (`--clients × --rate ×
/// --duration`): the report keeps each call's latency.
pub const MAX_CALLS: f64 = 1_000_000.0;

/// The `retryscope.dependency` of the storm's calls.
pub const DEPENDENCY: &str = "slow-tail";

/// Runs the slow-tail storm (`--slow-tail`) and prints the report.
pub fn run(args: &StormArgs) -> Result<Vec<TailSummary>, StormError> {
    validate(args)?;
    crate::storm::block_on(storm(args))
}

fn validate(args: &StormArgs) -> Result<(), StormError> {
    args.validate_load()?;
    if !(args.slow_share.is_finite() && (0.0..=1.0).contains(&args.slow_share)) {
        return Err(StormError::new("--slow-share must be between 0 and 1"));
    }
    if !(1..=10_000).contains(&args.slow_ms) || !(1..=1_000).contains(&args.fast_ms) {
        return Err(StormError::new("--slow-ms must be between 1 and 10000, --fast-ms between 1 and 1000"));
    }
    if Duration::from_millis(args.slow_ms.into()) >= policies::ATTEMPT_TIMEOUT {
        return Err(StormError::new(format!(
            "--slow-ms must be below the copies' attempt timeout ({} ms)",
            policies::ATTEMPT_TIMEOUT.as_millis()
        )));
    }
    if !(1..=10_000).contains(&args.hedge_delay_ms) {
        return Err(StormError::new("--hedge-delay-ms must be between 1 and 10000"));
    }
    if f64::from(args.clients) * args.rate * args.duration > MAX_CALLS {
        return Err(StormError::new(format!(
            "--clients × --rate × --duration plans more than {MAX_CALLS} calls per policy"
        )));
    }
    if !(args.hedge_quantile > 0.0 && args.hedge_quantile < 1.0) {
        return Err(StormError::new("--hedge-quantile must be above 0 and below 1 (0.95 for p95)"));
    }
    if args.hedge_policies.is_empty() {
        return Err(StormError::new("--hedge-policies names no policy"));
    }
    Ok(())
}

fn tail(args: &StormArgs) -> Tail {
    Tail {
        slow_share: args.slow_share,
        slow: Duration::from_millis(args.slow_ms.into()),
        fast: Duration::from_millis(args.fast_ms.into()),
    }
}

fn hedge_delay(args: &StormArgs) -> Duration {
    Duration::from_millis(args.hedge_delay_ms.into())
}

/// A quantile as a percentile's name: 0.95 → "95", 0.999 → "99.9".
fn percent(quantile: f64) -> String {
    let s = format!("{:.2}", quantile * 100.0);
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The storm's header line: the load, the server and the policies' settings.
pub fn header(args: &StormArgs) -> String {
    format!(
        "storm --slow-tail: {} clients × {}/s = {:.0} calls/s for {} s per policy; server: {:.1} % of requests take \
         {} ms, the rest {}–{} ms; {} copies at most, fixed delay {} ms, percentile p{} of the last {} s \
         (fixed delay until then); every hedge charged to a retry budget (10 %)\n",
        args.clients,
        args.rate,
        f64::from(args.clients) * args.rate,
        args.duration,
        args.slow_share * 100.0,
        args.slow_ms,
        args.fast_ms,
        2 * args.fast_ms,
        policies::COPIES,
        args.hedge_delay_ms,
        percent(args.hedge_quantile),
        policies::WINDOW.as_secs(),
    )
}

async fn storm(args: &StormArgs) -> Result<Vec<TailSummary>, StormError> {
    let telemetry = Telemetry::start(args.prometheus.as_deref())?;
    let mut runs = Vec::new();
    for &policy in &args.hedge_policies {
        eprintln!("storm: slow tail, {policy} …");
        runs.push(run_policy(args, policy, &telemetry).await?);
    }
    let mut rows: Vec<TailSummary> = runs.iter().map(TailRun::summary).collect();
    report::compare(&mut rows);
    print!("{}{}", header(args), report::table(&rows));
    let percentile = rows.iter().find(|r| r.policy == HedgingPolicy::Percentile.name());
    if let Some(row) = percentile {
        let verdict = if report::meets_target(row) { "met" } else { "NOT met" };
        println!(
            "target (percentile: p99 ≥ {}× lower than none, extra load ≤ {:.0} %, no failed call): {verdict}",
            report::TARGET_P99_CUT,
            report::TARGET_MAX_EXTRA_LOAD * 100.0
        );
    }
    let json = serde_json::json!({
        "header": header(args).trim_end(),
        "tail": {
            "slow_share": args.slow_share,
            "slow_ms": args.slow_ms,
            "fast_ms": [args.fast_ms, 2 * args.fast_ms],
        },
        "policies": {
            "copies": policies::COPIES,
            "fixed_delay_ms": args.hedge_delay_ms,
            "quantile": args.hedge_quantile,
            "window_s": policies::WINDOW.as_secs_f64(),
            "attempt_timeout_s": policies::ATTEMPT_TIMEOUT.as_secs_f64(),
            "deadline_s": policies::DEADLINE.as_secs_f64(),
        },
        "target": {
            "min_p99_cut": report::TARGET_P99_CUT,
            "max_extra_load": report::TARGET_MAX_EXTRA_LOAD,
            "met": percentile.map(report::meets_target),
        },
        "summary": rows,
        "runs": runs,
        "slice_ms": SLICE.as_millis() as u64,
    });
    write_outputs(args, "slow-tail", &json, |svg| chart::write_svg(svg, &runs, &rows))?;
    finish(args, &telemetry).await;
    Ok(rows)
}

/// Why a call failed: the request, or a status other than 200.
#[derive(Debug)]
enum CallError {
    Request(reqwest::Error),
    Status(reqwest::StatusCode),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Request(_) => f.write_str("the request failed"),
            CallError::Status(status) => write!(f, "answered {status}"),
        }
    }
}

impl std::error::Error for CallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Request(e) => Some(e),
            CallError::Status(_) => None,
        }
    }
}

/// What every call of one policy shares.
#[derive(Clone)]
struct Caller {
    http: reqwest::Client,
    url: Arc<str>,
    policy: HedgePolicy,
    /// The dependency called, with its retry budget: clones share it.
    dependency: Arc<Dependency>,
    observer: OtelObserver,
    operation: &'static str,
    /// Copies sent, counted by the operation factory.
    copies: Arc<AtomicU64>,
}

impl Caller {
    /// One hedged call: a GET whose body is read to the end; any failure of a
    /// copy is non-fatal (the next copy may still answer), as for an
    /// idempotent read.
    async fn call(&self) -> Result<(), retryscope::RetryError<CallError>> {
        (|| {
            self.copies.fetch_add(1, Ordering::Relaxed);
            let request = self.http.get(&*self.url);
            async move {
                let response = request.send().await.map_err(CallError::Request)?;
                let status = response.status();
                response.bytes().await.map_err(CallError::Request)?;
                if status.is_success() { Ok(()) } else { Err(CallError::Status(status)) }
            }
        })
        .hedge(self.policy.clone())
        .when(|_: &CallError| true)
        .dependency(&self.dependency)
        .operation(self.operation)
        .observe(self.observer.clone())
        .await
    }
}

/// What the callers saw, collected as their calls finish.
#[derive(Debug, Default)]
struct Tally {
    failed: u64,
    latencies_s: Vec<f64>,
}

async fn run_policy(
    args: &StormArgs,
    policy: HedgingPolicy,
    telemetry: &Telemetry,
) -> Result<TailRun, StormError> {
    let duration = Duration::from_secs_f64(args.duration);
    // Every copy is cut at its attempt timeout: the drain lets the last calls finish.
    let drain = policies::ATTEMPT_TIMEOUT + Duration::from_secs(1);
    let slices = usize::try_from((duration + drain).as_millis() / SLICE.as_millis()).unwrap_or(0) + 1;
    let server =
        SlowTailServer::start(tail(args), slices, args.seed).map_err(|e| error("starting the server", e))?;
    let caller = Caller {
        http: reqwest::Client::builder().no_proxy().build().map_err(|e| error("building the client", e))?,
        url: format!("http://{}/work", server.addr).into(),
        policy: policy
            .policy(hedge_delay(args), args.hedge_quantile)
            .map_err(|e| error("building the policy", e))?,
        dependency: Arc::new(Dependency::new(DEPENDENCY).with_budget(RetryBudget::default())),
        observer: OtelObserver::from_meter(&telemetry.meter).no_retry_log(),
        operation: policy.name(),
        copies: Arc::new(AtomicU64::new(0)),
    };
    let tally = Arc::new(Mutex::new(Tally::default()));
    let period = Duration::from_secs_f64(1.0 / args.rate);
    let mut phases = rand::rngs::SmallRng::seed_from_u64(args.seed);
    let started = Instant::now();
    let deadline = started + duration;
    let calls = Arc::new(AtomicU64::new(0));
    let mut clients = JoinSet::new();
    for _ in 0..args.clients {
        let phase = period.mul_f64(phases.random_range(0.0..1.0));
        let (caller, tally, calls) = (caller.clone(), Arc::clone(&tally), Arc::clone(&calls));
        clients.spawn(async move {
            let mut ticks = tokio::time::interval_at(Instant::now() + phase, period);
            // Open loop: a late tick is sent late, not skipped and not bunched.
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let mut in_flight = JoinSet::new();
            loop {
                let due = ticks.tick().await;
                if due >= deadline {
                    return in_flight;
                }
                calls.fetch_add(1, Ordering::Relaxed);
                let (caller, tally) = (caller.clone(), Arc::clone(&tally));
                in_flight.spawn(async move {
                    let result = caller.call().await;
                    let latency = due.elapsed().as_secs_f64();
                    let mut tally = tally.lock().unwrap_or_else(PoisonError::into_inner);
                    tally.latencies_s.push(latency);
                    tally.failed += u64::from(result.is_err());
                });
                while in_flight.try_join_next().is_some() {}
            }
        });
    }
    let mut in_flight = Vec::new();
    while let Some(joined) = clients.join_next().await {
        in_flight.extend(joined.ok());
    }
    let finish_all = async {
        for calls in &mut in_flight {
            while calls.join_next().await.is_some() {}
        }
    };
    let _ = tokio::time::timeout(drain, finish_all).await;
    let mut unfinished = 0;
    for calls in &mut in_flight {
        while calls.try_join_next().is_some() {}
        unfinished += calls.len() as u64;
    }
    // Dropping the sets cancels what is left: counted as failed.
    drop(in_flight);
    let mut tally = std::mem::take(&mut *tally.lock().unwrap_or_else(PoisonError::into_inner));
    tally.latencies_s.sort_by(f64::total_cmp);
    // A last moment for the server to see the connections of cancelled copies close.
    tokio::time::sleep(SLICE).await;
    Ok(TailRun {
        policy: policy.name(),
        calls: calls.load(Ordering::Relaxed),
        copies: caller.copies.load(Ordering::Relaxed),
        failed: tally.failed + unfinished,
        latencies_s: tally.latencies_s,
        server_received: server.seen.counters.received(),
        server_slow: server.seen.slow(),
        server_abandoned: server.seen.abandoned(),
    })
}
