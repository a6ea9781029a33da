//! `retryscope storm --lost-responses` through the real binary, with small
//! settings: the table, the JSON and the chart, and the targets they must
//! show — exactly one execution per operation with keys, every operation
//! completed, and the duplicates of a blind retry.
//!
//! A live run on loopback (real sockets, real time). Which responses are lost
//! is a function of the seed, the operation and the attempt, so the counts
//! below do not depend on the machine's speed.

use serde_json::Value;
use std::process::Command;

fn storm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .arg("storm")
        .args(args)
        .output()
        .expect("run retryscope storm")
}

#[test]
fn keys_run_every_operation_once_where_a_blind_retry_runs_some_twice() {
    let out = std::env::temp_dir().join(format!("retryscope-storm-lost-test-{}", std::process::id()));
    let out_arg = out.to_str().expect("a UTF-8 temp dir");
    let output = storm(&["--lost-responses", "--operations", "150", "--clients", "8", "--out", out_arg]);
    assert!(output.status.success(), "storm failed: {}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8_lossy(&output.stdout);
    for expected in
        ["executions/op", "duplicated", "failed but ran", "no-retry", "retry-no-keys", "retry-keys"]
    {
        assert!(table.contains(expected), "{expected:?} missing from\n{table}");
    }

    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("lost-responses.json")).expect("JSON"))
            .expect("valid JSON");
    let rows = summary["summary"].as_array().expect("summary rows");
    assert_eq!(rows.len(), 3, "{summary}");
    let row = |policy: &str| {
        rows.iter()
            .find(|r| r["policy"] == policy)
            .unwrap_or_else(|| panic!("no row for {policy} in {summary}"))
    };
    let number = |policy: &str, field: &str| {
        row(policy)[field].as_f64().unwrap_or_else(|| panic!("no {field} for {policy}"))
    };
    for policy in ["no-retry", "retry-no-keys", "retry-keys"] {
        assert_eq!(number(policy, "operations"), 150.0);
        assert!(number(policy, "lost") > 0.0, "{policy} lost no response: the storm tests nothing");
    }

    // With keys: every operation completed, each run exactly once, the lost
    // answers given again from the store.
    assert_eq!(number("retry-keys", "executions_per_operation"), 1.0);
    assert_eq!(number("retry-keys", "max_executions"), 1.0);
    assert_eq!(number("retry-keys", "duplicated_share"), 0.0);
    assert_eq!(number("retry-keys", "completed"), 150.0);
    assert_eq!(number("retry-keys", "failed"), 0.0);
    assert!(number("retry-keys", "replayed") > 0.0);

    // Retried blindly: every operation completed too, but some ran again.
    assert_eq!(number("retry-no-keys", "completed"), 150.0);
    assert!(number("retry-no-keys", "duplicated_share") > 0.1, "{}", row("retry-no-keys"));
    assert!(number("retry-no-keys", "max_executions") >= 2.0);
    assert!(number("retry-no-keys", "executions_per_operation") > 1.1);
    assert_eq!(number("retry-no-keys", "replayed"), 0.0);

    // Not retried: each operation ran once, and every one whose answer was
    // lost failed though it ran.
    assert_eq!(number("no-retry", "executions_per_operation"), 1.0);
    assert!(number("no-retry", "failed") > 0.0);
    assert_eq!(number("no-retry", "failed_but_executed"), number("no-retry", "failed"));
    assert_eq!(number("no-retry", "attempts"), 150.0);

    // The same losses for every policy: the two retrying ones made the same attempts.
    assert_eq!(number("retry-no-keys", "attempts"), number("retry-keys", "attempts"));
    let runs = summary["runs"].as_array().expect("runs");
    assert!(runs.iter().all(|r| r["executions"].as_array().is_some_and(|e| e.len() == 150)), "{summary}");

    let svg = std::fs::read_to_string(out.join("lost-responses.svg")).expect("the chart");
    assert!(
        svg.starts_with("<svg") && svg.contains("retry-keys") && svg.contains("2 times"),
        "not the chart"
    );
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn settings_the_storm_cannot_honour_are_refused() {
    let refused = storm(&["--lost-responses", "--loss", "0.9"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--loss must be between 0 and 0.6"));
    let conflicting = storm(&["--lost-responses", "--rate-limited"]);
    assert!(!conflicting.status.success());
    assert!(String::from_utf8_lossy(&conflicting.stderr).contains("cannot be used with"));
    let no_ops = storm(&["--lost-responses", "--operations", "0"]);
    assert!(String::from_utf8_lossy(&no_ops.stderr).contains("--operations must be between 1 and 100000"));
}
