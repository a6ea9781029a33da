//! `retryscope storm --jobs`: job workers against a dependency that is down
//! for longer than a naive worker's whole retry window, on a real nats-server.
//!
//! Producers enqueue `--job-count` jobs (each under its own key) on a
//! JetStream queue; every job calls one dependency, which is down for the
//! first `--down` seconds. Two workers take the same load in turn, each on a
//! fresh queue:
//!
//! - `naive`: 4 attempts 100 ms apart, no breaker, no hold — the retry window
//!   (0.3 s) is spent long before the dependency is back, so the jobs go to
//!   the dead letters;
//! - `retryscope`: the same worker with exponential backoff (+30 % jitter),
//!   the dependency's circuit breaker holding jobs while it is open (a hold is
//!   not an attempt), and a processed-key store.
//!
//! The dependency counts its executions per job key: the report shows the
//! jobs completed and dead-lettered, the executions per key, the holds and
//! the job age at completion.

mod chart;
pub mod report;
mod server;

use crate::storm::runner::finish;
use crate::storm::telemetry::Telemetry;
use crate::storm::{StormArgs, StormError, error};
use report::JobsRun;
use retryscope::dependency::Dependencies;
use retryscope::{CircuitBreaker, ErrorType, Jitter, Policy, Transient, Verdict};
use retryscope_idempotency::MemoryStore;
use retryscope_jobs::nats::{NatsQueue, NatsQueueConfig};
use retryscope_jobs::{DeadLetterStore, Job, JobOutcome, Producer, Worker};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The most jobs one run may enqueue.
pub const MAX_JOBS: u32 = 100_000;

/// The two workers compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobWorker {
    /// Fixed retries, no hold.
    Naive,
    /// Backoff with jitter, breaker holds, key store.
    Retryscope,
}

impl JobWorker {
    fn name(self) -> &'static str {
        match self {
            JobWorker::Naive => "naive",
            JobWorker::Retryscope => "retryscope",
        }
    }

    fn policy(self) -> Result<Policy, retryscope::PolicyError> {
        match self {
            JobWorker::Naive => Policy::builder()
                .max_attempts(4)
                .base_delay(Duration::from_millis(100))
                .multiplier(1.0)
                .jitter(Jitter::None)
                .no_deadline()
                .build(),
            // The articles' job backoff (base 1 s, cap 60 s, +30 % jitter), scaled down
            // tenfold so the storm takes seconds.
            JobWorker::Retryscope => Policy::builder()
                .max_attempts(6)
                .base_delay(Duration::from_millis(100))
                .max_delay(Duration::from_secs(6))
                .jitter(Jitter::Proportional(0.3))
                .deadline(Duration::from_secs(600))
                .build(),
        }
    }
}

/// The dependency's error while it is down: transient.
#[derive(Debug)]
struct Down;

impl fmt::Display for Down {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the dependency is down (503)")
    }
}

impl Transient for Down {
    fn verdict(&self) -> Verdict {
        Verdict::retryable(ErrorType::Status(503))
    }
}

/// Runs the jobs storm (`--jobs`) and prints the report.
pub fn run(args: &StormArgs) -> Result<Vec<report::JobsSummary>, StormError> {
    if !(1..=MAX_JOBS).contains(&args.job_count) {
        return Err(StormError::new(format!("--job-count must be between 1 and {MAX_JOBS}")));
    }
    if !(args.down.is_finite() && (0.0..=600.0).contains(&args.down)) {
        return Err(StormError::new("--down must be between 0 and 600 seconds"));
    }
    if !(args.linger.is_finite() && (0.0..=3_600.0).contains(&args.linger)) {
        return Err(StormError::new("--linger must be between 0 and 3600 seconds"));
    }
    crate::storm::block_on(storm(args))
}

/// The storm's header line.
pub fn header(args: &StormArgs) -> String {
    format!(
        "storm --jobs: {} jobs on NATS JetStream, each calling one dependency that is down for the first {:.1} s \
         (the naive worker's whole retry window is 0.3 s)\n",
        args.job_count, args.down
    )
}

async fn storm(args: &StormArgs) -> Result<Vec<report::JobsSummary>, StormError> {
    let nats = server::Nats::start(args.nats_url.as_deref()).await?;
    // The job metrics go through the global meter: to the scrape endpoint with --prometheus.
    let telemetry = Telemetry::start(args.prometheus.as_deref())?;
    telemetry.install_global_meter();
    let mut runs = Vec::new();
    let mut workers = Vec::new();
    for worker in [JobWorker::Naive, JobWorker::Retryscope] {
        eprintln!("storm: jobs, {} worker …", worker.name());
        let (run, running) = run_worker(args, &nats.url, worker).await?;
        runs.push(run);
        workers.push(running);
    }
    let rows: Vec<report::JobsSummary> = runs.iter().map(JobsRun::summary).collect();
    print!("{}{}", header(args), report::table(&rows));
    let json = serde_json::json!({
        "header": header(args).trim_end(),
        "jobs": args.job_count,
        "down_s": args.down,
        "summary": rows,
        "runs": runs,
    });
    crate::storm::write_outputs(args, "storm-jobs", &json, |svg| chart::write_svg(svg, &runs))?;
    // The workers, idle now, keep reading their dead-letter depth through the
    // linger, so that a last scrape sees it; then they stop.
    finish(args, &telemetry).await;
    for running in workers {
        running.stop().await?;
    }
    Ok(rows)
}

/// A worker still running (idle once its jobs are settled).
struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) -> Result<(), StormError> {
        let _ = self.stop.send(());
        self.task.await.map_err(|e| error("stopping the worker", e))
    }
}

async fn run_worker(args: &StormArgs, url: &str, kind: JobWorker) -> Result<(JobsRun, Running), StormError> {
    let client = async_nats::connect(url).await.map_err(|e| error("connecting to nats-server", e))?;
    let policy = kind.policy().map_err(|e| error("building the policy", e))?;
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let stream = format!("STORM_{}_{nanos}", kind.name().to_uppercase());
    let subject = format!("storm_{}_{nanos}.orders", kind.name());
    let queue = NatsQueue::open(
        client,
        NatsQueueConfig::new(&stream, [subject.clone()], "workers").ack_wait(Duration::from_secs(5)),
    )
    .await
    .map_err(|e| error("opening the queue", e))?;
    let start = Instant::now();
    let down_until = start + Duration::from_secs_f64(args.down);
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let seen = Arc::clone(&ledger);
    let handler = move |job: Job| {
        let seen = Arc::clone(&seen);
        async move {
            let mut ledger = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if Instant::now() < down_until {
                ledger.failed_calls += 1;
                return Err(Down);
            }
            *ledger.executions.entry(job.key.as_deref().unwrap_or("").to_owned()).or_default() += 1;
            let enqueued = job.payload.as_ref().try_into().map(u64::from_be_bytes).unwrap_or(0);
            let age = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
            ledger.ages_ms.push(age.saturating_sub(enqueued));
            Ok(())
        }
    };
    let builder =
        Worker::builder(queue.clone(), policy, handler).concurrency(32).hold(Duration::from_millis(300));
    let worker = match kind {
        JobWorker::Naive => builder.build(),
        JobWorker::Retryscope => {
            let guards = Dependencies::builder()
                .breaker(|| {
                    CircuitBreaker::builder()
                        .min_calls(10)
                        .failure_ratio(0.5)
                        .cool_down(Duration::from_millis(500))
                        .build()
                        .unwrap_or_default()
                })
                .build();
            builder.guards(guards.get("inventory")).processed_keys(MemoryStore::default()).build()
        }
    }
    .map_err(|e| error("building the worker", e))?;
    let stats = worker.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    let producer = Producer::new(queue.clone());
    for n in 0..args.job_count {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        producer
            .enqueue(&subject, &format!("order-{n}"), now.to_be_bytes().to_vec())
            .await
            .map_err(|e| error("enqueueing", e))?;
    }
    let total = u64::from(args.job_count);
    let limit = Duration::from_secs_f64(args.down) + Duration::from_secs(60);
    while start.elapsed() < limit {
        let settled = stats.count(JobOutcome::Succeeded)
            + stats.count(JobOutcome::Deduplicated)
            + stats.count(JobOutcome::DeadLettered);
        if settled >= total {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = start.elapsed();
    let dead_depth = queue.dead_depth().await.map_err(|e| error("counting dead letters", e))?;
    let ledger = ledger.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let run = JobsRun {
        worker: kind.name(),
        jobs: total,
        succeeded: stats.count(JobOutcome::Succeeded),
        dead_lettered: stats.count(JobOutcome::DeadLettered),
        dead_depth,
        retried: stats.count(JobOutcome::Retried),
        held: stats.count(JobOutcome::Held),
        failed_calls: ledger.failed_calls,
        executed_keys: ledger.executions.len() as u64,
        max_executions: ledger.executions.values().copied().max().unwrap_or(0),
        ages_ms: ledger.ages_ms.clone(),
        seconds: elapsed.as_secs_f64(),
    };
    Ok((run, Running { stop, task: running }))
}

#[derive(Default)]
struct Ledger {
    executions: HashMap<String, u32>,
    failed_calls: u64,
    ages_ms: Vec<u64>,
}
