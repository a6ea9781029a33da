//! `retryscope storm --config FILE`: the storm's clients take their settings
//! from a retryscope-config file, reloaded while the storm runs, and report
//! the configuration series (`retryscope_config_active`,
//! `retryscope_config_reloads_total`) the dashboards' Configuration row reads.
//! Live runs of the real binary on loopback, scaled down.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("retryscope-storm-config-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// retryscope-config's `ConfigHash` of `text`, as the gauge's label prints it.
fn hash(text: &str) -> String {
    retryscope_config::ConfigHash::of(text.as_bytes()).to_string()
}

/// Replaces the file whole, as an editor or a ConfigMap swap does.
fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// The scrape endpoint's text.
fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("response");
    body
}

#[test]
fn a_bad_file_is_refused_before_the_storm_with_its_line_and_column() {
    let d = dir("bad");
    let file = d.join("bad.toml");
    std::fs::write(&file, "[defaults]\nattempts = 0\n").expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["storm", "--policies", "backoff", "--duration", "2", "--outage", "0:1", "--config"])
        .arg(&file)
        .arg("--out")
        .arg(d.join("out"))
        .output()
        .expect("run retryscope storm");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a bad --config must fail the storm: {stderr}");
    assert!(stderr.contains("loading --config"), "{stderr}");
    assert!(stderr.contains("bad.toml:2:12: defaults.attempts: must be 1..=100, got 0"), "{stderr}");
    assert!(!d.join("out").join("storm.json").exists(), "no storm ran");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn config_is_refused_by_the_storms_that_do_not_read_it() {
    let output = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["storm", "--layers", "2", "--config", "any.toml"])
        .output()
        .expect("run retryscope storm");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("'--layers <LAYERS>' cannot be used with '--config <FILE>'"),
        "clap refuses the pair: {stderr}"
    );
}

#[test]
fn the_clients_take_the_files_policy_and_a_rewrite_reloads_it_while_a_bad_one_is_refused() {
    let d = dir("reload");
    let file = d.join("retryscope.toml");
    // One attempt: the backoff policy's own six are replaced, so the outage's
    // failures are not retried at all.
    let first = "[defaults]\nattempts = 1\n";
    let second = "[defaults]\nattempts = 1\nattempt_timeout = \"2s\"\n";
    write(&file, first);
    let mut child = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["storm", "--policies", "backoff", "--clients", "4", "--rate", "5", "--duration", "6"])
        .args(["--outage", "1:2", "--prometheus", "127.0.0.1:0", "--linger", "3", "--config"])
        .arg(&file)
        .arg("--out")
        .arg(d.join("out"))
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("run retryscope storm");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut addr = None;
    let mut log = String::new();
    for line in lines.by_ref() {
        let line = line.expect("stderr line");
        log.push_str(&line);
        log.push('\n');
        if let Some(rest) = line.strip_prefix("storm: metrics at http://") {
            addr = rest.strip_suffix("/metrics").map(str::to_owned);
        }
        if line.starts_with("storm: backoff") {
            break;
        }
    }
    let addr = addr.unwrap_or_else(|| panic!("no metrics address in {log}"));
    assert!(log.contains(&format!("(hash {})", hash(first))), "{log}");
    assert!(scrape(&addr).contains(&format!("retryscope_config_hash=\"{}\"", hash(first))));

    write(&file, second);
    let reloaded = |text: &str, ok: bool, refused: bool| {
        text.contains(&format!("retryscope_config_active{{retryscope_config_hash=\"{}\"", hash(second)))
            && text.contains("retryscope_config_reloads_total{result=\"ok\"") == ok
            && text.contains("retryscope_config_reloads_total{result=\"refused\"") == refused
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut text = scrape(&addr);
    while !reloaded(&text, true, false) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        text = scrape(&addr);
    }
    assert!(reloaded(&text, true, false), "the rewrite is in force within 2 s:\n{text}");

    write(&file, "[defaults]\nattempts = 0\n");
    let deadline = Instant::now() + Duration::from_secs(2);
    while !reloaded(&text, true, true) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        text = scrape(&addr);
    }
    assert!(reloaded(&text, true, true), "the bad rewrite is refused, the second file kept:\n{text}");

    for line in lines {
        log.push_str(&line.expect("stderr line"));
        log.push('\n');
    }
    assert!(child.wait().expect("wait").success(), "{log}");
    let summary: Value =
        serde_json::from_slice(&std::fs::read(d.join("out").join("storm.json")).expect("storm.json"))
            .expect("valid JSON");
    let row = &summary["summary"][0];
    assert_eq!(row["policy"], "backoff");
    // The outage failed calls, and with one attempt none of them was retried.
    assert!(row["failed"].as_u64().expect("failed") > 0, "{row}");
    assert_eq!(row["retry_ratio"].as_f64(), Some(0.0), "{row}");
    assert_eq!(row["requests"], row["attempts"], "{row}");
    let _ = std::fs::remove_dir_all(&d);
}
