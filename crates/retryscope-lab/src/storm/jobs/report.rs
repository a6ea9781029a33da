//! What the jobs storm found, per worker: the table and the JSON.

use serde::Serialize;

/// Everything measured for one worker.
#[derive(Debug, Clone, Serialize)]
pub struct JobsRun {
    /// The worker's name.
    pub worker: &'static str,
    /// Jobs enqueued.
    pub jobs: u64,
    /// Jobs that completed.
    pub succeeded: u64,
    /// Jobs sent to the dead letters.
    pub dead_lettered: u64,
    /// Dead letters in the dead-letter stream at the end.
    pub dead_depth: u64,
    /// Attempts that failed and were requeued with a run-at.
    pub retried: u64,
    /// Deliveries held (breaker open) without an attempt.
    pub held: u64,
    /// Calls the dependency refused while down.
    pub failed_calls: u64,
    /// Job keys the dependency executed.
    pub executed_keys: u64,
    /// The most executions of one key at the dependency.
    pub max_executions: u32,
    /// Age of each completed job (enqueue to success), in milliseconds.
    pub ages_ms: Vec<u64>,
    /// Seconds until every job was settled.
    pub seconds: f64,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobsSummary {
    /// The worker's name.
    pub worker: &'static str,
    /// Share of jobs completed, in %.
    pub completed_pct: f64,
    /// Jobs dead-lettered.
    pub dead_lettered: u64,
    /// The most executions of one key.
    pub max_executions: u32,
    /// Calls the dependency refused while down.
    pub failed_calls: u64,
    /// Deliveries held.
    pub held: u64,
    /// Median job age at completion, in seconds.
    pub age_p50_s: f64,
    /// Largest job age at completion, in seconds.
    pub age_max_s: f64,
}

impl JobsRun {
    /// The report's row.
    pub fn summary(&self) -> JobsSummary {
        let mut ages = self.ages_ms.clone();
        ages.sort_unstable();
        let pick = |q: f64| ages.get(((ages.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0);
        JobsSummary {
            worker: self.worker,
            completed_pct: if self.jobs == 0 {
                0.0
            } else {
                100.0 * self.succeeded as f64 / self.jobs as f64
            },
            dead_lettered: self.dead_lettered,
            max_executions: self.max_executions,
            failed_calls: self.failed_calls,
            held: self.held,
            age_p50_s: pick(0.5) as f64 / 1000.0,
            age_max_s: pick(1.0) as f64 / 1000.0,
        }
    }
}

/// The table, one row per worker.
pub fn table(rows: &[JobsSummary]) -> String {
    let mut out = String::from(
        "worker       completed  dead-lettered  max runs/key  failed calls   held  age p50  age max\n",
    );
    for r in rows {
        out.push_str(&format!(
            "{:<12} {:>8.1} % {:>14} {:>13} {:>13} {:>6} {:>7.2}s {:>7.2}s\n",
            r.worker,
            r.completed_pct,
            r.dead_lettered,
            r.max_executions,
            r.failed_calls,
            r.held,
            r.age_p50_s,
            r.age_max_s
        ));
    }
    out
}
