//! A worker built with `config(handle)`, against a real nats-server: each
//! execution takes its policy from the `subject` rule in force when it starts
//! — the file's attempts, a reload's kill switch within a second, a code
//! override over the file — and its span names the configuration's hash.

mod support;

use retryscope_config::{ConfigErrorKind, ConfigHandle, Format, KnownNames};
use retryscope_jobs::{DeadReason, Job, JobOutcome, Producer, Worker, dead};
use retryscope_test_support::telemetry::{Telemetry, attr};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{TestError, TestQueue, fast_policy, nats_url, queue, start, unique, wait_for};

type Runs = Arc<Mutex<HashMap<String, u32>>>;

/// The file's rule for the test queue's jobs (`<stream>.work`): fast, fixed
/// backoff, no jitter, then `extra` lines.
fn rule(q: &TestQueue, extra: &str) -> String {
    let prefix = q.stream.to_lowercase();
    format!(
        "[dependencies.jobs]\nsubject = \"{prefix}.*\"\nbackoff = {{ initial = \"10ms\", max = \"50ms\" }}\n\
         jitter = \"none\"\ndeadline = \"1m\"\n{extra}"
    )
}

fn handle_of(text: &str) -> ConfigHandle {
    let known = KnownNames::new();
    let config =
        retryscope_config::Config::parse(text, Format::Toml, "jobs.toml", &known).expect("a valid file");
    ConfigHandle::builder(known).config(config).build().expect("a handle")
}

/// A handler that fails every attempt transiently, counting runs per key.
fn always_busy(
    runs: &Runs,
) -> impl Fn(Job) -> std::future::Ready<Result<(), TestError>> + Send + Sync + 'static {
    let runs = Arc::clone(runs);
    move |job: Job| {
        *runs
            .lock()
            .expect("not poisoned")
            .entry(job.key.as_deref().unwrap_or("").to_owned())
            .or_default() += 1;
        std::future::ready(Err(TestError::Busy))
    }
}

fn runs_of(runs: &Runs, key: &str) -> u32 {
    runs.lock().expect("not poisoned").get(key).copied().unwrap_or(0)
}

async fn letter_of(q: &TestQueue, key: &str) -> retryscope_jobs::DeadLetter {
    let letters = dead::list(&q.queue, 0, 100).await.expect("dead letters listed");
    letters
        .iter()
        .filter_map(|l| l.letter.clone().ok())
        .find(|l| l.meta.key.as_deref() == Some(key))
        .unwrap_or_else(|| panic!("no dead letter for {key}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_attempts_replace_the_builders_and_a_refused_reload_changes_nothing() {
    let Some(url) = nats_url() else { return };
    let q = queue(&url, "configured", Duration::from_secs(5)).await;
    let handle = handle_of(&rule(&q, "attempts = 3\n"));
    let runs: Runs = Arc::default();
    // Built with 10 attempts: the file's 3 replace them.
    let worker = Worker::builder(q.queue.clone(), fast_policy(10), always_busy(&runs))
        .config(handle.clone())
        .build()
        .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));

    // A subject rule writing a key a worker does not apply is refused, with
    // its line; the configuration in force stays.
    let before = handle.snapshot().hash();
    let refused = handle
        .reload_from_str(&rule(&q, "attempts = 6\nretry_statuses = [503]\n"), Format::Toml)
        .expect_err("retry_statuses on a subject rule");
    assert_eq!(refused.kind(), ConfigErrorKind::NotApplied);
    assert_eq!(refused.path(), "dependencies.jobs.retry_statuses");
    assert_eq!(refused.location().map(|l| l.line), Some(7), "{refused}");
    assert_eq!(handle.snapshot().hash(), before);

    Producer::new(q.queue.clone()).enqueue(&q.subject, "order-1", "x").await.expect("stored");
    assert!(wait_for(Duration::from_secs(10), || stats.count(JobOutcome::DeadLettered) == 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.stop().await;
    assert_eq!(runs_of(&runs, "order-1"), 3, "the file's 3 attempts, not the builder's 10");
    assert_eq!(stats.count(JobOutcome::Retried), 2);
    let letter = letter_of(&q, "order-1").await;
    assert_eq!(letter.reason, DeadReason::AttemptsExhausted);
    assert_eq!(letter.meta.attempt, 3);
}

/// A fresh file for one test.
fn file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(name));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("jobs.toml");
    std::fs::write(&path, text).expect("temp file");
    path
}

/// Rewrites `path` as a whole (a rename over it), as a deploy tool does.
fn rewrite(path: &PathBuf, text: &str) {
    let tmp = path.with_extension("toml.new");
    std::fs::write(&tmp, text).expect("temp file");
    std::fs::rename(&tmp, path).expect("rename");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_in_the_file_stops_a_jobs_retries_within_a_second() {
    let Some(url) = nats_url() else { return };
    let q = queue(&url, "kill_switch", Duration::from_secs(5)).await;
    // 50 attempts, 100 ms apart: the job would retry for five seconds.
    let text =
        rule(&q, "attempts = 50\n").replace("max = \"50ms\"", "max = \"100ms\"").replace("10ms", "100ms");
    let path = file("retryscope-jobs-kill", &text);
    let handle = ConfigHandle::builder(KnownNames::new()).file(&path).build().expect("loads");
    let _watch = handle.watch(Duration::from_millis(100));
    let runs: Runs = Arc::default();
    let worker = Worker::builder(q.queue.clone(), fast_policy(3), always_busy(&runs))
        .config(handle.clone())
        .build()
        .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    let producer = Producer::new(q.queue.clone());
    producer.enqueue(&q.subject, "looping", "x").await.expect("stored");
    assert!(wait_for(Duration::from_secs(10), || runs_of(&runs, "looping") >= 3).await, "it retries");

    let switched = Instant::now();
    rewrite(&path, &text.replace("attempts = 50", "attempts = 50\nenabled = false"));
    let stopped_in_time =
        wait_for(Duration::from_secs(1), || stats.count(JobOutcome::DeadLettered) == 1).await;
    let took = switched.elapsed();
    assert!(stopped_in_time, "the retries went on {took:?} after the kill switch was written");
    println!("the kill switch stopped the job's retries {took:?} after the file was rewritten");
    let looping = runs_of(&runs, "looping");
    assert!(looping < 50);
    assert_eq!(letter_of(&q, "looping").await.reason, DeadReason::AttemptsExhausted);

    // The next job runs once: its first transient failure is a dead letter.
    producer.enqueue(&q.subject, "next", "x").await.expect("stored");
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::DeadLettered) == 2).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.stop().await;
    assert_eq!(runs_of(&runs, "next"), 1);
    assert_eq!(runs_of(&runs, "looping"), looping, "a dead-lettered job never runs again");
    let letter = letter_of(&q, "next").await;
    assert_eq!((letter.reason, letter.meta.attempt), (DeadReason::AttemptsExhausted, 1));
    let _ = std::fs::remove_dir_all(path.parent().expect("a directory"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_override_wins_over_the_file_but_not_over_its_kill_switch() {
    let Some(url) = nats_url() else { return };
    let q = queue(&url, "override", Duration::from_secs(5)).await;
    let text = rule(&q, "attempts = 5\n");
    let handle = handle_of(&text);
    let runs: Runs = Arc::default();
    let worker = Worker::builder(q.queue.clone(), fast_policy(10), always_busy(&runs))
        .config(handle.clone())
        .override_policy(fast_policy(2))
        .build()
        .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    let producer = Producer::new(q.queue.clone());
    producer.enqueue(&q.subject, "overridden", "x").await.expect("stored");
    assert!(wait_for(Duration::from_secs(10), || stats.count(JobOutcome::DeadLettered) == 1).await);
    assert_eq!(runs_of(&runs, "overridden"), 2, "the override's 2 attempts, not the file's 5");

    handle.reload_from_str(&text.replace("attempts = 5", "enabled = false"), Format::Toml).expect("valid");
    producer.enqueue(&q.subject, "switched-off", "x").await.expect("stored");
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::DeadLettered) == 2).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    running.stop().await;
    assert_eq!(runs_of(&runs, "switched-off"), 1, "the kill switch wins over the override");
    assert_eq!(runs_of(&runs, "overridden"), 2);
}

/// Spans are collected per thread: one worker thread, the test's.
#[tokio::test]
async fn each_attempts_span_carries_the_hash_of_the_configuration_it_ran_under() {
    let Some(url) = nats_url() else { return };
    let telemetry = Telemetry::install();
    let q = queue(&url, "config_hash", Duration::from_secs(5)).await;
    let text = rule(&q, "attempts = 2\n");
    let handle = handle_of(&text);
    let first = handle.snapshot().hash_str().to_string();
    let runs: Runs = Arc::default();
    let worker = Worker::builder(q.queue.clone(), fast_policy(5), always_busy(&runs))
        .config(handle.clone())
        .build()
        .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    let producer = Producer::new(q.queue.clone());
    producer.enqueue(&q.subject, "before", "x").await.expect("stored");
    assert!(wait_for(Duration::from_secs(10), || stats.count(JobOutcome::DeadLettered) == 1).await);
    let second =
        handle.reload_from_str(&text.replace("attempts = 2", "attempts = 1"), Format::Toml).expect("valid");
    producer.enqueue(&q.subject, "after", "x").await.expect("stored");
    assert!(wait_for(Duration::from_secs(10), || stats.count(JobOutcome::DeadLettered) == 2).await);
    running.stop().await;

    let name = format!("process {}", q.subject);
    let hashes: Vec<(String, Option<String>)> = telemetry
        .spans()
        .iter()
        .filter(|s| s.name == name)
        .map(|s| (attr(s, "retryscope.job.key").unwrap_or_default(), attr(s, "retryscope.config.hash")))
        .collect();
    let second = second.to_string();
    assert_eq!(
        hashes,
        [
            ("before".to_owned(), Some(first.clone())),
            ("before".to_owned(), Some(first)),
            ("after".to_owned(), Some(second))
        ],
        "two attempts under the first file, one under the reloaded one"
    );
}

/// The file's `attempt_timeout` is the execution's timeout, in place of the
/// builder's (5 min here): an attempt slower than it is cut, a transient
/// failure, and with one attempt the job is dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_attempt_timeout_replaces_the_builders_for_the_execution() {
    let Some(url) = nats_url() else { return };
    let q = queue(&url, "attempt_timeout", Duration::from_secs(5)).await;
    let handle = handle_of(&rule(&q, "attempts = 1\nattempt_timeout = \"200ms\"\n"));
    let runs: Runs = Arc::default();
    let seen = Arc::clone(&runs);
    let worker = Worker::builder(q.queue.clone(), fast_policy(3), move |job: Job| {
        *seen
            .lock()
            .expect("not poisoned")
            .entry(job.key.as_deref().unwrap_or("").to_owned())
            .or_default() += 1;
        async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<(), TestError>(())
        }
    })
    .attempt_timeout(Duration::from_secs(300))
    .config(handle)
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    let started = Instant::now();
    Producer::new(q.queue.clone()).enqueue(&q.subject, "slow", "x").await.expect("stored");
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::DeadLettered) == 1).await);
    let took = started.elapsed();
    running.stop().await;
    assert!(took < Duration::from_secs(5), "cut after the file's 200 ms, not the builder's 5 min: {took:?}");
    assert_eq!(runs_of(&runs, "slow"), 1);
    assert_eq!(letter_of(&q, "slow").await.reason, DeadReason::AttemptsExhausted);
}
