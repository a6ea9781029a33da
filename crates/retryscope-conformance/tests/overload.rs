//! Client-side adaptive throttling (the SRE book's), for both integrations,
//! against a real loopback server on tokio's paused clock: a dependency that
//! accepts nothing gets a fraction of the requests of an unthrottled client,
//! the rest rejected locally without being sent.

use retryscope::overload::AdaptiveThrottle;
use retryscope::{Policy, StopReason};
use retryscope_test_support::{Reply, Server};
use std::time::Duration;

mod common;

use common::{Answer, BOTH, Setup};

/// Calls made in each run, 10 ms apart: 10 s, well inside the 2 min window.
const CALLS: usize = 1_000;

fn once() -> Policy {
    Policy::builder().max_attempts(1).deadline(Duration::from_secs(5)).build().expect("valid policy")
}

#[tokio::test(start_paused = true)]
async fn a_dead_dependency_gets_at_most_one_kth_of_the_requests_and_the_rest_are_rejected_locally() {
    for integration in BOTH {
        let mut sent = Vec::new();
        for throttled in [false, true] {
            let server = Server::start().await;
            server.script("/api", (0..CALLS).map(|_| Reply::status(503)));
            // No breaker, so that only the throttle stands between the
            // calls and the dead server.
            let setup = Setup::new(once()).no_breaker();
            let setup = if throttled {
                setup.adaptive_throttle_per_dependency(AdaptiveThrottle::default)
            } else {
                setup
            };
            let client = integration.client(setup);
            let url = server.url("/api");
            let (mut rejected, mut failed) = (0, 0);
            for _ in 0..CALLS {
                match client.get(&url).await {
                    Answer::Status(503) => failed += 1,
                    Answer::GaveUp(StopReason::RejectedLocally, None) => rejected += 1,
                    other => panic!("{integration:?}: {other:?}"),
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(server.seen().len(), failed, "{integration:?}: a rejected call was sent");
            assert_eq!(failed + rejected, CALLS, "{integration:?}");
            sent.push(failed);
        }
        let [unthrottled, throttled] = sent[..] else { unreachable!("two runs") };
        assert_eq!(unthrottled, CALLS, "{integration:?}");
        // K = 2: at most half of what an unthrottled client sends (with
        // nothing accepted, far fewer), yet never nothing: the dependency is
        // still probed, so that its recovery shows.
        assert!(throttled <= unthrottled / 2, "{integration:?}: {throttled} of {unthrottled}");
        assert!(throttled >= 1, "{integration:?}: {throttled} of {unthrottled}");
        eprintln!("{integration:?}: a dead dependency got {throttled} of {unthrottled} requests");
    }
}

/// A dependency that accepts every request: nothing is rejected.
#[tokio::test(start_paused = true)]
async fn a_healthy_dependency_is_never_throttled() {
    for integration in BOTH {
        let server = Server::start().await;
        let client = integration
            .client(Setup::new(once()).adaptive_throttle_per_dependency(AdaptiveThrottle::default));
        let url = server.url("/api");
        for _ in 0..200 {
            assert_eq!(client.get(&url).await, Answer::Status(200), "{integration:?}");
        }
        assert_eq!(server.seen().len(), 200, "{integration:?}");
    }
}
