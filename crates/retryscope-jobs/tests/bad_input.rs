//! Messages retryscope did not write, against a real nats-server: without its
//! headers a job is attempt 1 and the worker says so once, not per message;
//! with headers that do not parse, or a run-at no policy could set, it is a
//! dead letter, `invalid_job_metadata`, whichever header is wrong.

mod support;

use retryscope_jobs::meta::{ATTEMPT_HEADER, FIRST_ATTEMPT_HEADER, REPLAYS_HEADER, RUN_AT_HEADER};
use retryscope_jobs::{DeadReason, Job, JobOutcome, Worker, dead};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::{TestError, fast_policy, nats_url, queue, start, wait_for};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// The (key, attempt) of each job the handler ran.
type Seen = Arc<Mutex<Vec<(Option<String>, u32)>>>;

/// Counts the events whose message contains `needle`.
struct CountEvents {
    needle: &'static str,
    seen: Arc<AtomicUsize>,
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountEvents {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        if message.0.contains(self.needle) {
            self.seen.fetch_add(1, Ordering::SeqCst);
        }
    }
}

// Current-thread: the worker's tasks run on this thread, under its subscriber.
#[tokio::test]
async fn jobs_without_headers_are_attempt_one_and_logged_once_per_worker() {
    let Some(url) = nats_url() else { return };
    let logged = Arc::new(AtomicUsize::new(0));
    let layer = CountEvents { needle: "without retryscope's headers", seen: Arc::clone(&logged) };
    let _subscriber =
        retryscope_test_support::telemetry::set_default(tracing_subscriber::registry().with(layer));
    let policy = fast_policy(3);
    let q = queue(&url, "bare", Duration::from_secs(5)).await;
    let attempts: Seen = Arc::default();
    let seen = Arc::clone(&attempts);
    let worker = Worker::builder(q.queue.clone(), policy, move |job: Job| {
        seen.lock().expect("not poisoned").push((job.key.as_deref().map(str::to_owned), job.attempt));
        async { Ok::<(), TestError>(()) }
    })
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    let js = q.queue.context();
    for n in 0..3 {
        js.publish(q.subject.clone(), format!("plain {n}").into())
            .await
            .expect("sent")
            .await
            .expect("stored");
    }
    // Another producer's de-duplication id stands in for the job key.
    let mut other = async_nats::HeaderMap::new();
    other.insert("Nats-Msg-Id", "evt-5");
    js.publish_with_headers(q.subject.clone(), other, "x".into()).await.expect("sent").await.expect("stored");
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::Succeeded) == 4).await);
    running.stop().await;
    let mut attempts = attempts.lock().expect("not poisoned").clone();
    attempts.sort();
    assert_eq!(attempts, vec![(None, 1), (None, 1), (None, 1), (Some("evt-5".to_owned()), 1)]);
    assert_eq!(logged.load(Ordering::SeqCst), 1, "logged once, not once per message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_malformed_header_is_a_dead_letter_never_a_run() {
    let Some(url) = nats_url() else { return };
    let policy = fast_policy(3);
    let q = queue(&url, "malformed", Duration::from_secs(5)).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&runs);
    let worker = Worker::builder(q.queue.clone(), policy, move |_job: Job| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { Ok::<(), TestError>(()) }
    })
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    // Ten years ahead: it parses, but no policy schedules that far (28 days at most).
    let far = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_millis() + 315_360_000_000;
    let far = far.to_string();
    let cases: [&[(&str, &str)]; 6] = [
        &[(ATTEMPT_HEADER, "-1")],
        &[(ATTEMPT_HEADER, "3")], // a retry that does not say when the job started
        &[(ATTEMPT_HEADER, "2"), (FIRST_ATTEMPT_HEADER, "yesterday")],
        &[(ATTEMPT_HEADER, "1"), (RUN_AT_HEADER, "18446744073709551616")], // past u64
        &[(ATTEMPT_HEADER, "1"), (REPLAYS_HEADER, "🙂")],
        &[(ATTEMPT_HEADER, "1"), (RUN_AT_HEADER, far.as_str())],
    ];
    let js = q.queue.context();
    for headers in cases {
        let mut map = async_nats::HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, *value);
        }
        js.publish_with_headers(q.subject.clone(), map, "x".into())
            .await
            .expect("sent")
            .await
            .expect("stored");
    }
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::DeadLettered) == 6).await);
    running.stop().await;
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a job whose headers do not parse never runs");
    let letters = dead::list(&q.queue, 0, 10).await.expect("listed");
    assert_eq!(letters.len(), 6);
    for listed in &letters {
        let letter = listed.letter.as_ref().expect("a dead letter the worker wrote is readable");
        assert_eq!(letter.reason, DeadReason::InvalidJobMetadata);
        let error = letter.last_error.as_deref().unwrap_or("");
        assert!(error.contains("header is malformed") || error.contains("days ahead"), "{letter:?}");
    }
}
