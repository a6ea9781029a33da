//! `messaging.destination.name` on the job metrics is bounded, against a real
//! nats-server: subjects that carry ids fold into `_OTHER` beyond the cap.
//! (A file of its own: the meter provider is process-wide.)

mod support;

use retryscope_jobs::nats::{NatsQueue, NatsQueueConfig};
use retryscope_jobs::telemetry::{DELIVERIES, DESTINATION_ATTR, MAX_DESTINATIONS, OUTCOME_ATTR};
use retryscope_jobs::{Job, JobOutcome, Producer, Worker};
use retryscope_test_support::telemetry::Telemetry;
use std::time::Duration;
use support::{TestError, fast_policy, nats_url, start, unique, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destinations_beyond_the_cap_are_reported_as_other() {
    let Some(url) = nats_url() else { return };
    let telemetry = Telemetry::install();
    telemetry.install_global_meter();
    let policy = fast_policy(2);
    let client = async_nats::connect(&url).await.expect("nats-server answers");
    let stream = unique("destinations").to_uppercase();
    let prefix = stream.to_lowercase();
    let config = NatsQueueConfig::new(&stream, [format!("{prefix}.>")], "workers");
    let queue = NatsQueue::open(client, config).await.expect("streams and consumer");
    let subjects = MAX_DESTINATIONS + 20;
    let worker = Worker::builder(queue.clone(), policy, |_job: Job| async { Ok::<(), TestError>(()) })
        .concurrency(32)
        .build()
        .expect("valid settings");
    let stats = worker.stats();
    let running = start(|stopped| worker.run(stopped));
    let producer = Producer::new(queue.clone());
    for n in 0..subjects {
        // Subjects that carry an id, as `orders.<id>` does.
        producer.enqueue(&format!("{prefix}.orders.{n}"), &format!("o-{n}"), "x").await.expect("stored");
    }
    let all =
        wait_for(Duration::from_secs(10), || stats.count(JobOutcome::Succeeded) == subjects as u64).await;
    running.stop().await;
    assert!(all, "{} of {subjects} succeeded", stats.count(JobOutcome::Succeeded));
    let (values, _) = telemetry.series(DELIVERIES, DESTINATION_ATTR);
    assert!(values.contains(retryscope::dependency::OVERFLOW), "{values:?}");
    assert!(values.len() <= MAX_DESTINATIONS + 1, "{} destinations", values.len());
    assert_eq!(
        telemetry.counter(DELIVERIES, &[(OUTCOME_ATTR, "succeeded")]),
        subjects as u64,
        "every delivery is counted, under its subject or _OTHER"
    );
}
