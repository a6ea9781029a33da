//! Hosts beyond the process's 1,000 dependency labels, for both integrations
//! against real loopback servers: each keeps guards of its own, so one
//! host's `429` holds no other host and one host's open breaker refuses no
//! other, while their telemetry label stays `_OTHER`. Before, every host past
//! the bound shared the one `_OTHER` guard set: a call to a server that never
//! sent a `429` gave up as rate-limited.
//!
//! The same holds for a configured client's guards per server (a file whose
//! `defaults` write a guard key): they are kept by the same registry.
//!
//! A binary of its own: it fills the process's table of dependency names.

use retryscope::dependency::{MAX_DEPENDENCIES, OVERFLOW, bounded_dependency};
use retryscope::{CircuitBreaker, Pacer, Policy, StopReason};
use retryscope_test_support::telemetry::Telemetry;
use retryscope_test_support::{Reply, Server};
use retryscope_tower::RetryOptions;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::time::Instant;

mod common;

use common::{Answer, BOTH, Call, Client, Integration, Setup, code_policy};

const DEPENDENCY: &str = "retryscope.dependency";

/// Takes every label the process has, so that the servers below (each
/// `127.0.0.1:port`) are all beyond the bound. Either test may run first.
fn fill_the_label_table() {
    for i in 0..MAX_DEPENDENCIES {
        let _ = bounded_dependency(&format!("filler-{i}.test"));
    }
    assert_eq!(bounded_dependency("127.0.0.1:1"), OVERFLOW);
}

/// `call` with the caller's own limit of `limit`: reqwest's `.timeout()`, a
/// tower caller's deadline through `RetryOptions`.
fn within(integration: Integration, call: Call, limit: Duration) -> Call {
    match integration {
        Integration::Reqwest => call.timeout(limit),
        Integration::Tower => {
            call.extension(RetryOptions::new().policy(Policy::interactive().with_deadline_within(limit)))
        }
    }
}

/// The dependency labels `metric` was reported under.
fn labels(t: &Telemetry, metric: &str) -> BTreeSet<String> {
    t.series(metric, DEPENDENCY).0
}

/// One host past the bound answers `429 Retry-After: 2`: its own pacer holds
/// its next call (refused at once, as the caller's 500 ms cannot cover the
/// hold), and a call to another host past the bound, which never sent a
/// `429`, is answered at once. Both reported under `_OTHER`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_from_one_host_beyond_the_bound_holds_no_other_host() {
    fill_the_label_table();
    for integration in BOTH {
        let t = Telemetry::install();
        let (limited, healthy) = (Server::start().await, Server::start().await);
        let client =
            integration.client(Setup::new(Policy::interactive()).pacer_per_dependency(Pacer::new).meter(&t));

        limited.script("/", [Reply::with_header(429, "retry-after", "2")]);
        let once = Policy::builder().max_attempts(1).build().expect("valid policy");
        let told = Call::get(limited.url("/")).extension(RetryOptions::new().policy(once));
        assert_eq!(client.answer(told).await, Answer::Status(429), "{integration:?}");

        let held = client.answer(within(integration, Call::get(limited.url("/")), LIMIT)).await;
        assert!(
            matches!(held, Answer::GaveUp(StopReason::RateLimited { .. }, _)),
            "{integration:?}: the host that sent the 429 is not held: {held:?}"
        );

        let start = Instant::now();
        let other = client.answer(within(integration, Call::get(healthy.url("/")), LIMIT)).await;
        let took = start.elapsed();
        eprintln!("{integration:?}: the other host answered {other:?} after {took:?}");
        assert_eq!(other, Answer::Status(200), "{integration:?}: another host's 429 held it");
        assert!(took < Duration::from_millis(400), "{integration:?}: held {took:?}");
        assert_eq!(healthy.seen().len(), 1, "{integration:?}");

        // Telemetry stays bounded: every call is `_OTHER`'s.
        assert_eq!(
            labels(&t, "retryscope.requests"),
            BTreeSet::from([OVERFLOW.to_owned()]),
            "{integration:?}"
        );
        assert_eq!(t.requests(OVERFLOW), 3, "{integration:?}");
    }
}

/// The caller's limit on the calls after the `429`: shorter than its 2 s.
const LIMIT: Duration = Duration::from_millis(500);

/// Opens on the second failure of two calls, and stays open through the test.
fn quick_breaker() -> CircuitBreaker {
    CircuitBreaker::builder()
        .min_calls(2)
        .failure_ratio(0.5)
        .cool_down(Duration::from_secs(30))
        .build()
        .expect("valid breaker")
}

/// One host past the bound fails until its breaker opens; another host past
/// the bound is still called and answers. The breaker gauge reports the
/// overflow hosts as one `_OTHER` series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_beyond_the_bound_that_fails_opens_no_other_hosts_breaker() {
    fill_the_label_table();
    for integration in BOTH {
        let t = Telemetry::install();
        let (down, healthy) = (Server::start().await, Server::start().await);
        down.script("/", vec![Reply::status(503); 10]);
        let once = Policy::builder().max_attempts(1).build().expect("valid policy");
        let client = integration.client(Setup::new(once).breaker_per_dependency(quick_breaker).meter(&t));
        let client: &Client = &client;

        assert_eq!(client.get(&down.url("/")).await, Answer::Status(503), "{integration:?}");
        assert_eq!(client.get(&down.url("/")).await, Answer::Status(503), "{integration:?}");
        let refused = client.get(&down.url("/")).await;
        assert!(
            matches!(refused, Answer::GaveUp(StopReason::CircuitOpen, _)),
            "{integration:?}: the failing host's breaker did not open: {refused:?}"
        );
        assert_eq!(down.seen().len(), 2, "{integration:?}");

        let other = client.get(&healthy.url("/")).await;
        assert_eq!(other, Answer::Status(200), "{integration:?}: another host's breaker refused it");
        assert_eq!(healthy.seen().len(), 1, "{integration:?}");

        // Two breakers, one `_OTHER` series: they carry the same label.
        let (names, series) = t.series("retryscope.breaker.state", DEPENDENCY);
        assert_eq!((names, series), (BTreeSet::from([OVERFLOW.to_owned()]), 1), "{integration:?}");
    }
}

/// A configured client whose file's `defaults` write a breaker (and its
/// builder none): the calls no dependency matches get it per server, and two
/// servers past the bound still get one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_clients_breakers_per_server_beyond_the_bound_are_apart() {
    use retryscope_config::{Config, ConfigHandle, Format, KnownNames};

    fill_the_label_table();
    let text = "[defaults]\nattempts = 1\n\
                breaker = { min_calls = 2, failure_ratio = 0.5, cool_down = \"30s\" }\n";
    for integration in BOTH {
        let known = KnownNames::new();
        let config = Config::parse(text, Format::Toml, "overflow.toml", &known).expect("a valid file");
        let handle = ConfigHandle::builder(known).config(config).build().expect("a handle");
        let (down, healthy) = (Server::start().await, Server::start().await);
        down.script("/", vec![Reply::status(503); 10]);
        let client = integration.client(Setup::new(code_policy()).no_budget().no_breaker().config(handle));

        for _ in 0..2 {
            assert_eq!(client.get(&down.url("/")).await, Answer::Status(503), "{integration:?}");
        }
        let refused = client.get(&down.url("/")).await;
        assert!(
            matches!(refused, Answer::GaveUp(StopReason::CircuitOpen, _)),
            "{integration:?}: the file's breaker did not open: {refused:?}"
        );
        let other = client.get(&healthy.url("/")).await;
        assert_eq!(other, Answer::Status(200), "{integration:?}: another host's breaker refused it");
    }
}
