//! What a worker and a replay report, against a real nats-server, read back
//! from an in-memory OpenTelemetry SDK: the dead-letter depth gauge, and a
//! replay as a span and an outcome. (One test per file: the meter provider is
//! process-wide.)

mod support;

use retryscope_jobs::telemetry::{DEAD_LETTER_DEPTH, DELIVERIES, DESTINATION_ATTR, OUTCOME_ATTR};
use retryscope_jobs::{DeadLetterStore, Job, JobOutcome, Producer, Worker, dead};
use retryscope_test_support::telemetry::{Telemetry, attr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::{TestError, fast_policy, nats_url, queue, start, wait_for};

/// Polls `read` (a collection each time) until it returns `want`, for up to 5 s.
async fn eventually(want: Option<u64>, mut read: impl FnMut() -> Option<u64>) -> Option<u64> {
    for _ in 0..100 {
        let got = read();
        if got == want {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    read()
}

#[tokio::test]
async fn the_depth_gauge_follows_the_dead_letters_and_a_replay_is_a_span_and_an_outcome() {
    let Some(url) = nats_url() else { return };
    let telemetry = Telemetry::install();
    telemetry.install_global_meter();
    let policy = fast_policy(2);
    let q = queue(&url, "telemetry", Duration::from_secs(5)).await;
    let fixed = Arc::new(AtomicBool::new(false));
    let is_fixed = Arc::clone(&fixed);
    let worker = Worker::builder(q.queue.clone(), policy, move |_job: Job| {
        let ok = is_fixed.load(Ordering::SeqCst);
        async move { if ok { Ok(()) } else { Err(TestError::Busy) } }
    })
    .dead_letter_depth_every(Duration::from_millis(100))
    .build()
    .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    let dead_stream = q.queue.dead_letters_name().to_owned();
    assert_eq!(dead_stream, format!("{}_DEAD", q.stream));
    let depth = || telemetry.gauge_u64(DEAD_LETTER_DEPTH, &[(DESTINATION_ATTR, &dead_stream)]);
    assert_eq!(eventually(Some(0), depth).await, Some(0), "an empty dead-letter stream reads 0");

    Producer::new(q.queue.clone()).enqueue(&q.subject, "invoice-9", "pdf").await.expect("stored");
    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::DeadLettered) == 1).await);
    assert_eq!(eventually(Some(1), depth).await, Some(1), "the gauge shows the dead letter");
    assert_eq!(
        telemetry.counter(DELIVERIES, &[(OUTCOME_ATTR, "dead_lettered"), (DESTINATION_ATTR, &q.subject)]),
        1
    );

    fixed.store(true, Ordering::SeqCst);
    let listed = dead::list(&q.queue, 0, 10).await.expect("listed");
    let replayed = dead::replay(&q.queue, listed[0].id).await.expect("replayed");
    let dead::Replayed::Queued { published, .. } = replayed else { panic!("not queued: {replayed:?}") };
    assert_eq!(
        telemetry.counter(DELIVERIES, &[(OUTCOME_ATTR, "replayed"), (DESTINATION_ATTR, &q.subject)]),
        1
    );
    let spans = telemetry.spans();
    let span = spans.iter().find(|s| s.name == format!("replay {}", q.subject)).unwrap_or_else(|| {
        panic!("no replay span in {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>())
    });
    assert_eq!(span.span_kind, opentelemetry::trace::SpanKind::Producer);
    assert_eq!(attr(span, "messaging.system").as_deref(), Some("nats"));
    assert_eq!(attr(span, "messaging.operation.type").as_deref(), Some("send"));
    assert_eq!(attr(span, "messaging.destination.name").as_deref(), Some(q.subject.as_str()));
    assert_eq!(attr(span, "messaging.message.id"), Some(published.sequence.to_string()));
    assert_eq!(attr(span, "retryscope.job.key").as_deref(), Some("invoice-9"));
    assert_eq!(attr(span, "retryscope.job.replays").as_deref(), Some("1"));
    assert_eq!(attr(span, "retryscope.job.dead_reason").as_deref(), Some("attempts_exhausted"));
    assert_eq!(attr(span, "retryscope.job.dead_letter.id"), Some(listed[0].id.to_string()));
    assert_eq!(attr(span, "retryscope.job.outcome").as_deref(), Some("replayed"));

    assert!(wait_for(Duration::from_secs(5), || stats.count(JobOutcome::Succeeded) == 1).await);
    assert_eq!(eventually(Some(0), depth).await, Some(0), "the replayed letter is gone from the gauge");
    running.stop().await;
    assert_eq!(eventually(None, depth).await, None, "a stopped worker reports no depth, not a stale one");
}
