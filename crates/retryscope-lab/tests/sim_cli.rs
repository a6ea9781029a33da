//! The real `retryscope simulate` binary.

use std::process::{Command, Output};

fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retryscope")).arg("simulate").args(args).output().expect("binary runs")
}

#[test]
fn herd_prints_json_rows() {
    let args = ["herd", "--clients", "10", "--trials", "5", "--format", "json"];
    let output = simulate(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON output");
    let rows = rows.as_array().expect("an array of rows");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["strategy"].as_str()).collect();
    assert_eq!(names, ["none", "expo", "equal", "full", "decorrelated"]);
    for row in rows {
        assert_eq!(row["clients"], 10);
        assert!(row["calls"].as_f64().is_some_and(|c| c >= 10.0), "{row}");
        assert!(row["time_ms"].as_f64().is_some_and(|t| t > 0.0), "{row}");
    }
    // Same seed, same bytes, across processes too.
    assert_eq!(simulate(&args).stdout, output.stdout);
}

#[test]
fn herd_accepts_a_list_of_client_counts_and_writes_a_chart() {
    let svg = std::env::temp_dir().join(format!("retryscope-herd-{}.svg", std::process::id()));
    let svg_arg = svg.to_str().expect("UTF-8 temp path");
    let output = simulate(&["herd", "--clients", "5,10", "--trials", "2", "--svg", svg_arg]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8_lossy(&output.stdout);
    assert_eq!(table.lines().count(), 2 + 10, "{table}");
    let chart = std::fs::read_to_string(&svg).expect("chart written");
    let _ = std::fs::remove_file(&svg);
    assert!(chart.starts_with("<svg") && chart.contains("decorrelated"), "not an SVG chart");
}

#[test]
fn told_prints_both_strategies_per_client_count_and_writes_a_chart() {
    let svg = std::env::temp_dir().join(format!("retryscope-told-{}.svg", std::process::id()));
    let svg_arg = svg.to_str().expect("UTF-8 temp path");
    let args = ["told", "--clients", "20,100", "--retry-after", "1s", "--format", "json", "--svg", svg_arg];
    let output = simulate(&args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON output");
    let rows = rows.as_array().expect("an array of rows");
    let names: Vec<(&str, u64)> =
        rows.iter().filter_map(|r| Some((r["strategy"].as_str()?, r["clients"].as_u64()?))).collect();
    assert_eq!(names, [("as-told", 20), ("retryscope", 20), ("as-told", 100), ("retryscope", 100)]);
    for row in rows {
        assert!(row["first_ms"].as_f64().is_some_and(|t| t >= 1_000.0), "{row}");
    }
    let chart = std::fs::read_to_string(&svg).expect("chart written");
    let _ = std::fs::remove_file(&svg);
    assert!(chart.starts_with("<svg") && chart.contains("retryscope (100 clients)"), "not the chart");
    // Same seed, same bytes, across processes too.
    assert_eq!(simulate(&args).stdout, output.stdout);
}

#[test]
fn bad_flags_are_clear_errors() {
    for (args, expected) in [
        (&["herd", "--clients", "0"][..], "--clients"),
        (&["herd", "--trials", "0"][..], "--trials"),
        (&["amplify", "--failure-rates", "0.1,2"][..], "failure rate"),
        (&["amplify", "--rate=-1"][..], "--rate"),
        (&["herd", "--strategies", "bogus"][..], "bogus"),
        (&["told", "--clients", "0"][..], "--clients"),
        (&["told", "--retry-after", "-1s"][..], "negative"),
        (&["told", "--retry-after", "3600"][..], "--retry-after must be below 15s"),
        (&["told", "--retry-after", "soon"][..], "not a duration"),
        (&["metastable", "--strategies", "naive", "--throttle-window", "5"][..], "--throttle-window"),
        (&["metastable", "--crash-start", "58"][..], "--duration"),
    ] {
        let output = simulate(args);
        assert!(!output.status.success(), "{args:?} succeeded");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}
