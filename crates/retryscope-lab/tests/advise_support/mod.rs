//! A real Prometheus holding generated retryscope series with known answers:
//! OpenMetrics text written here, backfilled with `promtool tsdb
//! create-blocks-from openmetrics`, served by Debian's `prometheus` on a free
//! loopback port. One server per test binary, stopped when the binary exits.

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The scrape interval of the generated series.
pub(crate) const STEP: u64 = 15;
/// Steps generated: 30 minutes.
pub(crate) const STEPS: u64 = 120;
/// The histogram buckets of `docs/telemetry.md`.
const BUCKETS: [f64; 17] =
    [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0];

/// Successful attempts' latency: the share of them in each bucket, by upper bound.
type Latency = &'static [(f64, f64)];
/// 25-100 ms: p50 ≈ 43 ms, p99 ≈ 95 ms.
pub(crate) const STEADY: Latency = &[(0.05, 0.7), (0.075, 0.25), (0.1, 0.05)];
/// 90 % under 25 ms, 4 % over a second: p50 ≈ 18 ms, p95 ≈ 225 ms, p99 = 2 s.
pub(crate) const HEAVY: Latency = &[(0.025, 0.9), (0.25, 0.06), (0.5, 0.01), (2.5, 0.03)];

/// What one step of one dependency does: first attempts failed, second
/// failed, third failed (with `error`), refused as rate limited, held, breaker state.
#[derive(Clone, Copy, Default)]
pub(crate) struct Step {
    pub(crate) fail: [u64; 3],
    pub(crate) error: &'static str,
    pub(crate) rate_limited: u64,
    pub(crate) held: u64,
    pub(crate) breaker: Option<u8>,
}

/// One generated dependency.
pub(crate) struct Dependency {
    pub(crate) name: &'static str,
    /// Requests per step.
    pub(crate) rate: u64,
    pub(crate) latency: Latency,
    pub(crate) step: fn(u64) -> Step,
}

fn healthy(_: u64) -> Step {
    Step::default()
}

/// A 2 s blip every 3 minutes: 20 first attempts of the step fail with 503,
/// 2 of their retries too.
fn blips(i: u64) -> Step {
    if i % 12 == 5 { Step { fail: [20, 2, 0], error: "503", ..Step::default() } } else { Step::default() }
}

/// Down from minute 10 to minute 20: every attempt fails (connection refused).
fn outage(i: u64) -> Step {
    if (40..80).contains(&i) {
        Step { fail: [150, 150, 150], error: "connect", breaker: Some(2), ..Step::default() }
    } else {
        Step { breaker: Some(0), ..Step::default() }
    }
}

/// 15 % of first attempts answered 429, their retries held by the pacer.
fn rate_limited(_: u64) -> Step {
    Step { fail: [22, 1, 0], error: "429", rate_limited: 2, held: 5, ..Step::default() }
}

/// Ten requests in the first five steps only.
pub(crate) fn sparse_rate(i: u64) -> u64 {
    if i < 5 { 10 } else { 0 }
}

/// The five dependencies of the issue, and one with too little data.
pub(crate) const DEPENDENCIES: [Dependency; 6] = [
    Dependency { name: "blips.internal", rate: 150, latency: STEADY, step: blips },
    Dependency { name: "ledger.internal", rate: 150, latency: STEADY, step: outage },
    Dependency { name: "quota.internal", rate: 150, latency: STEADY, step: rate_limited },
    Dependency { name: "search.internal", rate: 150, latency: HEAVY, step: healthy },
    Dependency { name: "healthy.internal", rate: 150, latency: STEADY, step: healthy },
    Dependency { name: "sparse.internal", rate: 0, latency: STEADY, step: healthy },
];

/// Series of one family: labels → values per step.
#[derive(Default)]
struct Family {
    series: Vec<(String, Vec<f64>)>,
}

impl Family {
    fn add(&mut self, labels: String, values: Vec<f64>) {
        // A counter that never moved is never exported.
        if values.last().copied().unwrap_or(0.0) > 0.0 {
            self.series.push((labels, values));
        }
    }
}

/// Cumulative sums of per-step values.
fn cumulative(per_step: impl Iterator<Item = f64>) -> Vec<f64> {
    per_step
        .scan(0.0, |acc, v| {
            *acc += v;
            Some(*acc)
        })
        .collect()
}

/// The latency histogram of `successes` (cumulative per step) as bucket series.
fn histogram(family: &mut Family, base: &str, successes: &[f64], latency: Latency, huge: bool) {
    let mut bounds: Vec<f64> = BUCKETS.to_vec();
    // Every observation between 60 s and 200,000 s: quantiles above a day.
    let latency = if huge { &[(200_000.0, 1.0)] } else { latency };
    if huge {
        bounds.push(200_000.0);
    }
    if successes.last().copied().unwrap_or(0.0) == 0.0 {
        return;
    }
    // Every bucket of a histogram that was observed is exported, empty or not.
    for le in &bounds {
        let share: f64 = latency.iter().filter(|(b, _)| b <= le).map(|(_, s)| s).sum();
        let values = successes.iter().map(|c| (c * share + 0.5).floor()).collect();
        family.series.push((format!("{base},le=\"{le}\""), values));
    }
    family.add(format!("{base},le=\"+Inf\""), successes.to_vec());
}

/// The OpenMetrics text of `deps` under `job`, from `start` (unix seconds).
/// `attempt_metric` is `retryscope_attempt_duration_seconds`, or another name
/// to play a renamed series; `huge` adds a bucket at 200,000 s holding every
/// observation, to play an absurd latency.
pub(crate) fn openmetrics(
    job: &str,
    deps: &[&Dependency],
    start: u64,
    attempt_metric: &str,
    huge: bool,
) -> String {
    let mut families: Vec<(&str, (), String, Family)> = Vec::new();
    let mut family = |name: &str, kind: &'static str| {
        families.push((kind, (), name.to_owned(), Family::default()));
        families.len() - 1
    };
    let requests = family("retryscope_requests", "counter");
    let attempts = family(attempt_metric, "histogram");
    let operations = family("retryscope_request_duration_seconds", "histogram");
    let retries = family("retryscope_retries", "counter");
    let throttled = family("retryscope_throttled", "counter");
    let held = family("retryscope_pace_held_seconds", "histogram");
    let breaker = family("retryscope_breaker_state", "gauge");
    for dep in deps {
        let steps: Vec<Step> = (0..STEPS).map(dep.step).collect();
        let rate = |i: u64| if dep.rate == 0 { sparse_rate(i) as f64 } else { dep.rate as f64 };
        let base = format!("job=\"{job}\",retryscope_dependency=\"{}\"", dep.name);
        let f = &mut families;
        f[requests].3.add(base.clone(), cumulative((0..STEPS).map(rate)));
        let error = steps.iter().map(|s| s.error).find(|e| !e.is_empty()).unwrap_or("503");
        for n in 0..3usize {
            // Attempt n+1 is sent for every failure of attempt n.
            let sent = |i: u64| if n == 0 { rate(i) } else { steps[i as usize].fail[n - 1] as f64 };
            let failed = |i: u64| steps[i as usize].fail[n] as f64;
            let ok = cumulative((0..STEPS).map(|i| sent(i) - failed(i)));
            let bad = cumulative((0..STEPS).map(failed));
            let a = format!("{base},retryscope_attempt=\"{}\"", n + 1);
            let fam = &mut f[attempts].3;
            histogram(fam, &a, &ok, dep.latency, huge);
            let failed_base = format!("{a},error_type=\"{error}\"");
            histogram(fam, &failed_base, &bad, &[(0.005, 1.0)], false);
            let ops = cumulative((0..STEPS).map(|i| sent(i) - failed(i)));
            f[operations].3.add(
                format!(
                    "{base},retryscope_attempts=\"{}\",retryscope_outcome=\"success\",le=\"+Inf\"",
                    n + 1
                ),
                ops,
            );
        }
        // One series of retries: every attempt after the first, whatever its number.
        let retried = |i: u64| steps[i as usize].fail[0] as f64 + steps[i as usize].fail[1] as f64;
        f[retries]
            .3
            .add(format!("{base},retryscope_retry_reason=\"{error}\""), cumulative((0..STEPS).map(retried)));
        let rl = cumulative(steps.iter().map(|s| s.rate_limited as f64));
        f[throttled].3.add(
            format!("{base},retryscope_throttle_reason=\"rate_limited\",retryscope_priority=\"critical\""),
            rl,
        );
        let h = cumulative(steps.iter().map(|s| s.held as f64));
        f[held].3.add(format!("{base},retryscope_pace_source=\"retry_after\",le=\"+Inf\""), h);
        if steps.iter().any(|s| s.breaker.is_some()) {
            let values = steps.iter().map(|s| f64::from(s.breaker.unwrap_or(0))).collect();
            f[breaker].3.series.push((base.clone(), values));
        }
    }
    let mut out = String::new();
    for (kind, _, name, fam) in &families {
        if fam.series.is_empty() {
            continue;
        }
        let _ = writeln!(out, "# TYPE {name} {kind}");
        // A series written twice is what promtool refuses as "out of order sample".
        let mut seen = std::collections::HashSet::new();
        assert!(fam.series.iter().all(|(labels, _)| seen.insert(labels)), "a series of {name} twice");
        for (labels, values) in &fam.series {
            let labels = labels.clone();
            let (sample, labels) = match *kind {
                "counter" => (format!("{name}_total"), labels),
                "gauge" => (name.clone(), labels),
                _ if labels.contains("le=") => (format!("{name}_bucket"), labels),
                _ => (name.clone(), labels),
            };
            for (i, v) in values.iter().enumerate() {
                let _ = writeln!(out, "{sample}{{{labels}}} {v} {}", start + i as u64 * STEP);
            }
            // A histogram's count is its +Inf bucket.
            if *kind == "histogram" && labels.ends_with("le=\"+Inf\"") {
                let count_labels = labels.replace(",le=\"+Inf\"", "");
                for (i, v) in values.iter().enumerate() {
                    let _ = writeln!(out, "{name}_count{{{count_labels}}} {v} {}", start + i as u64 * STEP);
                }
            }
        }
    }
    out.push_str("# EOF\n");
    out
}

/// The running server: its URL, and the generated range.
pub(crate) struct Prometheus {
    pub(crate) url: String,
    /// The first and last sample's time (unix seconds).
    pub(crate) range: (u64, u64),
    /// The shell that runs Prometheus and stops it when this binary exits;
    /// never waited on: it outlives every test of the binary.
    _watcher: std::process::Child,
}

/// A loopback port nothing listens on now.
pub(crate) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("local addr").port()
}

/// The shared server, started on first use; `None` (skipped) without promtool
/// and prometheus outside CI.
pub(crate) fn prometheus() -> Option<&'static Prometheus> {
    static SERVER: OnceLock<Option<Prometheus>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let what = "Debian's prometheus package: apt-get install prometheus";
            let found = retryscope_test_support::external::on_path("promtool", what)
                && retryscope_test_support::external::on_path("prometheus", what);
            found.then(start)
        })
        .as_ref()
}

fn start() -> Prometheus {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs();
    // Ending 5 minutes ago, on a step: inside any `--range 1h` taken now.
    let end = (now - 300) / STEP * STEP;
    let start = end - (STEPS - 1) * STEP;
    let dir = std::env::temp_dir().join(format!("retryscope-advise-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let deps: Vec<&Dependency> = DEPENDENCIES.iter().collect();
    let mut text = openmetrics("checkout", &deps, start, "retryscope_attempt_duration_seconds", false);
    // A renamed histogram, and an absurd latency, under jobs of their own.
    let renamed = openmetrics("renamed", &deps[..1], start, "retryscope_attempt_latency_seconds", false);
    let absurd = openmetrics("absurd", &deps[4..5], start, "retryscope_attempt_duration_seconds", true);
    text = merge(&[&text, &renamed, &absurd]);
    let file = dir.join("series.om");
    std::fs::write(&file, text).expect("write openmetrics");
    let data = dir.join("data");
    let out = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&file)
        .arg(&data)
        .output()
        .expect("promtool runs");
    assert!(out.status.success(), "promtool: {}", String::from_utf8_lossy(&out.stderr));
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, "global:\n  scrape_interval: 15s\n").expect("config");
    let port = free_port();
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
    // Stopped, and its directory removed, when this test binary exits: a watcher polls its pid.
    let script = format!(
        "prometheus --config.file={} --storage.tsdb.path={} --web.listen-address=127.0.0.1:{port} \
         --log.level=warn & p=$!; while kill -0 {} 2>/dev/null && kill -0 $p 2>/dev/null; do sleep 1; done; kill $p; wait $p; rm -rf {}",
        config.display(),
        data.display(),
        std::process::id(),
        dir.display()
    );
    let watcher = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("prometheus starts");
    let url = format!("http://127.0.0.1:{port}");
    let ready = Instant::now();
    loop {
        let up = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok_and(|mut s| {
            use std::io::{Read, Write};
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.write_all(b"GET /-/ready HTTP/1.0\r\n\r\n");
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
        });
        if up {
            break;
        }
        assert!(ready.elapsed() < Duration::from_secs(60), "prometheus not ready: {}", dir.display());
        std::thread::sleep(Duration::from_millis(200));
    }
    Prometheus { url, range: (start, end), _watcher: watcher }
}

/// Several OpenMetrics texts as one: their families merged by name (a
/// family's lines must stay together), one `# EOF`.
fn merge(texts: &[&str]) -> String {
    let mut families: Vec<(String, String)> = Vec::new();
    for text in texts {
        let mut current: Option<usize> = None;
        for line in text.lines() {
            if line == "# EOF" {
                continue;
            }
            if let Some(head) = line.strip_prefix("# TYPE ") {
                let i = families.iter().position(|(h, _)| h == head).unwrap_or_else(|| {
                    families.push((head.to_owned(), String::new()));
                    families.len() - 1
                });
                current = Some(i);
                continue;
            }
            if let Some(i) = current {
                families[i].1.push_str(line);
                families[i].1.push('\n');
            }
        }
    }
    let mut out = String::new();
    for (head, body) in families {
        let _ = write!(out, "# TYPE {head}\n{body}");
    }
    out.push_str("# EOF\n");
    out
}
