//! `retryscope storm --layers 3` through the real binary, with small settings:
//! the table, the JSON and the chart, and the amplification they show.
//!
//! A live run on loopback (real sockets, real time). What it asserts holds
//! whatever the machine's speed: counts that follow from who retries, with
//! margins far from the expected values (per-layer retries make about 8 calls
//! at the bottom per user request over this run, one-layer retries about 2.5).

use serde_json::Value;
use std::process::Command;

#[test]
fn a_layered_storm_shows_retries_multiplying_down_the_chain() {
    let out = std::env::temp_dir().join(format!("retryscope-storm-layers-test-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["storm", "--layers", "3", "--clients", "5", "--rate", "10"])
        .args(["--duration", "4", "--outage", "1.5:2", "--out"])
        .arg(&out)
        .output()
        .expect("run retryscope storm --layers 3");
    assert!(output.status.success(), "storm failed: {}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8_lossy(&output.stdout);
    for expected in ["per user", "retried in", "retry ratio", "per-layer", "one-layer", "budget", "service-3"]
    {
        assert!(table.contains(expected), "{expected:?} missing from\n{table}");
    }

    let summary: Value = serde_json::from_slice(&std::fs::read(out.join("storm-layers.json")).expect("JSON"))
        .expect("valid JSON");
    let rows = summary["summary"].as_array().expect("summary rows");
    assert_eq!(rows.len(), 3 * 3, "a row per policy and service: {summary}");
    let row = |policy: &str, service: &str| {
        rows.iter()
            .find(|r| r["policy"] == policy && r["service"] == service)
            .unwrap_or_else(|| panic!("no row for {policy} {service} in {summary}"))
    };
    let number = |policy: &str, service: &str, field: &str| {
        row(policy, service)[field].as_f64().unwrap_or_else(|| panic!("no {field} for {policy} {service}"))
    };

    // The users do not retry: the top receives exactly the user requests.
    for policy in ["per-layer", "one-layer", "budget"] {
        assert!(number(policy, "service-1", "received") > 0.0);
        assert_eq!(number(policy, "service-1", "per_user_request"), 1.0);
        assert_eq!(number(policy, "service-1", "retried_share"), 0.0);
    }
    // Retrying at one layer: the top never retries, so the middle receives at
    // most one call per user request and the bottom at most four.
    assert!(number("one-layer", "service-2", "per_user_request") <= 1.0);
    assert!(number("one-layer", "service-3", "per_user_request") <= 4.0);
    assert_eq!(number("one-layer", "service-1", "retry_ratio"), 0.0);
    // Retrying at every layer multiplies: far more calls at the bottom, and
    // retries of retries among them (attempts 4+ from the middle).
    let (per_layer, one_layer) = (
        number("per-layer", "service-3", "per_user_request"),
        number("one-layer", "service-3", "per_user_request"),
    );
    assert!(
        per_layer > 2.0 * one_layer,
        "per-layer {per_layer:.1} vs one-layer {one_layer:.1} at the bottom"
    );
    assert!(number("per-layer", "service-2", "retried_share") > 0.0);
    assert!(number("per-layer", "service-1", "retry_ratio") > 0.0);
    assert!(row("per-layer", "service-3")["retry_ratio"].is_null(), "the bottom calls nothing");

    // The time series behind the chart, a line per service and policy.
    let runs = summary["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3);
    let bottom = &runs[0]["services"][2];
    assert_eq!(bottom["service"], "service-3");
    assert!(bottom["attempts"]["4+"].as_u64().is_some_and(|n| n > 0), "{bottom}");
    assert!(bottom["received"].as_array().is_some_and(|slices| slices.len() >= 40));

    let svg = std::fs::read_to_string(out.join("storm-layers.svg")).expect("the chart");
    assert!(
        svg.starts_with("<svg") && svg.contains("service-3") && svg.contains("one-layer"),
        "not the chart"
    );
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn a_chain_of_one_service_is_refused_with_a_clear_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["storm", "--layers", "1"])
        .output()
        .expect("run retryscope storm --layers 1");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--layers") && stderr.contains("2..=4"), "{stderr}");
}
