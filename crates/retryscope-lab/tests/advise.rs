//! `retryscope advise` against a real Prometheus holding generated series
//! with known answers: each dependency's recommendation is the one its rule
//! must give, the file is accepted by `check-config`, and every bad input is
//! refused with an error naming what is missing.

mod advise_support;

use advise_support::{free_port, prometheus};
use retryscope_lab::advise::rules::Value;
use retryscope_lab::advise::{self, AdviseArgs, AdviseError};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn out(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("retryscope-advise-{name}-{}.toml", std::process::id()))
}

fn args(url: &str, range: String, selector: &str, out: PathBuf) -> AdviseArgs {
    AdviseArgs {
        prometheus: url.to_owned(),
        range: Some(range),
        start: None,
        end: None,
        selector: selector.to_owned(),
        config: None,
        deadlines: vec!["blips.internal=2s".to_owned()],
        idempotent: vec!["search.internal".to_owned()],
        out,
        replay_json: None,
        replay_svg: None,
    }
}

/// `args` over the generated series' whole range, under `job="checkout"`.
fn on_generated(server: &advise_support::Prometheus, out: PathBuf) -> AdviseArgs {
    args(&server.url, range(server), "job=\"checkout\"", out)
}

/// The generated series' range, a step before the first sample to the last.
fn range(server: &advise_support::Prometheus) -> String {
    format!("{},{}", server.range.0 - advise_support::STEP, server.range.1)
}

fn table(v: Option<&Value>) -> Vec<(&'static str, Value)> {
    match v {
        Some(Value::Table(t)) => t.clone(),
        other => panic!("not a table: {other:?}"),
    }
}

fn get(t: &[(&'static str, Value)], key: &str) -> Value {
    t.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone()).unwrap_or_else(|| panic!("no {key} in {t:?}"))
}

fn ms(n: u64) -> Value {
    Value::Duration(Duration::from_millis(n))
}

#[test]
fn each_generated_dependency_gets_what_its_rule_must_give() {
    let Some(server) = prometheus() else { return };
    let path = out("lib");
    let report = advise::run(&on_generated(server, path.clone())).expect("advice");
    println!("{}\n{}", report.text, advise::replay::table(&report.replays));
    let advice = |name: &str| {
        report.advice.iter().map(|(a, _)| a).find(|a| a.name == name).unwrap_or_else(|| panic!("no {name}"))
    };

    // 2 s blips: 3 attempts, full jitter from 50 ms capped at half the 2 s deadline, a 10 % budget.
    let blips = advice("blips.internal");
    assert_eq!(blips.key("attempts"), Some(&Value::Int(3)));
    assert_eq!(blips.key("jitter"), Some(&Value::Name("full")));
    assert_eq!(blips.key("deadline"), Some(&ms(2000)));
    let backoff = table(blips.key("backoff"));
    assert_eq!((get(&backoff, "initial"), get(&backoff, "max")), (ms(50), ms(1000)));
    assert_eq!(get(&table(blips.key("budget")), "ratio"), Value::Float(0.1));
    // 1.5 × p99.9 (≈ 99.5 ms) fits three times in the 2 s deadline: the timeout is 150 ms.
    let Some(Value::Duration(timeout)) = blips.key("attempt_timeout") else { panic!("no attempt_timeout") };
    assert_eq!(*timeout, Duration::from_millis(150));
    assert!(blips.key("breaker").is_none() && blips.key("pacer").is_none() && blips.key("hedging").is_none());

    // The caller's 2 s deadline: an interactive caller, critical.
    assert_eq!(blips.key("priority"), Some(&Value::Name("critical")));

    // A 10-minute outage: a breaker.
    let ledger = advice("ledger.internal");
    let breaker = table(ledger.key("breaker"));
    assert_eq!(get(&breaker, "failure_ratio"), Value::Float(0.5));
    assert!(ledger.key("budget").is_some());
    assert!(ledger.observed.iter().any(|l| l.contains("longest outage")), "{:?}", ledger.observed);
    // No deadline given, 3 attempts at most: nothing says who waits, no priority.
    assert!(
        ledger.key("priority").is_none()
            && ledger.notes.iter().any(|n| n.starts_with("priority not written"))
    );

    // 429s: the throttled curve from 1 s, and the pacer.
    let quota = advice("quota.internal");
    assert_eq!(table(quota.key("pacer")), vec![("adaptive", Value::Bool(true))]);
    let backoff = table(quota.key("backoff"));
    assert_eq!(get(&backoff, "throttled_initial"), ms(1000));
    assert_eq!(get(&backoff, "throttled_max"), ms(15_000));
    assert!(quota.key("breaker").is_none());

    // The heavy tail (p99/p50 ≈ 110): a hedge at p95 ≈ 225 ms, nothing else to retry.
    let search = advice("search.internal");
    let hedging = table(search.key("hedging"));
    assert_eq!(get(&hedging, "max_copies"), Value::Int(2));
    let Value::Duration(delay) = get(&hedging, "delay") else { panic!("no delay") };
    assert!((Duration::from_millis(215)..=Duration::from_millis(235)).contains(&delay), "{delay:?}");
    assert!(search.key("attempts").is_none() && search.key("budget").is_none());

    // Healthy: the defaults stay; too little data: the defaults stay, and each says so.
    let healthy = advice("healthy.internal");
    assert!(healthy.keys.is_empty() && healthy.notes.iter().any(|n| n.starts_with("healthy")), "{healthy:?}");
    let sparse = advice("sparse.internal");
    assert!(
        sparse.keys.is_empty() && sparse.notes.iter().any(|n| n.starts_with("too little data")),
        "{sparse:?}"
    );

    // The file is what check-config accepts, and it says what it resolves to.
    let check = retryscope_lab::check_config::CheckConfigArgs {
        file: path.clone(),
        body_rules: Vec::new(),
        fallbacks: Vec::new(),
    };
    let effective = retryscope_lab::check_config::run(&check).expect("check-config accepts the file");
    assert!(
        effective.lines().any(|l| l.starts_with("ledger.internal") && l.contains("ratio=0.5,min_calls=20"))
    );
    let config =
        retryscope_config::Config::from_path(&path, &retryscope_config::KnownNames::new()).expect("loads");
    let target = retryscope_config::Target::http("search.internal", None, "/q");
    let hedge = config.resolve(&target).hedge().expect("hedged");
    assert_eq!(hedge.delay, delay);
    assert!(report.text.contains("# hedging: p99/p50"), "{}", report.text);

    // Every tuned dependency was replayed under the defaults in force and the
    // advice; none was worse here, so none was withheld.
    let replayed: Vec<&str> = report.replays.iter().map(|r| r.dependency.as_str()).collect();
    assert_eq!(replayed, ["blips.internal", "ledger.internal", "quota.internal", "search.internal"]);
    assert!(report.replays.iter().all(|r| !r.withheld && r.in_force.calls == r.recommended.calls));
    // The 429s wait on the recommended throttled curve (from 1 s) where the
    // defaults wait 200 ms: a longer tail, and no more load. (The replay does
    // not model a rate limit that clears under less load: see ASSUMPTIONS.)
    let quota = &report.replays[2];
    assert!(
        quota.recommended.p99 > quota.in_force.p99 + 0.5,
        "{:?} {:?}",
        quota.in_force.p99,
        quota.recommended.p99
    );
    assert!(quota.recommended.amplification <= quota.in_force.amplification * 1.05);
    // No run of steps at or above 0.5 in blips, quota or search: no recovery to
    // time; the ledger's outage is timed on both sides.
    for r in &report.replays {
        assert_eq!(r.in_force.recovery.is_some(), r.dependency == "ledger.internal", "{}", r.dependency);
    }
    // A third of the ledger's range was an outage: about two thirds answered, either way.
    let ledger = &report.replays[1];
    assert!((0.6..0.7).contains(&ledger.recommended.answered), "{ledger:?}");
    assert!(report.text.contains("# replay (18000 calls): in force answered"), "{}", report.text);
    let _ = std::fs::remove_file(&path);
}

/// `retryscope advise …` as a user runs it: exit status, stdout, stderr.
fn run_binary(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_retryscope")).args(args).output().expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_binary_writes_a_file_that_check_config_accepts_and_the_replay_as_json_and_svg() {
    let Some(server) = prometheus() else { return };
    // `--out DIR/`: the file, replay.json and replay.svg in it.
    let dir = std::env::temp_dir().join(format!("retryscope-advise-bin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out_dir = format!("{}/", dir.display());
    let range = range(server);
    let (ok, stdout, stderr) = run_binary(&[
        "advise",
        "--prometheus",
        &server.url,
        "--range",
        &range,
        "--selector",
        "{job=\"checkout\"}",
        "--out",
        &out_dir,
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("6 dependencies"), "{stdout}");
    // The replay's table, with the time to recover, and its assumptions.
    let ledger_row = stdout.lines().find(|l| l.starts_with("ledger.internal")).unwrap_or_default();
    assert!(ledger_row.ends_with("written"), "{stdout}");
    assert!(stdout.contains("recover") && stdout.contains("the replay's assumptions:"), "{stdout}");
    // The same figures as JSON.
    let replays: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("replay.json")).expect("json")).expect("JSON");
    assert!(replays["assumptions"].as_array().is_some_and(|a| a.len() >= 5), "{replays}");
    let deps = replays["dependencies"].as_array().expect("dependencies");
    let ledger = deps.iter().find(|r| r["dependency"] == "ledger.internal").expect("ledger replayed");
    assert!(ledger["recommended"]["answered"].as_f64().is_some_and(|a| a > 0.5), "{ledger}");
    // The ten-minute outage is in the timeline: both sides measured their recovery from it.
    for side in ["in_force", "recommended"] {
        let r = &ledger[side]["recovery"];
        assert!(
            r["outage_end"].as_f64().unwrap_or(0.0) - r["outage_start"].as_f64().unwrap_or(0.0) >= 300.0,
            "{r}"
        );
        assert!(r["pre_outage"].as_f64().is_some_and(|p| p > 0.99), "{r}");
        assert!(ledger[side]["timeline"].as_array().is_some_and(|t| t.len() > 50), "{side}");
    }
    // The chart: an SVG document with one panel per replayed dependency, each
    // with both sides' lines.
    let svg = std::fs::read_to_string(dir.join("replay.svg")).expect("svg");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "not an SVG document");
    assert_eq!(svg.matches("<svg").count(), 1);
    for d in deps {
        let name = d["dependency"].as_str().expect("name");
        assert!(svg.contains(&format!("{name}: load")), "no panel for {name}");
    }
    assert!(balanced(&svg), "the SVG's elements do not nest");
    assert_eq!(svg.matches("\nin force\n</text>").count(), deps.len(), "one in-force legend per panel");
    assert_eq!(svg.matches("\nrecommended\n</text>").count(), deps.len(), "one recommended legend per panel");
    assert!(svg.matches("<polyline").count() >= 2 * deps.len());
    let file = dir.join("advised.toml");
    let text = std::fs::read_to_string(&file).expect("written");
    // Without --idempotent, the heavy tail is named but not hedged.
    assert!(text.contains("pass --idempotent search.internal") && !text.contains("hedging ="), "{text}");
    let (ok, table, stderr) = run_binary(&["check-config", file.to_str().expect("utf-8 temp path")]);
    assert!(ok, "{stderr}");
    assert!(table.lines().any(|l| l.starts_with("quota.internal") && l.contains("adaptive")), "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether every element of an XML document is closed in order (no comments,
/// CDATA or processing instructions: plotters writes none).
fn balanced(xml: &str) -> bool {
    let mut open: Vec<&str> = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find('<') {
        let Some(j) = rest[i..].find('>') else { return false };
        let tag = &rest[i + 1..i + j];
        rest = &rest[i + j + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            if open.pop() != Some(name.trim()) {
                return false;
            }
        } else if !tag.ends_with('/') && !tag.starts_with('?') {
            open.push(tag.split_whitespace().next().unwrap_or(""));
        }
    }
    open.is_empty()
}

/// Runs the binary expecting a refusal; its stderr.
fn refused(url: &str, selector: &str, range: &str) -> String {
    let path = out("refused");
    let (ok, _, stderr) = run_binary(&[
        "advise",
        "--prometheus",
        url,
        "--range",
        range,
        "--selector",
        selector,
        "--out",
        path.to_str().expect("utf-8"),
    ]);
    assert!(!ok, "accepted: {selector}");
    assert!(!path.exists(), "a refused run wrote {}", path.display());
    stderr
}

#[test]
fn an_unreachable_prometheus_is_refused_by_name() {
    let url = format!("http://127.0.0.1:{}", free_port());
    let stderr = refused(&url, "job=\"checkout\"", "1h");
    assert!(stderr.contains(&format!("Prometheus does not answer at {url}")), "{stderr}");
}

#[test]
fn a_selector_matching_nothing_a_renamed_series_and_an_absurd_latency_are_refused() {
    let Some(server) = prometheus() else { return };
    let range = range(server);
    let stderr = refused(&server.url, "job=\"nope\"", &range);
    assert!(
        stderr.contains("no retryscope_requests_total{job=\"nope\"}")
            && stderr.contains("the selector matches no retryscope series"),
        "{stderr}"
    );
    let stderr = refused(&server.url, "job=\"renamed\"", &range);
    assert!(
        stderr.contains("no retryscope_attempt_duration_seconds_count{job=\"renamed\"}")
            && stderr.contains("retryscope_attempt_latency_seconds_count"),
        "{stderr}"
    );
    let stderr = refused(&server.url, "job=\"absurd\"", &range);
    assert!(
        stderr.contains("retryscope_attempt_duration_seconds_bucket of dependency \"healthy.internal\"")
            && stderr.contains("above one day"),
        "{stderr}"
    );
}

#[test]
fn ranges_and_deadlines_that_cannot_be_read_are_refused_before_any_query() {
    assert_eq!(advise::parse_range("30m", 10_000.0).map(|r| r.1).ok(), Some(Duration::from_secs(1800)));
    assert_eq!(advise::parse_range("100,400", 0.0).map(|r| r.0).ok(), Some(400.0));
    for bad in ["", "30", "5s", "400,100", "x,y", "40d"] {
        assert!(
            matches!(advise::parse_range(bad, 1e9), Err(AdviseError::Argument { flag: "--range", .. })),
            "{bad}"
        );
    }
    // RFC 3339 as well as unix seconds, for --start and --end.
    let window = |r: Option<&str>, s: Option<&str>, e: Option<&str>| advise::range::window(r, s, e, 2e9);
    assert_eq!(
        window(None, Some("2026-12-05T03:00:00Z"), Some("2026-12-05T04:30:00+01:00")).ok(),
        Some((1_796_441_400.0, Duration::from_secs(1800)))
    );
    assert_eq!(
        window(None, Some("1796437800.5"), Some("1796441400")).ok(),
        Some((1_796_441_400.0, Duration::from_secs(3599)))
    );
    assert_eq!(
        window(Some("30m"), None, Some("2026-12-05T03:30:00.000Z")).ok(),
        Some((1_796_441_400.0, Duration::from_secs(1800)))
    );
    assert_eq!(window(Some("30m"), None, None).map(|w| w.0).ok(), Some(2e9));
    // Bad values and combinations: refused naming the flag, and saying what is accepted.
    let refusal = |r, s, e| window(r, s, e).expect_err("refused").to_string();
    let e = refusal(None, Some("2026-13-05T03:00:00Z"), None);
    assert!(e.starts_with("--start: \"2026-13-05T03:00:00Z\" is neither an RFC 3339 timestamp"), "{e}");
    let e = refusal(None, Some("2026-12-05T03:00:00Z"), Some("yesterday"));
    assert!(e.starts_with("--end: \"yesterday\" is neither"), "{e}");
    assert!(refusal(None, Some("2026-12-05 03:00"), None).contains("RFC 3339"));
    assert!(
        refusal(None, Some("2026-12-05T04:00:00Z"), Some("2026-12-05T03:00:00Z"))
            .contains("not before the end")
    );
    assert!(refusal(Some("30m"), Some("2026-12-05T03:00:00Z"), None).contains("not both"));
    assert!(refusal(None, None, None).starts_with("--range: no range"));
    assert!(refusal(Some("100,400"), None, Some("500")).starts_with("--end:"));
    // Under a minute, from timestamps as from a duration.
    assert!(
        refusal(None, Some("2026-12-05T03:00:00Z"), Some("2026-12-05T03:00:30Z"))
            .contains("1 minute to 31 days")
    );

    let mut a = args("http://127.0.0.1:1", "1h".to_owned(), "job=\"x\"", out("args"));
    a.deadlines = vec!["blips.internal".to_owned()];
    assert!(matches!(advise::run(&a), Err(AdviseError::Argument { flag: "--deadline", .. })));
}

/// Shell words, single and double quotes honoured (what the guide's commands use).
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, any) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, ' ') => {
                if any {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (_, c) => (word.push(c), any = true).1,
        }
    }
    if any {
        out.push(word);
    }
    out
}

#[test]
fn the_guide_runs_as_written() {
    let Some(server) = prometheus() else { return };
    let guide = include_str!("../../../docs/guide/advise.md");
    let block = guide.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("a ```sh block");
    let dir = std::env::temp_dir().join(format!("retryscope-advise-guide-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let mut ran = 0;
    for line in block.lines().filter(|l| l.starts_with("retryscope ")) {
        // The guide's Prometheus is the kit's on :9090; here, the test's.
        let line = line.replace("http://localhost:9090", &server.url);
        let words = words(&line);
        let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .args(&words[1..])
            .current_dir(&dir)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
        ran += 1;
    }
    assert!(ran >= 2, "the guide's block runs advise and check-config");
    let written = std::fs::read_to_string(dir.join("advised.toml")).expect("the guide's file");
    assert!(
        written.contains("[dependencies.\"search.internal\"]") && written.contains("hedging = {"),
        "{written}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_file_in_force_keeps_its_match_keys_and_deadlines() {
    let Some(server) = prometheus() else { return };
    let config = out("in-force");
    std::fs::write(
        &config,
        "[defaults]\ndeadline = \"4s\"\n\n\
         [dependencies.quota]\nservice = \"quota.Quota\"\ndeadline = \"3s\"\nfallback = \"cached\"\n",
    )
    .expect("in-force file");
    // The series name the gRPC dependency as the file does.
    let path = out("with-config");
    let mut a = on_generated(server, path.clone());
    a.config = Some(config.clone());
    let report = advise::run(&a).expect("advice");
    // quota.internal is not the file's `quota`: matched by host, under the file's 4 s default deadline.
    let quota = report.advice.iter().map(|(a, _)| a).find(|a| a.name == "quota.internal").expect("quota");
    assert_eq!(get(&table(quota.key("backoff")), "throttled_max"), ms(4000));
    let Some(Value::Duration(timeout)) = quota.key("attempt_timeout") else { panic!("no timeout") };
    assert!(*timeout <= Duration::from_secs(2), "{timeout:?}");
    let _ = std::fs::remove_file(&path);

    // A file naming the series' dependency by a gRPC service: its match keys
    // are kept, and the HTTP-only keys it would refuse are left out, saying so.
    std::fs::write(
        &config,
        "[dependencies.\"quota.internal\"]\nservice = \"quota.Quota\"\ndeadline = \"3s\"\nfallback = \"cached\"\n",
    )
    .expect("in-force file");
    let report = advise::run(&a).expect("advice");
    let (quota, m) = report.advice.iter().find(|(a, _)| a.name == "quota.internal").expect("quota");
    assert_eq!(*m, advise::writer::Match::InForce(vec![("service".to_owned(), "quota.Quota".to_owned())]));
    assert!(quota.key("retry_statuses").is_none(), "{quota:?}");
    assert!(quota.notes.iter().any(|n| n.contains("retry_statuses not written")), "{:?}", quota.notes);
    assert_eq!(get(&table(quota.key("backoff")), "throttled_max"), ms(3000));
    assert!(report.text.contains("service = \"quota.Quota\""), "{}", report.text);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&config);
}

/// A one-connection-at-a-time HTTP server on loopback answering every request
/// with `status` and `body`: a server that is not (or not quite) Prometheus.
fn fake_prometheus(status: &'static str, body: Vec<u8>) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    url
}

fn refusal(url: &str) -> AdviseError {
    let a = args(url, "1h".to_owned(), "job=\"checkout\"", out("fake"));
    advise::run(&a).expect_err("refused")
}

#[test]
fn an_answer_that_is_not_prometheus_json_too_large_or_an_error_is_refused_as_such() {
    let e = refusal(&fake_prometheus("200 OK", b"<html>a proxy's login page</html>".to_vec()));
    assert!(matches!(e, AdviseError::Malformed { .. }), "{e}");
    assert!(e.to_string().contains("retryscope_requests_total"), "{e}");

    let e = refusal(&fake_prometheus(
        "400 Bad Request",
        br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#.to_vec(),
    ));
    assert!(
        matches!(e, AdviseError::Query { status: 400, .. }) && e.to_string().contains("parse error"),
        "{e}"
    );

    let huge = vec![b' '; advise::prom::MAX_RESPONSE_BYTES + 1];
    let e = refusal(&fake_prometheus("200 OK", huge));
    assert!(matches!(e, AdviseError::TooLarge { .. }), "{e}");

    // A success with no series at all: the selector matches nothing.
    let e = refusal(&fake_prometheus(
        "200 OK",
        br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#.to_vec(),
    ));
    assert!(e.to_string().starts_with("no retryscope_requests_total{job=\"checkout\"}"), "{e}");
}

#[test]
fn a_recommendation_the_replay_finds_worse_is_withheld() {
    let Some(server) = prometheus() else { return };
    let path = out("withheld");
    let mut a = on_generated(server, path.clone());
    // 100 ms for calls whose p99.9 is 99.5 ms: one attempt fits, so the rule
    // writes attempts = 1 (and a 100 ms timeout, cutting nothing healthy); the
    // defaults' retries that still fit in 100 ms (a full-jitter wait under
    // 200 ms after a quick 429) answer more calls, so the advice is withheld.
    a.deadlines = vec!["quota.internal=100ms".to_owned()];
    let report = advise::run(&a).expect("advice");
    let quota = report.replays.iter().find(|r| r.dependency == "quota.internal").expect("replayed");
    assert!(quota.withheld && quota.recommended.answered < quota.in_force.answered, "{quota:?}");
    let (advice, _) = report.advice.iter().find(|(a, _)| a.name == "quota.internal").expect("quota");
    assert!(advice.keys.is_empty(), "{advice:?}");
    assert!(report.text.contains("worse, withheld (the defaults stay)"), "{}", report.text);
    let _ = std::fs::remove_file(&path);
}
