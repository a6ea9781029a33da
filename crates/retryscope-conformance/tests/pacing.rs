//! A dependency's pace, learned from one response and honoured by every call
//! of a client shared by many callers — for both integrations. Arithmetic on
//! tokio's paused clock; the herd's return on the wall clock.

use retryscope::{Pacer, Policy, StopReason};
use retryscope_test_support::{Reply, Server};
use std::time::Duration;
use tokio::time::Instant;

mod common;

use common::{Answer, BOTH, Client, Integration, Setup};

impl Integration {
    /// A client with `policy` and default guards (budget, breaker, pacer),
    /// without telemetry.
    fn pacing_client(self, policy: Policy) -> Client {
        self.client_pacing_with(policy, Pacer::new)
    }

    /// The same client, its pacers made by `pacer`.
    fn client_pacing_with(self, policy: Policy, pacer: fn() -> Pacer) -> Client {
        self.client(Setup::new(policy).pacer_per_dependency(pacer))
    }
}

/// Up to three attempts a call, a short backoff, a deadline of `deadline`.
fn policy(deadline: Duration) -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(100))
        .deadline(deadline)
        .build()
        .expect("valid policy")
}

/// One attempt a call: what the server answers is what the caller gets.
fn once() -> Policy {
    Policy::builder().max_attempts(1).deadline(Duration::from_secs(15)).build().expect("valid policy")
}

/// `callers` calls at once through `client`, each to `url`.
async fn herd(client: &Client, url: &str, callers: usize) -> Vec<Answer> {
    let calls = (0..callers).map(|_| {
        let (client, url) = (client.clone(), url.to_owned());
        tokio::spawn(async move { client.get(&url).await })
    });
    let mut answers = Vec::with_capacity(callers);
    for call in calls.collect::<Vec<_>>() {
        answers.push(call.await.expect("caller task"));
    }
    answers
}

/// On the wall clock: 20 callers of one client, after one of them got a 429
/// with `Retry-After: 2`. None of them reaches the server for those 2 s, and
/// when they do, they come back spread rather than in one spike.
#[tokio::test]
async fn one_429_holds_back_every_caller_and_they_return_spread() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/api", [Reply::with_header(429, "retry-after", "2")]);
        let client = integration.pacing_client(once());
        let url = server.url("/api");
        let told = client.get(&url).await;
        assert_eq!(told, Answer::Status(429), "{integration:?}");
        let told_at = server.seen()[0].at;

        let answers = herd(&client, &url, 20).await;
        assert!(answers.iter().all(|a| *a == Answer::Status(200)), "{integration:?}: {answers:?}");
        let arrivals: Vec<Duration> = server.seen()[1..].iter().map(|s| s.at - told_at).collect();
        assert_eq!(arrivals.len(), 20, "{integration:?}");
        let (first, last) = (arrivals.iter().min().copied(), arrivals.iter().max().copied());
        let (first, last) = first.zip(last).expect("20 arrivals");
        // Not one request inside the 2 s (a little slack for the time the
        // 429 took to reach the client after the server logged the request).
        assert!(first >= Duration::from_millis(1_950), "{integration:?}: {arrivals:?}");
        // The spread is a fifth of the hint, 400 ms: twenty callers cover
        // most of it, far from the 12 ms of a herd returning together.
        assert!(last - first >= Duration::from_millis(150), "{integration:?}: {arrivals:?}");
        assert!(last <= Duration::from_millis(2_400 + 500), "{integration:?}: {arrivals:?}");
    }
}

/// A 200 saying two requests are left in the next three seconds: the calls
/// that follow are spaced so that no more than two reach the server before
/// the reset.
#[tokio::test(start_paused = true)]
async fn a_quota_on_a_success_paces_the_calls_that_follow() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script(
            "/api",
            [Reply::Status(200, vec![("ratelimit", r#""default";r=2;t=3"#.to_owned())], "first")],
        );
        let client = integration.pacing_client(policy(Duration::from_secs(15)));
        let url = server.url("/api");
        assert_eq!(client.get(&url).await, Answer::Status(200), "{integration:?}");
        let reported_at = server.seen()[0].at;

        let answers = herd(&client, &url, 4).await;
        assert!(answers.iter().all(|a| *a == Answer::Status(200)), "{integration:?}: {answers:?}");
        let arrivals: Vec<Duration> = server.seen()[1..].iter().map(|s| s.at - reported_at).collect();
        let inside = arrivals.iter().filter(|at| **at < Duration::from_secs(3)).count();
        assert_eq!(inside, 2, "{integration:?}: {arrivals:?}");
        let mut sorted = arrivals.clone();
        sorted.sort();
        for pair in sorted.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(1_499), "{integration:?}: {sorted:?}");
        }
    }
}

/// An exhausted quota: the next call waits for the reset, or — when its
/// deadline is shorter than the wait — fails at once without being sent.
#[tokio::test(start_paused = true)]
async fn an_exhausted_quota_is_waited_out_or_refused_at_once() {
    for integration in BOTH {
        let server = Server::start().await;
        let exhausted = || Reply::Status(200, vec![("ratelimit", r#""default";r=0;t=2"#.to_owned())], "last");
        server.script("/api", [exhausted(), exhausted(), exhausted()]);
        let url = server.url("/api");

        let patient = integration.pacing_client(policy(Duration::from_secs(15)));
        assert_eq!(patient.get(&url).await, Answer::Status(200), "{integration:?}");
        let start = Instant::now();
        assert_eq!(patient.get(&url).await, Answer::Status(200), "{integration:?}");
        assert!(start.elapsed() >= Duration::from_secs(2), "{integration:?}: {:?}", start.elapsed());

        let hurried = integration.pacing_client(policy(Duration::from_millis(500)));
        assert_eq!(hurried.get(&url).await, Answer::Status(200), "{integration:?}");
        let seen = server.seen().len();
        let start = Instant::now();
        let refused = hurried.get(&url).await;
        assert!(
            matches!(refused, Answer::GaveUp(StopReason::RateLimited { .. }, _)),
            "{integration:?}: {refused:?}"
        );
        assert!(start.elapsed() < Duration::from_millis(1), "{integration:?}: not at once");
        assert_eq!(server.seen().len(), seen, "{integration:?}: the refused call was sent");
    }
}

/// Two policies in one `RateLimit` field (the draft's §7: no policy's quota
/// is to be exceeded before its reset): a spent 1-s burst window holds the
/// next call 1 s, and the hourly quota with one request left is then spent
/// by that call — the one after it cannot be sent within its 15-s deadline
/// and is refused at once. (The spent window stood for both: once it reset,
/// every call went.)
#[tokio::test(start_paused = true)]
async fn a_spent_policy_holds_the_next_call_and_another_policy_still_paces_after_it() {
    for integration in BOTH {
        let server = Server::start().await;
        let two = || {
            let field = r#""burst";r=0;t=1, "hour";r=1;t=3600"#.to_owned();
            Reply::Status(200, vec![("ratelimit", field)], "ok")
        };
        server.script("/api", [two(), two()]);
        let url = server.url("/api");
        let client = integration.pacing_client(policy(Duration::from_secs(15)));
        assert_eq!(client.get(&url).await, Answer::Status(200), "{integration:?}");

        let start = Instant::now();
        assert_eq!(client.get(&url).await, Answer::Status(200), "{integration:?}");
        let held = start.elapsed();
        assert!(held >= Duration::from_secs(1) && held < Duration::from_secs(3), "{integration:?}: {held:?}");
        let seen = server.seen().len();
        let refused = client.get(&url).await;
        assert!(
            matches!(refused, Answer::GaveUp(StopReason::RateLimited { .. }, _)),
            "{integration:?}: {refused:?}"
        );
        assert_eq!(server.seen().len(), seen, "{integration:?}: the hour's quota was exceeded");
    }
}

/// Quota headers that are malformed, contradictory or implausible slow
/// nothing down and break nothing.
#[tokio::test(start_paused = true)]
async fn malformed_quota_headers_change_nothing() {
    let malformed = [
        ("ratelimit", r#""default";r=-1;t=5"#),
        ("ratelimit", r#""default";r=0;t=-5"#),
        ("ratelimit", r#"default;r=0;t=5, ("#),
        ("ratelimit", r#""default";r=zero;t=5"#),
        ("ratelimit", r#""default";r=0;t=99999999999"#),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "5"),
        ("retry-after", "soon"),
        ("ratelimit-remaining", "-3"),
        ("retry-after", "-5"),
    ];
    for integration in BOTH {
        let server = Server::start().await;
        server.script(
            "/api",
            malformed.iter().map(|(name, value)| Reply::Status(200, vec![(name, (*value).to_owned())], "ok")),
        );
        let client = integration.pacing_client(policy(Duration::from_secs(15)));
        let url = server.url("/api");
        let start = Instant::now();
        for _ in 0..=malformed.len() {
            assert_eq!(client.get(&url).await, Answer::Status(200), "{integration:?}");
        }
        assert!(
            start.elapsed() < Duration::from_millis(1),
            "{integration:?}: slowed by {:?}",
            start.elapsed()
        );
    }
}

/// A rate limit is not an outage: 40 calls answered 429 leave the breaker
/// closed (the 41st still reaches the server); 40 answered 503 open it.
#[tokio::test(start_paused = true)]
async fn a_wave_of_429s_never_opens_the_breaker_and_an_outage_does() {
    for integration in BOTH {
        for (status, opens) in [(429, false), (503, true)] {
            let server = Server::start().await;
            server.script("/api", (0..40).map(|_| Reply::status(status)));
            let client = integration.pacing_client(once());
            let url = server.url("/api");
            let mut refused = 0;
            for _ in 0..41 {
                match client.get(&url).await {
                    Answer::GaveUp(StopReason::CircuitOpen, _) => refused += 1,
                    Answer::Status(_) => {}
                    other => panic!("{integration:?} {status}: {other:?}"),
                }
            }
            if opens {
                assert!(refused > 0, "{integration:?}: 40 503s did not open the breaker");
                assert!(server.seen().len() < 41, "{integration:?}");
            } else {
                assert_eq!(refused, 0, "{integration:?}: 429s opened the breaker");
                assert_eq!(server.seen().len(), 41, "{integration:?}");
            }
        }
    }
}

/// A caller that gives up while the pacer holds its call sends nothing, now
/// or later.
#[tokio::test(start_paused = true)]
async fn a_call_cancelled_while_held_sends_nothing() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/api", [Reply::with_header(503, "retry-after", "5")]);
        let client = integration.pacing_client(once());
        let url = server.url("/api");
        assert_eq!(client.get(&url).await, Answer::Status(503), "{integration:?}");
        let cancelled = tokio::time::timeout(Duration::from_secs(1), client.get(&url)).await;
        assert!(cancelled.is_err(), "{integration:?}: the held call was not held: {cancelled:?}");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(server.seen().len(), 1, "{integration:?}: a cancelled call reached the server");
    }
}

/// Adaptive mode: a dependency that throttles without saying how fast (429s
/// with no header at all) slows the client down once it has throttled; the
/// default pacer, with nothing to go on, does not.
#[tokio::test(start_paused = true)]
async fn adaptive_mode_slows_down_on_bare_429s() {
    for integration in BOTH {
        let mut elapsed = Vec::new();
        for pacer in [Pacer::new as fn() -> Pacer, Pacer::adaptive] {
            let server = Server::start().await;
            server.script("/api", (0..30).map(|_| Reply::status(429)));
            let client = integration.client_pacing_with(once(), pacer);
            let url = server.url("/api");
            let start = Instant::now();
            for _ in 0..30 {
                assert_eq!(client.get(&url).await, Answer::Status(429), "{integration:?}");
            }
            elapsed.push(start.elapsed());
        }
        assert_eq!(elapsed[0], Duration::ZERO, "{integration:?}: the default pacer held bare 429s");
        // Cut to the minimum fill rate (0.5/s) after a few throttles, thirty
        // calls take many seconds.
        assert!(elapsed[1] >= Duration::from_secs(10), "{integration:?}: adaptive took {:?}", elapsed[1]);
    }
}

/// On the wall clock: the caller that got the 429 retries after its own
/// `Retry-After`, and asking for that retry's slot does not lift the gate for
/// the callers who arrive meanwhile.
#[tokio::test]
async fn a_retrying_caller_does_not_lift_the_gate_for_the_others() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/api", [Reply::with_header(429, "retry-after", "2")]);
        let client = integration.pacing_client(policy(Duration::from_secs(15)));
        let url = server.url("/api");
        let told = tokio::spawn({
            let (client, url) = (client.clone(), url.clone());
            async move { client.get(&url).await }
        });
        while server.seen().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let told_at = server.seen()[0].at;
        // The 429 has reached the client and its retry is planned.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let answers = herd(&client, &url, 5).await;
        assert!(answers.iter().all(|a| *a == Answer::Status(200)), "{integration:?}: {answers:?}");
        assert_eq!(told.await.expect("task"), Answer::Status(200), "{integration:?}");
        let arrivals: Vec<Duration> = server.seen()[1..].iter().map(|s| s.at - told_at).collect();
        assert_eq!(arrivals.len(), 6, "{integration:?}: {arrivals:?}");
        assert!(
            arrivals.iter().all(|at| *at >= Duration::from_millis(1_950)),
            "{integration:?}: {arrivals:?}"
        );
    }
}
