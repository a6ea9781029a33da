//! The kit's own promises: the scripted server plays what it is told, on the
//! paused clock; the schedule harness gives the waits an awaited retry really
//! takes, and the same ones for the same seed.

use retryscope::{ErrorType, Jitter, Policy, Retryable, Verdict};
use retryscope_testkit::schedule::{Schedule, Step, schedule_of};
use retryscope_testkit::{Reply, Server};
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn a_delayed_reply_arrives_after_its_delay_on_the_paused_clock() {
    let server = Server::start().await;
    server.script("/slow", [Reply::status(429).header("retry-after", "3").after(Duration::from_secs(2))]);
    let start = tokio::time::Instant::now();
    let response = reqwest::get(server.url("/slow")).await.expect("an answer");
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(response.headers()["retry-after"], "3");
    let took = start.elapsed();
    assert!((Duration::from_secs(2)..Duration::from_millis(2_100)).contains(&took), "{took:?}");
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn a_reset_reply_fails_the_request_and_the_next_one_is_answered() {
    let server = Server::start().await;
    server.script("/flaky", [Reply::reset(), Reply::ok("fine").into()]);
    let failed = reqwest::get(server.url("/flaky")).await;
    assert!(failed.is_err(), "{failed:?}");
    let fine = reqwest::get(server.url("/flaky")).await.expect("an answer");
    assert_eq!(fine.text().await.expect("a body"), "fine");
    assert_eq!(server.seen().iter().map(|s| s.path.as_str()).collect::<Vec<_>>(), ["/flaky", "/flaky"]);
}

fn jittered() -> Policy {
    Policy::builder()
        .max_attempts(6)
        .base_delay(Duration::from_millis(100))
        .max_delay(Duration::from_secs(2))
        .jitter(Jitter::Full)
        .build()
        .expect("valid policy")
}

#[tokio::test(start_paused = true)]
async fn the_harness_gives_the_waits_an_awaited_retry_takes_with_the_same_seed() {
    for seed in [0, 1, 99] {
        let mut waits = Vec::new();
        let mut attempts = 0;
        let _ = (|| {
            attempts += 1;
            async { Err::<(), _>("down") }
        })
        .retry(jittered())
        .seed(seed)
        .classify(|_: &Result<(), &str>| Verdict::retryable(ErrorType::RESET))
        .notify(|_: &&str, delay| waits.push(delay))
        .await;
        let run = Schedule::of(jittered()).seed(seed).run();
        assert_eq!(run.waits, waits, "seed {seed}");
        assert_eq!((run.attempts, attempts), (6, 6));
        assert_eq!(run.elapsed, waits.iter().sum::<Duration>());
    }
}

#[test]
fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
    let of = |seed| Schedule::of(jittered()).seed(seed).failures(4).run().waits;
    assert_eq!(of(5), of(5));
    assert_ne!(of(5), of(6));
    assert_eq!(of(5).len(), 4, "four failures, four waits, then success");
    assert_eq!(schedule_of(jittered(), 4), of(0));
}

#[test]
fn a_permanent_failure_stops_without_a_wait() {
    let run = Schedule::of(jittered()).script([Step::Fail, Step::Permanent]).run();
    assert_eq!((run.attempts, run.waits.len()), (2, 1));
    assert_eq!(run.stop, Some(retryscope::StopReason::Permanent));
}
