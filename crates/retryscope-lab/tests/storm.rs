//! A short live storm through the real binary: naive retries must put a much
//! larger peak load on the recovering server than a retry budget does.
//!
//! This is a live run on loopback (real sockets, real time); the claim it checks
//! holds with a wide margin (about 10x against 1.5x), so it does not depend on
//! the machine's speed.

use std::process::Command;

#[test]
fn naive_retries_load_the_server_far_more_than_a_budget() {
    let out = std::env::temp_dir().join(format!("retryscope-storm-test-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["storm", "--policies", "naive,budget", "--clients", "10", "--rate", "10", "--capacity", "150"])
        .args(["--duration", "4", "--outage", "1.5:1.5", "--out"])
        .arg(&out)
        .output()
        .expect("run retryscope storm");
    assert!(output.status.success(), "storm failed: {}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("peak load"), "{table}");

    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("storm.json")).expect("storm.json"))
            .expect("valid JSON");
    let rows = summary["summary"].as_array().expect("summary rows");
    let peak = |policy: &str| {
        rows.iter()
            .find(|r| r["policy"] == policy)
            .and_then(|r| r["peak_load"].as_f64())
            .unwrap_or_else(|| panic!("no peak load for {policy} in {summary}"))
    };
    let (naive, budget) = (peak("naive"), peak("budget"));
    assert!(naive > 2.0 * budget, "naive peak {naive:.1}x should dwarf budget peak {budget:.1}x");
    assert!(budget < 3.0, "a budget keeps the peak near the healthy load, got {budget:.1}x");
    assert!(out.join("storm.svg").exists());

    let requests =
        |policy: &str| rows.iter().find(|r| r["policy"] == policy).and_then(|r| r["requests"].as_u64());
    assert!(requests("naive").is_some_and(|n| n > 0));
    let _ = std::fs::remove_dir_all(out);
}
