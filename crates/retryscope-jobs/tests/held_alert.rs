//! `JobsHeldLong` on the values a worker emits: a real run on nats-server
//! makes a job wait on another worker's claim (`claimed_elsewhere`) and drops
//! an old attempt (`superseded`); the outcome counts read back from the
//! OpenTelemetry SDK become Prometheus series, named as the collector names
//! them, and `promtool test rules` checks the alert against
//! dashboards/retryscope.rules.yml: silent on them, firing once holds are the
//! larger share. (One test per file: the meter provider is process-wide.)

mod support;

use retryscope::{Jitter, Policy};
use retryscope_idempotency::store::Claim;
use retryscope_idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore, MemoryStore};
use retryscope_jobs::meta::JobMeta;
use retryscope_jobs::telemetry::{DELIVERIES, DESTINATION_ATTR, OUTCOME_ATTR};
use retryscope_jobs::{Broker, Job, JobOutcome, Outgoing, Producer, Worker};
use retryscope_test_support::telemetry::Telemetry;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;
use support::{TestError, nats_url, queue, start, wait_for};

/// The Prometheus name of an OpenTelemetry attribute or counter, as the
/// collector exports it: dots become underscores, a counter gets `_total`.
fn prometheus(name: &str) -> String {
    name.replace('.', "_")
}

/// A promtool test of `JobsHeldLong` at 25 minutes: `counts` (outcome, per
/// 15 s scrape) steady on `subject`, expecting the alert `firing` or not.
fn alert_test(name: &str, subject: &str, counts: &[(&str, u64)], firing: Option<&str>) -> String {
    let mut out = format!("  - name: {name}\n    interval: 15s\n    input_series:\n");
    for (outcome, per_scrape) in counts {
        let _ = writeln!(
            out,
            "      - series: '{}_total{{job=\"worker\",instance=\"w-1\",{}=\"{subject}\",{}=\"{outcome}\"}}'\n        values: '0+{per_scrape}x120'",
            prometheus(DELIVERIES),
            prometheus(DESTINATION_ATTR),
            prometheus(OUTCOME_ATTR)
        );
    }
    out.push_str("    alert_rule_test:\n      - eval_time: 25m\n        alertname: JobsHeldLong\n");
    match firing {
        None => out.push_str("        exp_alerts: []\n"),
        Some(share) => {
            let _ = write!(
                out,
                "        exp_alerts:\n          - exp_labels:\n              severity: warning\n              job: worker\n              messaging_destination_name: {subject}\n            exp_annotations:\n              summary: \"Jobs of worker on {subject} have been held for 15 minutes\"\n              description: \"{share} of the deliveries of {subject} in worker were holds (5m rate, above 50 % for 15 minutes): the dependency the jobs call is down or paced, and the worker is holding its jobs instead of spending their attempts. No job is lost, but they are waiting and their age grows.\"\n              runbook_url: https://github.com/retryscope/retryscope/blob/main/docs/runbook.md#jobsheldlong\n              dashboard: \"Retry overview (uid retryscope-overview), row 'Jobs'\"\n"
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_held_long_stays_silent_on_emitted_claimed_and_superseded_deliveries_and_fires_on_holds() {
    let Some(url) = nats_url() else { return };
    if !retryscope_test_support::external::on_path("promtool", "promtool (Debian package prometheus)") {
        return;
    }
    let telemetry = Telemetry::install();
    telemetry.install_global_meter();
    let q = queue(&url, "held_alert", Duration::from_millis(600)).await;
    let store = MemoryStore::default();
    // A worker that claimed "order-1" for 1 s and died: the job waits on it.
    let key = IdempotencyKey::parse(br#""order-1""#).expect("a key");
    let print = Fingerprint::of(&http::Method::POST, &q.subject, b"pay 1");
    let claimed = store.claim(&key, print, Duration::from_secs(1)).await.expect("the memory store answers");
    assert!(matches!(claimed, Claim::Claimed(_)));
    // "order-2" fails its first attempt; its retry waits a minute.
    let policy = Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_secs(60))
        .max_delay(Duration::from_secs(60))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("a valid policy");
    let handler = |job: Job| async move {
        if job.key.as_deref() == Some("order-2") && job.attempt == 1 { Err(TestError::Busy) } else { Ok(()) }
    };
    let worker = Worker::builder(q.queue.clone(), policy, handler)
        .processed_keys(store)
        .fetch_wait(Duration::from_millis(100))
        .build()
        .expect("a valid worker");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    Producer::new(q.queue.clone()).enqueue(&q.subject, "order-1", "pay 1").await.expect("enqueued");
    // "order-2": its attempt 1 fails and its retry is stored; then attempt 1
    // comes again, as after a lost ack.
    let first = || {
        let headers = JobMeta::first(Some("order-2".into()))
            .to_headers()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        Outgoing { subject: q.subject.clone(), payload: "pay 2".into(), headers, dedup_id: None }
    };
    q.queue.publish(first()).await.expect("stored");
    assert!(wait_for(Duration::from_secs(10), || stats.count(JobOutcome::Retried) == 1).await);
    assert!(wait_for(Duration::from_secs(10), || stats.count(JobOutcome::Succeeded) == 1).await);
    q.queue.publish(first()).await.expect("stored");
    assert!(wait_for(Duration::from_secs(10), || stats.count(JobOutcome::Superseded) == 1).await);
    running.stop().await;

    let outcome = |value: &str| {
        telemetry.counter(DELIVERIES, &[(OUTCOME_ATTR, value), (DESTINATION_ATTR, q.subject.as_str())])
    };
    let emitted: Vec<(&str, u64)> =
        JobOutcome::ALL.iter().map(|o| (o.as_str(), outcome(o.as_str()))).filter(|(_, n)| *n > 0).collect();
    assert_eq!(outcome("superseded"), 1, "{emitted:?}");
    assert!(outcome("claimed_elsewhere") >= 1, "{emitted:?}");
    assert_eq!(outcome("held"), 0, "{emitted:?}");

    // The emitted counts as steady rates; then holds three times their sum
    // beside them (a share of 75 %).
    let delivered: u64 = emitted.iter().map(|(_, n)| n).sum();
    let mut held = emitted.clone();
    held.push(("held", 3 * delivered));
    let rules = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../dashboards/retryscope.rules.yml");
    let file = format!(
        "rule_files:\n  - {}\nevaluation_interval: 15s\ntests:\n{}\n{}",
        rules.display(),
        alert_test("silent on claimed_elsewhere and superseded", &q.subject, &emitted, None),
        alert_test("firing on holds beside them", &q.subject, &held, Some("75%"))
    );
    let dir = std::env::temp_dir().join(support::unique("retryscope-held-alert"));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("held_test.yml");
    std::fs::write(&path, &file).expect("written");
    let run = std::process::Command::new("promtool")
        .arg("test")
        .arg("rules")
        .arg(&path)
        .output()
        .expect("promtool");
    let said = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    println!("emitted on {}: {emitted:?}\n{said}", q.subject);
    assert!(run.status.success(), "promtool on the emitted series:\n{said}\n{file}");
    let _ = std::fs::remove_dir_all(&dir);
}
