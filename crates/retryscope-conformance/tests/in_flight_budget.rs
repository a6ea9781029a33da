//! Envoy's retry budget on a real server: fifty calls to a loopback axum
//! service that is down, each retried by a reqwest call under one
//! `InFlightBudget`. The server counts the retries it is handling at once
//! (the `x-attempt` header each attempt carries): with the budget at most a
//! fifth of the calls; without it, all of them.

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use retryscope::budget::InFlightBudget;
use retryscope::dependency::Dependency;
use retryscope::{Jitter, Policy, Retryable};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

mod common;

use common::{BOTH, Call, Integration, Setup};
use retryscope_config::{ConfigHandle, Format, KnownNames};
use retryscope_test_support::telemetry::Telemetry;

/// Retries the server is handling now, and the most it handled at once.
#[derive(Clone, Default)]
struct Retries {
    now: Arc<AtomicU32>,
    peak: Arc<AtomicU32>,
    total: Arc<AtomicU32>,
}

/// A service that is down: every request takes 30 ms and answers 503.
async fn down(retries: Retries) -> String {
    down_on(retries, "x-attempt").await
}

/// [`down`], reading the attempt number from `header`.
async fn down_on(retries: Retries, header: &'static str) -> String {
    let app = Router::new().route(
        "/inventory",
        get(move |headers: HeaderMap| {
            let retries = retries.clone();
            async move {
                let retry = headers.get(header).is_some_and(|n| n != "1");
                if retry {
                    let now = retries.now.fetch_add(1, Ordering::SeqCst) + 1;
                    retries.peak.fetch_max(now, Ordering::SeqCst);
                    retries.total.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
                if retry {
                    retries.now.fetch_sub(1, Ordering::SeqCst);
                }
                StatusCode::SERVICE_UNAVAILABLE
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let url = format!("http://{}/inventory", listener.local_addr().expect("bound"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Fifty concurrent calls, each up to four attempts 20 ms apart; with
/// `budget`, under it.
async fn fifty_calls(url: &str, budget: Option<InFlightBudget>) {
    let client = reqwest::Client::new();
    let policy = four_attempts();
    let calls = (0..50).map(|_| {
        let (client, url, budget, policy) = (client.clone(), url.to_owned(), budget.clone(), policy);
        tokio::spawn(async move {
            let attempt = AtomicU32::new(0);
            let call = || {
                let n = attempt.fetch_add(1, Ordering::SeqCst) + 1;
                let request = client.get(&url).header("x-attempt", n.to_string()).send();
                async move {
                    let status = request.await.map_err(|e| e.to_string())?.status();
                    if status.is_server_error() { Err(format!("{status}")) } else { Ok(status) }
                }
            };
            let retry = call.retry(policy).when(|_: &String| true);
            match budget {
                Some(budget) => {
                    retry.dependency(&Dependency::new("upstream").with_guard(budget)).await.map(drop)
                }
                None => retry.await.map(drop),
            }
        })
    });
    for call in calls.collect::<Vec<_>>() {
        assert!(call.await.expect("no panic").is_err(), "the service is down");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_a_fifth_of_the_calls_in_progress_have_a_retry_at_the_server() {
    let without = Retries::default();
    fifty_calls(&down(without.clone()).await, None).await;
    let with = Retries::default();
    let budget = InFlightBudget::envoy();
    fifty_calls(&down(with.clone()).await, Some(budget.clone())).await;
    let (peak_without, peak_with) = (without.peak.load(Ordering::SeqCst), with.peak.load(Ordering::SeqCst));
    println!(
        "retries at the server at once: {peak_without} without the budget ({} in all), {peak_with} with it ({} in all)",
        without.total.load(Ordering::SeqCst),
        with.total.load(Ordering::SeqCst)
    );
    // Fifty calls in progress allow ten retries out at once.
    assert!(peak_with <= 10, "{peak_with} retries at once");
    assert!(peak_with >= 3, "the floor lets three through: {peak_with}");
    assert!(peak_without > 20, "without the budget the retries come together: {peak_without}");
    // Every call ended and every retry was given back.
    assert_eq!((budget.in_flight(), budget.calls()), (0, 0));
}

/// Four attempts 20 ms apart, no jitter, within 5 s.
fn four_attempts() -> Policy {
    Policy::builder()
        .max_attempts(4)
        .base_delay(Duration::from_millis(20))
        .max_delay(Duration::from_millis(20))
        .jitter(Jitter::None)
        .deadline(Duration::from_secs(5))
        .build()
        .expect("valid policy")
}

/// Fifty concurrent GETs of `url` through `client`; each gives up on the
/// down service.
async fn fifty_through(integration: Integration, client: &Arc<common::Client>, url: &str) {
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let (client, url) = (Arc::clone(client), url.to_owned());
            tokio::spawn(async move { client.send(Call::new(http::Method::GET, url)).await })
        })
        .collect();
    for call in calls {
        let answer = call.await.expect("no panic");
        assert!(
            answer.is_err() || answer.as_ref().is_ok_and(|r| r.status == 503),
            "{integration:?}: {answer:?}"
        );
    }
}

/// Through either integration: `guard_per_dependency(InFlightBudget::envoy)`
/// puts one budget on each dependency's calls; the server sees at most a
/// fifth of the fifty calls retrying at once (the `retry-attempt` header the
/// integrations send), and the budget's gauges report it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_integration_gives_each_dependency_its_own_in_flight_budget() {
    for integration in BOTH {
        let retries = Retries::default();
        let url = down_on(retries.clone(), "retry-attempt").await;
        let telemetry = Telemetry::install();
        let setup = Setup::new(four_attempts())
            .meter(&telemetry)
            .no_breaker()
            .no_budget()
            .guard_per_dependency(InFlightBudget::envoy);
        let client = Arc::new(integration.client(setup));
        fifty_through(integration, &client, &url).await;
        let peak = retries.peak.load(Ordering::SeqCst);
        println!(
            "{integration:?}: at most {peak} retries at the server at once ({} in all)",
            retries.total.load(Ordering::SeqCst)
        );
        assert!((3..=10).contains(&peak), "{integration:?}: {peak} retries at once");
        let dependency = url.trim_start_matches("http://").trim_end_matches("/inventory").to_owned();
        let gauge = |name| telemetry.gauge_f64(name, &[("retryscope.dependency", dependency.as_str())]);
        // All calls over: none in flight, and the limit back at its floor.
        assert_eq!(gauge("retryscope.budget.retries_in_flight"), Some(0.0), "{integration:?}");
        assert_eq!(gauge("retryscope.budget.retries_in_flight_limit"), Some(3.0), "{integration:?}");
    }
}

/// From a configuration file: `in_flight_budget = { share = 0.2, min = 3 }`
/// caps the retries of the dependency it names; a reload to
/// `enabled = false` lifts the cap for the next calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_files_in_flight_budget_caps_retries_until_a_reload_turns_it_off() {
    let file = |in_flight: &str| {
        format!(
            "[dependencies.inventory]\npath_prefix = \"/inventory\"\nattempts = 4\n\
             backoff = {{ initial = \"20ms\", max = \"20ms\" }}\njitter = \"none\"\nin_flight_budget = {in_flight}\n"
        )
    };
    for integration in BOTH {
        let known = KnownNames::new();
        let config = retryscope_config::Config::parse(
            &file("{ share = 0.2, min = 3 }"),
            Format::Toml,
            "f.toml",
            &known,
        )
        .expect("valid");
        assert!(config.table().contains("in_flight=20%/min=3"), "{}", config.table());
        let handle = ConfigHandle::builder(known).config(config).build().expect("a handle");
        let setup = Setup::new(four_attempts()).no_breaker().no_budget().config(handle.clone());
        let client = Arc::new(integration.client(setup));

        let capped = Retries::default();
        fifty_through(integration, &client, &down_on(capped.clone(), "retry-attempt").await).await;
        let peak = capped.peak.load(Ordering::SeqCst);
        assert!((3..=10).contains(&peak), "{integration:?}: {peak} retries at once under the file's budget");

        handle.reload_from_str(&file("{ enabled = false }"), Format::Toml).expect("a valid reload");
        let free = Retries::default();
        fifty_through(integration, &client, &down_on(free.clone(), "retry-attempt").await).await;
        let uncapped = free.peak.load(Ordering::SeqCst);
        println!("{integration:?}: file's in-flight budget: {peak} retries at once; turned off: {uncapped}");
        assert!(uncapped > 20, "{integration:?}: {uncapped} retries at once with the budget off");
    }
}

/// A service that never answers: each request is held until its caller
/// gives up on it (hyper drops the handler when the connection closes).
async fn silent(retries: Retries) -> String {
    /// Counts a retry out when its handler is dropped.
    struct Held(Retries);
    impl Drop for Held {
        fn drop(&mut self) {
            self.0.now.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let app = Router::new().route(
        "/inventory",
        get(move |headers: HeaderMap| {
            let retries = retries.clone();
            async move {
                let _held = headers.get("retry-attempt").is_some_and(|n| n != "1").then(|| {
                    let now = retries.now.fetch_add(1, Ordering::SeqCst) + 1;
                    retries.peak.fetch_max(now, Ordering::SeqCst);
                    retries.total.fetch_add(1, Ordering::SeqCst);
                    Held(retries.clone())
                });
                std::future::pending::<StatusCode>().await
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let url = format!("http://{}/inventory", listener.local_addr().expect("bound"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Where the budget meets the timeouts: a service that never answers, each
/// attempt cut at 100 ms, each call at 1 s. Every call ends by its deadline,
/// the retries the server holds at once stay within a fifth of the calls
/// (the floor, 3, or more), and when the calls are over the budget is empty
/// again — no retry admitted and then timed out is left counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_service_that_never_answers_the_budget_caps_retries_and_empties() {
    for integration in BOTH {
        let retries = Retries::default();
        let url = silent(retries.clone()).await;
        let telemetry = Telemetry::install();
        let policy = Policy::builder()
            .max_attempts(4)
            .base_delay(Duration::from_millis(20))
            .max_delay(Duration::from_millis(20))
            .jitter(Jitter::None)
            .attempt_timeout(Duration::from_millis(100))
            .deadline(Duration::from_secs(1))
            .build()
            .expect("valid policy");
        let setup = Setup::new(policy)
            .meter(&telemetry)
            .no_breaker()
            .no_budget()
            .guard_per_dependency(InFlightBudget::envoy);
        let client = Arc::new(integration.client(setup));
        let started = std::time::Instant::now();
        let calls: Vec<_> = (0..40)
            .map(|_| {
                let (client, url) = (Arc::clone(&client), url.clone());
                tokio::spawn(async move { client.send(Call::new(http::Method::GET, url)).await })
            })
            .collect();
        for call in calls {
            assert!(call.await.expect("no panic").is_err(), "{integration:?}: the service never answers");
        }
        let took = started.elapsed();
        let peak = retries.peak.load(Ordering::SeqCst);
        println!(
            "{integration:?}, never answering: {peak} retries held at once ({} in all), 40 calls over in {took:?}",
            retries.total.load(Ordering::SeqCst)
        );
        assert!(
            took < Duration::from_millis(1_500),
            "{integration:?}: calls outlived their 1 s deadline: {took:?}"
        );
        // Forty calls in progress allow eight retries out at once.
        assert!((3..=8).contains(&peak), "{integration:?}: {peak} retries at once");
        let dependency = url.trim_start_matches("http://").trim_end_matches("/inventory").to_owned();
        let gauge = |name| telemetry.gauge_f64(name, &[("retryscope.dependency", dependency.as_str())]);
        assert_eq!(gauge("retryscope.budget.retries_in_flight"), Some(0.0), "{integration:?}");
        assert_eq!(gauge("retryscope.budget.retries_in_flight_limit"), Some(3.0), "{integration:?}");
    }
}
