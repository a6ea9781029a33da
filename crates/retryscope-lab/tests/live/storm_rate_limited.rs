//! `retryscope storm --rate-limited` through the real binary, shortened: a
//! gateway with a quota of 200 requests per 1-s window, 40 clients offering
//! 400/s, each policy for 4 s with calls bounded by 2 s.
//!
//! Live runs on loopback (real sockets, real time). What they assert follows
//! from who sends what, with wide margins: per-call retries answer about half
//! their attempts with a 429 (≈ 550 per 1,000 in a typical run), the pacer
//! almost none (0 with the draft's fields, ≈ 1–40 with the vendor's).
//!
//! The pacer's target — at most 10 429s per 1,000 attempts and at least 95 %
//! of the quota served — is asserted with a margin for a 4-s run on a busy
//! 2-core machine (90 %), with the draft's whole-second resets (which the
//! pacer reads as an upper bound on the window's end, keeping the earliest it
//! has seen) and with the vendor's to-the-millisecond ones alike.

use crate::summary::{number, row};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// Runs `retryscope storm --rate-limited` shortened, with `extra` flags, and
/// returns its JSON summary and its table.
fn storm(name: &str, extra: &[&str]) -> (Value, String) {
    let out = std::env::temp_dir().join(format!("retryscope-storm-rate-test-{name}-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["storm", "--rate-limited", "--duration", "4", "--deadline", "2", "--seed", "7"])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run retryscope storm --rate-limited");
    assert!(output.status.success(), "storm failed: {}", String::from_utf8_lossy(&output.stderr));
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    // Shown when a test fails (or with --nocapture): the whole run at a glance.
    eprintln!("{name}:\n{table}");
    let svg = std::fs::read_to_string(out.join("storm-rate-limited.svg")).expect("the chart");
    assert!(
        svg.starts_with("<svg") && svg.contains("Answered 429") && svg.contains("quota (200/s)"),
        "not the chart"
    );
    let json = std::fs::read(out.join("storm-rate-limited.json")).expect("storm-rate-limited.json");
    let summary: Value = serde_json::from_slice(&json).expect("valid JSON");
    let _ = std::fs::remove_dir_all(&out);
    (summary, table)
}

fn failed_because(summary: &Value, policy: &str, reason: &str) -> u64 {
    row(summary, policy)["failed_by_reason"][reason].as_u64().unwrap_or(0)
}

#[test]
fn the_pacer_stops_the_429s_that_per_call_retries_send_and_reaches_the_quota_when_told_its_reset_precisely() {
    let (draft, table) = storm("draft", &[]);
    for expected in
        ["429s / 1000", "of quota", "p99 ok", "p99 all", "failed by reason", "per-call", "adaptive"]
    {
        assert!(table.contains(expected), "{expected:?} missing from\n{table}");
    }
    // The JSON: its parameters, the target, a row per policy with every
    // figure, and the time series behind the chart.
    assert_eq!(draft["quota"]["per_second"], 200.0);
    assert_eq!(draft["offered_per_s"], 400.0);
    assert_eq!(draft["target"]["max_429_per_1000"], 10.0);
    assert_eq!(draft["target"]["min_goodput_share"], 0.95);
    for policy in ["per-call", "pacer", "adaptive"] {
        for field in ["attempts", "answered_429", "per_1000_429", "goodput_per_s", "goodput_share", "calls"] {
            assert!(row(&draft, policy)[field].is_number(), "{field} of {policy}: {draft}");
        }
        for field in ["succeeded", "failed", "failed_share", "p99_ok_s", "p99_all_s"] {
            assert!(row(&draft, policy)[field].is_number(), "{field} of {policy}: {draft}");
        }
        assert!(row(&draft, policy)["failed_by_reason"].is_object());
        assert!(row(&draft, policy)["meets_target"].is_boolean());
        // Every call the clients started is accounted for.
        let (calls, ok, failed) = (
            number(&draft, policy, "calls"),
            number(&draft, policy, "succeeded"),
            number(&draft, policy, "failed"),
        );
        assert!(
            calls >= 1_400.0 && ok + failed == calls,
            "{policy}: {calls} calls, {ok} ok, {failed} failed"
        );
    }
    let runs = draft["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3);
    assert!(runs[0]["server_received"].as_array().is_some_and(|slices| slices.len() >= 40));

    // Per call: every caller finds out about the quota by hitting it, and
    // comes back for more. Its retries keep the quota saturated.
    let per_call = number(&draft, "per-call", "per_1000_429");
    assert!(
        per_call > 300.0,
        "per-call retries are answered 429 about half the time, got {per_call:.1}/1000"
    );
    assert!(number(&draft, "per-call", "goodput_share") >= 0.95);
    assert!(failed_because(&draft, "per-call", "429") > 0, "per-call callers get 429s back");

    // The pacer: what one response said holds back every call.
    let pacer = number(&draft, "pacer", "per_1000_429");
    assert!(pacer <= 10.0, "the pacer's 429s are within the target of 10 per 1,000, got {pacer:.1}");
    assert!(pacer * 10.0 < per_call, "the pacer {pacer:.1} vs per-call {per_call:.1} 429s per 1,000");
    assert!(failed_because(&draft, "pacer", "rate_limited") > 0, "the excess is refused unsent");
    // The quota served, though calls are held and refused in the client.
    let goodput = number(&draft, "pacer", "goodput_share");
    assert!(goodput >= 0.90, "the pacer serves {:.0} % of the quota", goodput * 100.0);

    // The same gateway, its reset to the millisecond: the pacer fills the quota too.
    let (vendor, _) = storm("vendor", &["--quota-headers", "vendor", "--rate-policies", "pacer"]);
    let precise = number(&vendor, "pacer", "goodput_share");
    assert!(
        precise >= 0.90,
        "told its reset precisely, the pacer serves {:.0} % of the quota",
        precise * 100.0
    );
    let refused = number(&vendor, "pacer", "per_1000_429");
    assert!(refused * 10.0 < per_call, "{refused:.1} 429s per 1,000 with the vendor's fields");
}

#[test]
fn rate_limited_settings_out_of_range_are_refused_with_a_clear_error() {
    for (args, expected) in [
        (&["--rate-limited", "--quota", "0"][..], "--quota"),
        (&["--rate-limited", "--deadline", "0"][..], "--deadline"),
        (&["--quota", "100"][..], "--rate-limited"),
        (&["--rate-limited", "--layers", "3"][..], "--layers"),
        (&["--rate-limited", "--outage", "1:1"][..], "--outage"),
        (&["--rate-policies", "pacer"][..], "--rate-limited"),
        (&["--rate-limited", "--rate-policies", "retry-harder"][..], "per-call, pacer, adaptive"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .arg("storm")
            .args(args)
            .arg("--out")
            .arg(out_dir())
            .output()
            .expect("run retryscope storm");
        assert!(!output.status.success(), "{args:?} should be refused");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {expected:?} missing from {stderr}");
    }
}

fn out_dir() -> PathBuf {
    std::env::temp_dir().join(format!("retryscope-storm-rate-test-refused-{}", std::process::id()))
}
