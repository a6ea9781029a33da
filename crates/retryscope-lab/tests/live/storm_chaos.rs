//! `retryscope storm --chaos SPEC` through the real binary, shortened: a
//! healthy server, 16 clients × 10/s for 5 s per policy, and from 1 s to 3 s of
//! each run 40 % of the attempts answered 503 and 5 % stalled by the fault
//! middleware below the retries (seeded).
//!
//! Live runs on loopback (real sockets, real time). What must hold whatever the
//! machine's speed: the faults replace attempts rather than reach the server
//! (what the server received is the attempts less the injected ones); every
//! call started after the window succeeds (the server never was down); naive
//! retries get nearly every call through the window, at the cost of retries a
//! retry budget refuses; a bad SPEC is refused, naming where it is wrong.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

const SPEC: &str = "503@40%:1s-3s,stall@5%:1s-3s";

fn retryscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retryscope")).args(args).output().expect("run retryscope")
}

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("retryscope-storm-chaos-test-{name}-{}", std::process::id()))
}

fn number(row: &Value, field: &str) -> f64 {
    row[field].as_f64().unwrap_or_else(|| panic!("no {field} in {row}"))
}

#[test]
fn injected_faults_replace_attempts_and_the_healthy_server_serves_every_call_after_the_window() {
    let out = out_dir("default");
    let out_arg = out.to_string_lossy().into_owned();
    let output = retryscope(&[
        "storm",
        "--chaos",
        SPEC,
        "--policies",
        "naive,budget",
        "--clients",
        "16",
        "--duration",
        "5",
        "--seed",
        "7",
        "--out",
        &out_arg,
    ]);
    assert!(output.status.success(), "storm failed: {}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    eprintln!("{table}");
    for expected in [
        "storm --chaos 503@40:1s-3s,stall@5:1s-3s",
        "injected",
        "ok during chaos",
        "ok after",
        "naive",
        "budget",
    ] {
        assert!(table.contains(expected), "{expected:?} missing from\n{table}");
    }
    assert!(out.join("chaos.svg").exists(), "the chart");
    let summary: Value = serde_json::from_slice(&std::fs::read(out.join("chaos.json")).expect("chaos.json"))
        .expect("valid JSON");
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!(summary["window_s"], serde_json::json!([1.0, 3.0]));
    assert_eq!(summary["items"][0]["rule"], "503@40");

    let rows = summary["summary"].as_array().expect("rows");
    let runs = summary["runs"].as_array().expect("runs");
    for (row, run) in rows.iter().zip(runs) {
        let policy = row["policy"].as_str().expect("a name");
        let (attempts, injected) = (number(row, "attempts"), number(row, "injected"));
        let requests = number(row, "requests");
        assert!(requests >= 500.0, "{policy}: {requests} of 800 calls planned\n{table}");
        // About a third of the run's attempts fall in the window, 45 % of those are injected.
        let share = injected / attempts;
        assert!((0.08..=0.45).contains(&share), "{policy}: {injected} of {attempts} injected\n{table}");
        // A fault answers in place of the server: it received the others.
        let received: f64 =
            run["server_received"].as_array().expect("slices").iter().filter_map(Value::as_f64).sum();
        assert!(
            (received - (attempts - injected)).abs() <= attempts * 0.01,
            "{policy}: server received {received}, attempts {attempts} less {injected} injected\n{table}"
        );
        // The server was healthy: after the window every call succeeds.
        assert_eq!(number(row, "ok_after"), 1.0, "{policy}\n{table}");
    }
    let (naive, budget) = (&rows[0], &rows[1]);
    assert_eq!((naive["policy"].as_str(), budget["policy"].as_str()), (Some("naive"), Some("budget")));
    assert!(number(naive, "ok_during") >= 0.99, "naive retries get the calls through\n{table}");
    assert!(
        number(budget, "retry_ratio") < number(naive, "retry_ratio"),
        "the budget refuses some of the retries naive makes\n{table}"
    );
    // Naive: every attempt after a call's first is a retry.
    let retries = number(naive, "retry_ratio") * number(naive, "requests");
    assert!((number(naive, "attempts") - number(naive, "requests") - retries).abs() < 1.0, "{naive}");
}

#[test]
fn a_bad_spec_is_refused_naming_the_position_of_the_bad_part() {
    let output = retryscope(&["storm", "--chaos", "503@30%:0s-4s,stall@5x", "--out", "/nonexistent"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--chaos: at character 15 (\"stall@5x\"): not a fault rule")
            && stderr.contains("fault rate \"5x\" is not a percentage"),
        "{stderr}"
    );

    let output = retryscope(&["storm", "--chaos", "503@30:2s-9s", "--duration", "8"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("ends after the 8 s run"));

    let output = retryscope(&["storm", "--chaos", "503@30", "--outage", "1:2"]);
    assert!(!output.status.success(), "the outage is injected, not the server's");
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot be used with"));
}
