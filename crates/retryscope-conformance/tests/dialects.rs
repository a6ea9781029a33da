//! The vendors' rate-limit dialects on the wire, for both integrations: what
//! OpenAI's and GitHub's APIs answer when a client is over its limit holds
//! every call of a shared client to that dependency, as a `Retry-After` on a
//! 429 does. (Each dialect's parsing is table-tested in the engine's
//! `tests/dialects.rs`.) Paused clock.

use retryscope::{Pacer, Policy};
use retryscope_test_support::{Reply, Server};
use std::time::Duration;
use tokio::time::Instant;

mod common;

use common::{Answer, BOTH, Setup};

/// One attempt a call: what the server answers is what the caller gets.
fn once() -> Policy {
    Policy::builder().max_attempts(1).deadline(Duration::from_secs(15)).build().expect("valid policy")
}

/// OpenAI over its token limit: a 429 whose requests are left but whose
/// tokens are spent for 2 s, with `retry-after-ms: 1500`. The hold is the
/// spent token window (the strictest of the three), not the 1.5 s.
#[tokio::test(start_paused = true)]
async fn openai_spent_tokens_hold_every_call_until_their_reset() {
    for integration in BOTH {
        let server = Server::start().await;
        let headers = [
            ("x-ratelimit-remaining-requests", "41"),
            ("x-ratelimit-reset-requests", "1.2s"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "2s"),
            ("retry-after-ms", "1500"),
        ];
        let headers = headers.iter().map(|(n, v)| (*n, (*v).to_owned())).collect();
        server.script("/v1/chat/completions", [Reply::Status(429, headers, "rate_limit_exceeded")]);
        let client = integration.client(Setup::new(once()).pacer_per_dependency(Pacer::new));
        let url = server.url("/v1/chat/completions");
        assert_eq!(client.get(&url).await, Answer::Status(429), "{integration:?}");

        let start = Instant::now();
        assert_eq!(client.get(&url).await, Answer::Status(200), "{integration:?}");
        let held = start.elapsed();
        assert!(held >= Duration::from_secs(2), "{integration:?}: held {held:?}");
        // The hold's spread is a fifth of it at most.
        assert!(held <= Duration::from_millis(2_400 + 10), "{integration:?}: held {held:?}");
        assert_eq!(server.seen().len(), 2, "{integration:?}: nothing sent during the hold");
    }
}

/// GitHub's secondary rate limit: a 403 with `retry-after` and GitHub's
/// `x-ratelimit-resource`. The 403 itself is not retried (it is not
/// transient), but the next call waits it out; a 403 without
/// GitHub's header holds nothing.
#[tokio::test(start_paused = true)]
async fn a_github_secondary_limit_holds_the_next_call_and_another_403_does_not() {
    for integration in BOTH {
        let server = Server::start().await;
        let secondary = vec![("retry-after", "3".to_owned()), ("x-ratelimit-resource", "core".to_owned())];
        server.script("/repos", [Reply::Status(403, secondary, "secondary rate limit")]);
        server.script("/forbidden", [Reply::with_header(403, "retry-after", "3")]);
        let client = integration.client(Setup::new(once()).pacer_per_dependency(Pacer::new));

        assert_eq!(client.get(&server.url("/forbidden")).await, Answer::Status(403), "{integration:?}");
        let start = Instant::now();
        assert_eq!(client.get(&server.url("/forbidden")).await, Answer::Status(200), "{integration:?}");
        assert!(start.elapsed() < Duration::from_millis(10), "{integration:?}: {:?}", start.elapsed());

        assert_eq!(client.get(&server.url("/repos")).await, Answer::Status(403), "{integration:?}");
        let start = Instant::now();
        assert_eq!(client.get(&server.url("/repos")).await, Answer::Status(200), "{integration:?}");
        let held = start.elapsed();
        assert!(held >= Duration::from_secs(3), "{integration:?}: held {held:?}");
        assert!(held <= Duration::from_millis(3_600 + 10), "{integration:?}: held {held:?}");
    }
}
