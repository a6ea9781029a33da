//! Live reload: an atomic snapshot per call, the file polled through its
//! path (a ConfigMap's symlink swap included), a bad reload refused while the
//! last good configuration keeps serving, and the counter and gauge that say so.

// Test fixtures: a failure to write a temp file or flush the SDK is a broken test machine.
#![allow(clippy::unwrap_used)]

use opentelemetry::metrics::MeterProvider;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use retryscope_config::{ConfigErrorKind, ConfigHandle, Format, KnownNames, Reload, Target};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A fresh directory for one test.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("retryscope-config-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn file(attempts: u32, enabled: bool) -> String {
    format!("[defaults]\nattempts = {attempts}\n\n[dependencies.pay]\nhost = \"pay\"\nenabled = {enabled}\n")
}

fn attempts(handle: &ConfigHandle) -> u32 {
    handle.snapshot().resolve(&Target::http("pay", None, "/")).policy().max_attempts()
}

struct Metrics {
    provider: SdkMeterProvider,
    exporter: InMemoryMetricExporter,
}

impl Metrics {
    fn new() -> Self {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .build();
        Self { provider, exporter }
    }

    /// Every point of `name` now, as (value, attribute key=value pairs).
    fn points(&self, name: &str) -> Vec<(u64, Vec<String>)> {
        self.exporter.reset();
        self.provider.force_flush().unwrap();
        let collected = self.exporter.get_finished_metrics().unwrap();
        let Some(last) = collected.last() else { return Vec::new() };
        let mut out = Vec::new();
        for metric in last.scope_metrics().flat_map(|s| s.metrics()).filter(|m| m.name() == name) {
            let attrs = |a: &mut dyn Iterator<Item = &opentelemetry::KeyValue>| {
                a.map(|kv| format!("{}={}", kv.key, kv.value)).collect::<Vec<_>>()
            };
            match metric.data() {
                AggregatedMetrics::U64(MetricData::Sum(s)) => {
                    out.extend(s.data_points().map(|p| (p.value(), attrs(&mut p.attributes()))))
                }
                AggregatedMetrics::U64(MetricData::Gauge(g)) => {
                    out.extend(g.data_points().map(|p| (p.value(), attrs(&mut p.attributes()))))
                }
                other => panic!("{name}: unexpected {other:?}"),
            }
        }
        out
    }

    fn reloads(&self, result: &str) -> u64 {
        let want = format!("result={result}");
        self.points("retryscope.config.reloads")
            .iter()
            .filter(|(_, a)| a.contains(&want))
            .map(|(v, _)| v)
            .sum()
    }
}

#[test]
fn a_snapshot_taken_before_a_reload_keeps_what_it_saw() {
    let d = dir("snapshot");
    let path = d.join("svc.toml");
    std::fs::write(&path, file(3, true)).unwrap();
    let handle = ConfigHandle::builder(KnownNames::new()).file(&path).build().unwrap();
    let in_flight = handle.snapshot();
    std::fs::write(&path, file(5, true)).unwrap();
    assert!(matches!(handle.reload().unwrap(), Reload::Replaced(_)));
    assert_eq!(in_flight.resolve(&Target::http("pay", None, "/")).policy().max_attempts(), 3);
    assert_eq!(attempts(&handle), 5);
    assert_eq!(handle.reload().unwrap(), Reload::Unchanged);
}

#[test]
fn a_broken_file_is_refused_with_its_line_named_and_the_old_config_keeps_serving() {
    let metrics = Metrics::new();
    let d = dir("broken");
    let path = d.join("svc.toml");
    std::fs::write(&path, file(3, true)).unwrap();
    let handle = ConfigHandle::builder(KnownNames::new())
        .meter(&metrics.provider.meter("t"))
        .file(&path)
        .build()
        .unwrap();
    let good = handle.snapshot().hash();
    std::fs::write(&path, "[defaults]\nattempts = 3\nbackof = { initial = \"1s\" }\n").unwrap();
    let e = handle.reload().unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::Syntax);
    assert_eq!(e.location().map(|l| l.line), Some(3), "{e}");
    assert!(e.to_string().starts_with(&format!("{}:3:", path.display())), "{e}");
    assert_eq!(handle.snapshot().hash(), good);
    assert_eq!(attempts(&handle), 3);
    // Refused once: the same broken text is not refused (and logged) again.
    assert_eq!(handle.reload().unwrap(), Reload::Unchanged);
    assert_eq!(metrics.reloads("refused"), 1);

    let e = handle.reload_from_str("[defaults]\nattempts = 0\n", Format::Toml).unwrap_err();
    assert_eq!(e.origin(), "<string>");
    assert_eq!(metrics.reloads("refused"), 2);
    handle.reload_from_str(&file(4, true), Format::Toml).unwrap();
    assert_eq!(attempts(&handle), 4);
    assert_eq!(metrics.reloads("ok"), 1);
    let active = metrics.points("retryscope.config.active");
    assert_eq!(active, vec![(1, vec![format!("retryscope.config.hash={}", handle.snapshot().hash())])]);
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_symlink_swap_is_picked_up_by_polling() {
    use std::os::unix::fs::symlink;
    // The layout kubelet writes: svc.toml -> ..data/svc.toml, ..data -> ..<version>;
    // an update writes a new version directory and renames a new ..data link over the old.
    let d = dir("configmap");
    let version = |n: u32, text: &str| -> PathBuf {
        let v = d.join(format!("..v{n}"));
        std::fs::create_dir_all(&v).unwrap();
        std::fs::write(v.join("svc.toml"), text).unwrap();
        v
    };
    let swap = |target: &Path| {
        let tmp = d.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        symlink(target.file_name().unwrap(), &tmp).unwrap();
        std::fs::rename(&tmp, d.join("..data")).unwrap();
    };
    swap(&version(1, &file(3, true)));
    symlink("..data/svc.toml", d.join("svc.toml")).unwrap();
    let handle = ConfigHandle::builder(KnownNames::new()).file(d.join("svc.toml")).build().unwrap();
    let _watch = handle.watch(Duration::from_millis(100));
    assert_eq!(attempts(&handle), 3);

    let swapped = Instant::now();
    swap(&version(2, &file(6, true)));
    while attempts(&handle) != 6 {
        assert!(swapped.elapsed() < Duration::from_secs(2), "the swap was not picked up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_reaches_new_calls_within_a_second() {
    let d = dir("kill");
    let path = d.join("svc.json");
    let json = |enabled: bool| {
        format!(r#"{{"dependencies": {{"pay": {{"host": "pay", "attempts": 4, "enabled": {enabled}}}}}}}"#)
    };
    std::fs::write(&path, json(true)).unwrap();
    let handle = ConfigHandle::builder(KnownNames::new()).file(&path).build().unwrap();
    let _watch = handle.watch(Duration::from_millis(500));
    assert_eq!(attempts(&handle), 4);
    let flipped = Instant::now();
    std::fs::write(&path, json(false)).unwrap();
    while attempts(&handle) != 1 {
        assert!(flipped.elapsed() < Duration::from_secs(1), "the kill switch took over a second");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn from_env_names_the_variable_when_it_is_unset() {
    // Tests do not set the variable; a developer who exported it gets the other branch.
    if std::env::var_os("RETRYSCOPE_CONFIG").is_none() {
        let e = ConfigHandle::from_env(KnownNames::new()).unwrap_err();
        assert_eq!(e.kind(), ConfigErrorKind::NoFile);
        assert!(e.to_string().contains("RETRYSCOPE_CONFIG"), "{e}");
    } else {
        assert!(ConfigHandle::from_env(KnownNames::new()).is_ok());
    }
}

/// A file with `text`, loaded and polled every `MIN_POLL`, its reloads counted.
struct Polled {
    path: PathBuf,
    metrics: Metrics,
    handle: ConfigHandle,
    _watch: retryscope_config::Watch,
}

fn polled(name: &str, text: &str) -> Polled {
    let path = dir(name).join("retry.toml");
    std::fs::write(&path, text).unwrap();
    let metrics = Metrics::new();
    let meter = metrics.provider.meter("test");
    let handle = ConfigHandle::builder(KnownNames::new()).meter(&meter).file(&path).build().unwrap();
    let _watch = handle.watch(retryscope_config::MIN_POLL);
    Polled { path, metrics, handle, _watch }
}

/// A file rewritten in place is empty for a moment (truncated, then
/// written). A poll that reads it then waits `SETTLE` and reads again: the
/// text has changed under it, so it loads nothing, and the next poll loads
/// the finished file — the empty one (all defaults) is never in force.
/// Paused clock, so the poll lands in the gap every time.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_file_caught_halfway_through_a_rewrite_is_never_loaded() {
    let Polled { path, metrics, handle, _watch } = polled("torn", &file(2, true));
    let start = tokio::time::Instant::now();
    // The first poll (at once) sees the file it loaded.
    tokio::time::sleep(Duration::from_millis(1)).await;
    // Truncated: the poll at 50 ms reads it empty and waits to confirm.
    std::fs::write(&path, "").unwrap();
    tokio::time::sleep_until(start + retryscope_config::MIN_POLL + retryscope_config::SETTLE / 2).await;
    // Written before that poll reads it again.
    std::fs::write(&path, file(3, true)).unwrap();
    tokio::time::sleep_until(start + 4 * retryscope_config::MIN_POLL).await;
    assert_eq!(attempts(&handle), 3, "the finished file is in force");
    assert_eq!(
        (metrics.reloads("ok"), metrics.reloads("refused")),
        (1, 0),
        "one reload, of the finished file"
    );
}

/// A slower writer: the file stays empty for several polls, longer than
/// `SETTLE`, so two reads agree on the empty text. It is refused, once (it
/// is seen), and the configuration in force — its kill switch on — keeps serving
/// until the finished file lands. Paused clock.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_file_left_empty_longer_than_settle_is_refused_and_the_last_one_keeps_serving() {
    let Polled { path, metrics, handle, _watch } = polled("slow-writer", &file(2, false));
    let start = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(1)).await;
    std::fs::write(&path, "").unwrap();
    for poll in 1..=4 {
        tokio::time::sleep_until(start + poll * retryscope_config::MIN_POLL + 2 * retryscope_config::SETTLE)
            .await;
        let pay = handle.snapshot().resolve(&Target::http("pay", None, "/")).enabled();
        assert!(!pay, "poll {poll}: the kill switch stays on");
        assert_eq!(attempts(&handle), 1, "poll {poll}: the empty file is not in force");
    }
    std::fs::write(&path, file(3, true)).unwrap();
    tokio::time::sleep_until(start + 7 * retryscope_config::MIN_POLL).await;
    assert_eq!(attempts(&handle), 3, "the finished file is in force");
    assert_eq!(
        (metrics.reloads("ok"), metrics.reloads("refused")),
        (1, 1),
        "the empty file refused once, the finished one loaded"
    );

    // Asked for directly, a reload of an empty file says why it refuses.
    std::fs::write(&path, "  \n").unwrap();
    let refused = handle.reload().expect_err("an empty file is refused");
    assert_eq!(refused.kind(), ConfigErrorKind::Empty, "{refused}");
    assert!(refused.to_string().contains("empty"), "{refused}");
    assert_eq!(attempts(&handle), 3);
    // A comment is a file: back to the defaults on purpose.
    std::fs::write(&path, "# the defaults\n").unwrap();
    assert!(matches!(handle.reload().unwrap(), Reload::Replaced(_)));
    assert_eq!(attempts(&handle), retryscope::Policy::interactive().max_attempts());
}
