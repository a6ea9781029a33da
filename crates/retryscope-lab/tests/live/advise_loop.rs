//! The loop of `docs/guide/advise.md`, literally and at a reduced scale (a
//! storm of 6 s, scraped every second): a storm under a poor policy file,
//! scraped by a real Prometheus; `advise` on its series with that file in
//! force; `check-config` on the file written; the next storm started with
//! the advised file; its load on the server lower than the first's, and more
//! of its calls answered. About 25 s. The live reload of a file is what the
//! operations kit's live check shows (scripts/ops-tests/live_check.py, its
//! Configuration row); here the next storm starts with the advised file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const LAB: &str = env!("CARGO_BIN_EXE_retryscope");

/// The poor policy: an attempt timeout of 25 ms against a server whose work
/// takes 20 ms (the old timeout rule's failure: healthy calls cut), five
/// attempts 1-2 ms apart, no jitter, no budget, no breaker (as the storm's
/// naive policy, which is what the replay of the file in force then runs) —
/// every cut call hammers the server again. Named `storm` by host, so the
/// series name the dependency as the file does, and the advised file keeps
/// the match and is matched by the next storm's calls (whatever their port).
const POOR: &str = "[dependencies.storm]\nhost = \"127.0.0.1\"\nattempts = 5\nattempt_timeout = \"25ms\"\n\
                    backoff = { initial = \"1ms\", max = \"2ms\", multiplier = 1.0 }\njitter = \"none\"\n\
                    budget = { enabled = false }\nbreaker = { enabled = false }\n";

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("local addr").port()
}

/// Stops the Prometheus this test started (by its own child handle).
struct Stop(Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A GET on loopback: the whole answer, empty when nothing answers.
fn get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut answer = String::new();
    if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes());
        let _ = s.read_to_string(&mut answer);
    }
    answer
}

/// Waits up to a minute for `what` to hold.
fn wait(what: &str, mut until: impl FnMut() -> bool) {
    let started = Instant::now();
    while !until() {
        assert!(started.elapsed() < Duration::from_secs(60), "{what}: not within a minute");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn lab(args: &[&str]) -> Output {
    Command::new(LAB).args(args).output().expect("the lab binary runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A storm of one policy under `config`; its summary row from storm.json.
fn storm(config: &Path, out: &Path, metrics: Option<u16>) -> serde_json::Value {
    let (config, out) = (config.to_str().expect("utf-8"), out.to_str().expect("utf-8"));
    let address = metrics.map(|p| format!("127.0.0.1:{p}"));
    let mut args =
        vec!["storm", "--policies", "naive", "--duration", "6", "--outage", "2:2", "--clients", "20"];
    args.extend(["--config", config, "--out", out]);
    if let Some(a) = &address {
        // Lingers for the last scrapes (every second).
        args.extend(["--prometheus", a, "--linger", "4"]);
    }
    let run = lab(&args);
    assert!(run.status.success(), "{}", text(&run));
    println!("{}", String::from_utf8_lossy(&run.stdout));
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(out).join("storm.json")).expect("storm.json"),
    )
    .expect("JSON");
    json["summary"][0].clone()
}

fn load(row: &serde_json::Value) -> f64 {
    row["attempts"].as_f64().unwrap_or(f64::NAN) / row["requests"].as_f64().unwrap_or(f64::NAN)
}

#[test]
fn a_storm_advised_on_its_own_series_loads_the_server_less_the_next_time() {
    let what = "Debian's prometheus package: apt-get install prometheus";
    if !retryscope_test_support::external::on_path("prometheus", what) {
        return;
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("retryscope-advise-loop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (prom, metrics) = (free_port(), free_port());
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: storm\n    static_configs:\n      \
             - targets: ['127.0.0.1:{metrics}']\n"
        ),
    )
    .expect("prometheus.yml");
    let _prometheus = Stop(
        Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts"),
    );
    wait("prometheus ready", || get(prom, "/-/ready").contains(" 200 "));
    // Its scrape loop for the storm's address starts after a discovery
    // update (every 5 s): waited for, so that the first scrape is within a
    // second of the storm's start and the outage is in the series.
    wait("the storm's target known", || {
        get(prom, "/api/v1/targets").contains(&format!("127.0.0.1:{metrics}"))
    });

    // 1. The storm under the poor file, scraped.
    let poor = dir.join("poor.toml");
    std::fs::write(&poor, POOR).expect("poor.toml");
    let first = storm(&poor, &dir.join("first"), Some(metrics));

    // 2. advise on its series, the poor file in force; the file, replay.json and replay.svg.
    let advised_dir = format!("{}/advised/", dir.display());
    let url = format!("http://127.0.0.1:{prom}");
    let selector = format!("job=\"storm\",instance=\"127.0.0.1:{metrics}\"");
    let poor_path = poor.to_str().expect("utf-8");
    let args = ["advise", "--prometheus", &url, "--range", "2m", "--selector", &selector];
    let advise = lab(&[&args[..], &["--config", poor_path, "--out", &advised_dir]].concat());
    assert!(advise.status.success(), "{}", text(&advise));
    let report = String::from_utf8_lossy(&advise.stdout).into_owned();
    let advised = dir.join("advised").join("advised.toml");
    let file = std::fs::read_to_string(&advised).expect("advised.toml");
    println!("{report}\n{file}");
    assert!(report.lines().any(|l| l.starts_with("storm ") && l.ends_with("written")), "{report}\n{file}");
    // The match of the file in force is kept, and the poor policy replaced.
    assert!(file.contains("[dependencies.\"storm\"]") && file.contains("host = \"127.0.0.1\""), "{file}");
    assert!(file.contains("budget = {") && file.contains("attempts = 3"), "{file}");

    // 3. check-config accepts it.
    let checked = lab(&["check-config", advised.to_str().expect("utf-8")]);
    assert!(checked.status.success(), "{}", text(&checked));

    // 4. The next storm, with the advised file: less load on the server, and
    // more calls answered (no healthy call cut).
    let next = storm(&advised, &dir.join("next"), None);
    println!(
        "load: {:.2} → {:.2} attempts a call; peak {} → {}",
        load(&first),
        load(&next),
        first["peak_load"],
        next["peak_load"]
    );
    assert!(load(&next) < load(&first) * 0.8, "{first} → {next}");
    assert!(next["peak_load"].as_f64() < first["peak_load"].as_f64(), "{first} → {next}");
    assert!(next["failed"].as_f64() < first["failed"].as_f64(), "{first} → {next}");
    let _ = std::fs::remove_dir_all(&dir);
}
