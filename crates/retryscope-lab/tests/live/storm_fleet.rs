//! `retryscope storm --rate-limited --replicas 3` through the real binary, on
//! the real Redis (`RETRYSCOPE_REDIS_URL`; skipped outside CI without it):
//! three client processes share one gateway's quota of 60 requests per 1-s
//! window, offering about twice it, for 5 s.
//!
//! Shared pacing is held to the storm's target, read from its JSON: at most
//! 10 429s per 1,000 attempts and at least 95 % of the quota served.

use crate::summary::{number, row};
use serde_json::Value;
use std::process::Command;

fn redis_url() -> Option<String> {
    retryscope_test_support::external::required("RETRYSCOPE_REDIS_URL", "a Redis for the fleet storm")
}

/// Runs the fleet storm with `extra` flags; its JSON and its table.
fn storm(name: &str, extra: &[&str]) -> (Value, String) {
    let out = std::env::temp_dir().join(format!("retryscope-storm-fleet-test-{name}-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args([
            "storm",
            "--rate-limited",
            "--replicas",
            "3",
            "--clients",
            "12",
            "--rate",
            "10",
            "--quota",
            "60",
        ])
        .args(["--duration", "5", "--deadline", "2", "--seed", "7"])
        .args(extra)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run retryscope storm --rate-limited --replicas 3");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "storm failed: {stderr}");
    // Each replica ends once it has reported; none is waited out and killed.
    assert!(!stderr.contains("did not end"), "{stderr}");
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    eprintln!("{name}:\n{table}");
    let svg = std::fs::read_to_string(out.join("storm-rate-limited-fleet.svg")).expect("the chart");
    assert!(svg.starts_with("<svg") && svg.contains("quota (60/s)"), "not the chart");
    let json = std::fs::read(out.join("storm-rate-limited-fleet.json")).expect("the JSON");
    let _ = std::fs::remove_dir_all(&out);
    (serde_json::from_slice(&json).expect("valid JSON"), table)
}

#[test]
fn three_processes_sharing_their_pace_through_redis_spend_the_quota_once() {
    let Some(redis) = redis_url() else { return };
    let (fleet, table) = storm("shared", &["--fleet-policies", "local,shared", "--redis", &redis]);
    for expected in ["429s / 1000", "of quota", "worst replica", "shared", "fallbacks", "local"] {
        assert!(table.contains(expected), "{expected:?} missing from\n{table}");
    }
    assert_eq!(fleet["replicas"], 3);
    assert_eq!(fleet["quota"]["per_second"], 60.0);
    assert_eq!(fleet["target"]["max_429_per_1000"], 10.0);
    assert_eq!(fleet["target"]["min_goodput_share"], 0.95);
    // The target, on the shared run.
    let (per_1000, share) =
        (number(&fleet, "shared", "per_1000_429"), number(&fleet, "shared", "goodput_share"));
    assert!(per_1000 <= 10.0, "shared: {per_1000} 429s per 1,000\n{table}");
    assert!(share >= 0.95, "shared: {:.1} % of the quota\n{table}", share * 100.0);
    assert_eq!(row(&fleet, "shared")["meets_target"], true);
    // Shared nearly all along (a heartbeat slower than its deadline, 50 ms
    // by default, three times in a row on a busy machine drops a replica to
    // local pacing for a moment: counted, not hidden), and every replica
    // served.
    assert!(number(&fleet, "shared", "shared_share") >= 0.9, "{table}");
    assert!(number(&fleet, "shared", "worst_replica_share") > 0.5, "{table}");
    // Each replica alone learns the quota from its own answers: the fleet
    // spends it three times over at each reset, and the gateway says 429.
    assert!(number(&fleet, "local", "per_1000_429") > per_1000 + 20.0, "{table}");
    assert!(row(&fleet, "local")["shared_share"].is_null());
}

#[test]
fn the_shared_policy_is_refused_loudly_without_a_redis() {
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["storm", "--rate-limited", "--replicas", "2", "--fleet-policies", "shared"])
        .args(["--redis", "redis://127.0.0.1:1/"])
        .env_remove("RETRYSCOPE_REDIS_URL")
        .output()
        .expect("run retryscope");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the shared policy needs a Redis, and none answered at redis://127.0.0.1:1/"),
        "{stderr}"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["storm", "--rate-limited", "--replicas", "1"])
        .output()
        .expect("run retryscope");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--replicas must be between 2 and 32"));
}

/// The fleet storm as the lab guide prints it (`storm --rate-limited
/// --replicas 8`, every policy), shortened to 3 s of load, with no Redis
/// given: it starts its own redis-server for the shared run (skipped outside
/// CI without one on PATH).
#[test]
fn the_documented_fleet_storm_runs_with_no_redis_given_on_a_redis_server_of_its_own() {
    if !retryscope_test_support::external::on_path("redis-server", "the fleet storm's own Redis") {
        return;
    }
    let out =
        std::env::temp_dir().join(format!("retryscope-storm-fleet-test-own-redis-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["storm", "--rate-limited", "--replicas", "8", "--duration", "3", "--deadline", "2"])
        .arg("--out")
        .arg(&out)
        .env_remove("RETRYSCOPE_REDIS_URL")
        .output()
        .expect("run retryscope storm --rate-limited --replicas 8");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "storm failed: {stderr}");
    assert!(stderr.contains("started redis-server at redis://127.0.0.1:"), "{stderr}");
    // Each replica ends once it has reported; none is waited out and killed.
    assert!(!stderr.contains("did not end"), "{stderr}");
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    eprintln!("{table}");
    let json = std::fs::read(out.join("storm-rate-limited-fleet.json")).expect("the JSON");
    let _ = std::fs::remove_dir_all(&out);
    let fleet: Value = serde_json::from_slice(&json).expect("valid JSON");
    assert_eq!(fleet["replicas"], 8);
    for policy in ["local", "shared", "shared-redis-down", "adaptive"] {
        assert!(table.contains(policy), "{policy} missing from\n{table}");
    }
    // The shared run shared its pace through the storm's own Redis.
    assert!(number(&fleet, "shared", "shared_share") > 0.5, "{table}");
}

/// With no Redis given and no redis-server on PATH, a shared run is refused
/// before anything starts, naming the package to install and the flag.
#[test]
fn a_shared_fleet_storm_with_no_redis_and_none_on_path_names_the_package() {
    let empty =
        std::env::temp_dir().join(format!("retryscope-storm-fleet-empty-path-{}", std::process::id()));
    std::fs::create_dir_all(&empty).expect("an empty directory");
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["storm", "--rate-limited", "--replicas", "2", "--fleet-policies", "local,shared"])
        .env("PATH", &empty)
        .env_remove("RETRYSCOPE_REDIS_URL")
        .output()
        .expect("run retryscope storm --rate-limited --replicas 2");
    let _ = std::fs::remove_dir(&empty);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "ran without a Redis: {stderr}");
    assert!(stderr.contains("install the Debian package `redis-server`, or pass --redis URL"), "{stderr}");
    assert!(output.stdout.is_empty(), "no run started: {}", String::from_utf8_lossy(&output.stdout));
}
