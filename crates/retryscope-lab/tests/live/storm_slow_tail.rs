//! `retryscope storm --slow-tail` through the real binary, shortened: a server
//! answering 2 % of its requests in 1 s and the rest in 2–4 ms, 16 clients
//! offering 160 calls/s (half the default, to stay light on a shared 2-core
//! machine, where a busy CPU adds its own tail to the fast calls), each
//! hedging policy for 6 s.
//!
//! Live runs on loopback (real sockets, real time). Without hedging the slow
//! 2 % *is* the p99, about 1 s; a hedge at the p95 of the recent latencies
//! answers a slow call with its second copy a few milliseconds later, for
//! about 5 % more requests. The test asserts issue 26's target for the
//! percentile policy as the JSON reports it — p99 at least 5× lower than
//! without hedging, at most 10 % extra load, no failed call — and that the
//! server sees the cancelled copies go (their connections close while it is
//! still working on them).

use crate::summary::number;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// Runs `retryscope storm --slow-tail` shortened, with `extra` flags, and
/// returns its JSON summary and its table.
fn storm(name: &str, extra: &[&str]) -> (Value, String) {
    let out = out_dir(name);
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["storm", "--slow-tail", "--clients", "16", "--duration", "6", "--seed", "7"])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run retryscope storm --slow-tail");
    assert!(output.status.success(), "storm failed: {}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    // Shown when a test fails (or with --nocapture): the whole run at a glance.
    eprintln!("{name}:\n{table}");
    let svg = std::fs::read_to_string(out.join("slow-tail.svg")).expect("the chart");
    assert!(svg.starts_with("<svg") && svg.contains("Call latency by percentile"), "not the chart");
    let json = std::fs::read(out.join("slow-tail.json")).expect("slow-tail.json");
    let summary: Value = serde_json::from_slice(&json).expect("valid JSON");
    let _ = std::fs::remove_dir_all(&out);
    (summary, table)
}

#[test]
fn a_percentile_hedge_cuts_the_p99_of_a_slow_tail_five_times_for_at_most_ten_percent_more_load() {
    let (summary, table) = storm("default", &[]);
    for expected in
        ["p50", "p99", "p99.9", "extra load", "cancelled", "none", "fixed", "percentile", "target"]
    {
        assert!(table.contains(expected), "{expected:?} missing from\n{table}");
    }
    assert_eq!(summary["target"]["min_p99_cut"], 5.0);
    assert_eq!(summary["target"]["max_extra_load"], 0.1);
    assert_eq!(summary["tail"]["slow_share"], 0.02);
    for policy in ["none", "fixed", "percentile"] {
        let calls = number(&summary, policy, "calls");
        assert!(calls >= 700.0, "{policy}: {calls} of 960 calls planned");
        assert_eq!(number(&summary, policy, "failed"), 0.0, "{policy}: no call fails\n{table}");
    }

    // Without hedging the tail is the server's: 2 % of calls take a second.
    let none_p99 = number(&summary, "none", "p99_ms");
    assert!(none_p99 >= 900.0, "without hedging the p99 is the slow tail, got {none_p99:.1} ms");
    assert!(number(&summary, "none", "p50_ms") < 50.0);
    assert!(number(&summary, "none", "extra_load").abs() < 0.005, "one request per call\n{table}");
    assert_eq!(number(&summary, "none", "hedges_per_call"), 0.0);

    // The percentile policy: the target, read from the JSON as the README shows it.
    let p99 = number(&summary, "percentile", "p99_ms");
    let extra = number(&summary, "percentile", "extra_load");
    assert!(none_p99 / p99 >= 5.0, "p99 {p99:.1} ms against {none_p99:.1} ms without hedging\n{table}");
    assert!(extra <= 0.10, "the percentile policy adds {:.1} % load\n{table}", extra * 100.0);
    assert!(extra > 0.0, "it does hedge");
    assert_eq!(summary["target"]["met"], true, "{table}");
    assert!(number(&summary, "percentile", "p99_cut") >= 5.0);

    // A fixed 50 ms delay hedges the slow calls and those a busy machine made
    // slower than 50 ms: the tail is cut towards the delay (about 13× in a
    // quiet release run, 4× on a 2-core machine busy compiling), for a few
    // percent of extra load.
    let fixed_p99 = number(&summary, "fixed", "p99_ms");
    assert!(none_p99 / fixed_p99 >= 2.0, "fixed: p99 {fixed_p99:.1} ms\n{table}");
    assert!(number(&summary, "fixed", "extra_load") <= 0.10, "{table}");

    // The server saw the losing copies go: their connections closed while it
    // was still working on them.
    for policy in ["fixed", "percentile"] {
        assert!(number(&summary, policy, "cancelled_seen_by_server") > 0.0, "{policy}\n{table}");
    }
    assert_eq!(number(&summary, "none", "cancelled_seen_by_server"), 0.0, "{table}");
    let runs = summary["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3);
    assert!(runs[0]["server_received"].as_array().is_some_and(|slices| slices.len() >= 40));
    assert!(runs[0]["latencies_s"].as_array().is_some_and(|l| l.len() >= 700));
}

#[test]
fn slow_tail_settings_out_of_range_are_refused_with_a_clear_error() {
    for (args, expected) in [
        (&["--slow-tail", "--slow-share", "1.5"][..], "--slow-share"),
        (&["--slow-tail", "--slow-ms", "2000"][..], "attempt timeout"),
        (&["--slow-tail", "--hedge-delay-ms", "0"][..], "--hedge-delay-ms"),
        (&["--slow-tail", "--hedge-quantile", "1"][..], "--hedge-quantile"),
        (&["--slow-share", "0.1"][..], "--slow-tail"),
        (&["--slow-tail", "--rate-limited"][..], "--rate-limited"),
        (&["--slow-tail", "--outage", "1:1"][..], "--outage"),
        (&["--slow-tail", "--hedge-policies", "twice"][..], "none, fixed, percentile"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .arg("storm")
            .args(args)
            .arg("--out")
            .arg(out_dir("refused"))
            .output()
            .expect("run retryscope storm");
        assert!(!output.status.success(), "{args:?} should be refused");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {expected:?} missing from {stderr}");
    }
}

fn out_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("retryscope-storm-slow-tail-test-{name}-{}", std::process::id()))
}
