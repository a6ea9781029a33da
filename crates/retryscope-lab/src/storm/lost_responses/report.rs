//! What a lost-responses storm found, per policy: the table, the JSON and the
//! derived figures.

use serde::Serialize;

/// Everything measured for one policy.
#[derive(Debug, Clone, Serialize)]
pub struct LostRun {
    /// The policy's name.
    pub policy: &'static str,
    /// Times the server ran each operation, by operation number.
    pub executions: Vec<u32>,
    /// Whether each operation's caller got a 2xx, by operation number.
    pub completed: Vec<bool>,
    /// Attempts that reached the server.
    pub attempts: u64,
    /// Responses the server lost by closing the connection.
    pub dropped: u64,
    /// Responses the server lost by answering 503 instead.
    pub unavailable: u64,
    /// Answers the idempotency layer gave from its store.
    pub replayed: u64,
    /// Answers that were neither the work's nor a replay (409, 422, …).
    pub refused: u64,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LostSummary {
    /// The policy's name.
    pub policy: &'static str,
    /// Logical operations the clients ran.
    pub operations: u64,
    /// Times the server ran an operation's work, in all.
    pub executions: u64,
    /// Executions per operation, on average.
    pub executions_per_operation: f64,
    /// The most executions of one operation.
    pub max_executions: u32,
    /// The share of operations that ran more than once.
    pub duplicated_share: f64,
    /// Operations whose caller got a 2xx.
    pub completed: u64,
    /// Operations whose caller did not.
    pub failed: u64,
    /// Failed operations that the server had run all the same: the caller
    /// cannot tell them from ones that never happened.
    pub failed_but_executed: u64,
    /// Attempts that reached the server.
    pub attempts: u64,
    /// Responses lost, both ways.
    pub lost: u64,
    /// Answers the idempotency layer gave from its store.
    pub replayed: u64,
}

impl LostRun {
    /// The report row for this run.
    pub fn summary(&self) -> LostSummary {
        let operations = self.executions.len() as u64;
        let executions: u64 = self.executions.iter().map(|&n| u64::from(n)).sum();
        let completed = self.completed.iter().filter(|&&done| done).count() as u64;
        let duplicated = self.executions.iter().filter(|&&n| n > 1).count() as u64;
        let failed_but_executed =
            self.executions.iter().zip(&self.completed).filter(|&(&n, &done)| n > 0 && !done).count() as u64;
        LostSummary {
            policy: self.policy,
            operations,
            executions,
            executions_per_operation: ratio(executions, operations),
            max_executions: self.executions.iter().copied().max().unwrap_or(0),
            duplicated_share: ratio(duplicated, operations),
            completed,
            failed: operations - completed,
            failed_but_executed,
            attempts: self.attempts,
            lost: self.dropped + self.unavailable,
            replayed: self.replayed,
        }
    }

    /// Operations by how many times they ran: index `n` counts those run `n`
    /// times, the last one those run `buckets - 1` times or more.
    pub fn histogram(&self, buckets: usize) -> Vec<u64> {
        let mut counts = vec![0; buckets.max(1)];
        let last = counts.len() - 1;
        for &n in &self.executions {
            counts[usize::try_from(n).unwrap_or(usize::MAX).min(last)] += 1;
        }
        counts
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

/// The report as a text table.
pub fn table(rows: &[LostSummary]) -> String {
    let mut out = format!(
        "{:<14} {:>10} {:>13} {:>4} {:>10} {:>9} {:>6} {:>15} {:>8} {:>5} {:>7}\n",
        "policy",
        "operations",
        "executions/op",
        "max",
        "duplicated",
        "completed",
        "failed",
        "failed but ran",
        "attempts",
        "lost",
        "replays"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<14} {:>10} {:>13.2} {:>4} {:>9.1}% {:>9} {:>6} {:>15} {:>8} {:>5} {:>7}\n",
            r.policy,
            r.operations,
            r.executions_per_operation,
            r.max_executions,
            r.duplicated_share * 100.0,
            r.completed,
            r.failed,
            r.failed_but_executed,
            r.attempts,
            r.lost,
            r.replayed
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_count_duplicates_and_operations_that_failed_though_they_ran() {
        let run = LostRun {
            policy: "retry-no-keys",
            executions: vec![1, 2, 0, 3, 1],
            completed: vec![true, true, false, true, false],
            attempts: 9,
            dropped: 2,
            unavailable: 2,
            replayed: 0,
            refused: 0,
        };
        let row = run.summary();
        assert_eq!(row.operations, 5);
        assert_eq!(row.executions, 7);
        assert!((row.executions_per_operation - 1.4).abs() < 1e-9);
        assert_eq!(row.max_executions, 3);
        assert!((row.duplicated_share - 0.4).abs() < 1e-9);
        assert_eq!((row.completed, row.failed, row.failed_but_executed), (3, 2, 1));
        assert_eq!(row.lost, 4);
        assert_eq!(run.histogram(3), [1, 2, 2]);
        let table = table(&[row]);
        assert!(table.contains("retry-no-keys") && table.contains("40.0%"), "{table}");
    }
}
