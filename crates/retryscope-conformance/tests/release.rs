//! The return after a hold, on the wall clock against a real loopback server,
//! for both integrations: calls held by a `Retry-After` come back at no more
//! than the rate they were offered at — before it, or during it for a client
//! whose first call was told to wait — ramping up to it, and every one of them
//! is still sent.
//!
//! The hold is 2 s, not the 5 s of the case it reproduces, to keep the test
//! short: the release depends on the offered rate, not on the hold's length
//! (`RETRYSCOPE_RELEASE_HOLD=5` runs the 5 s case).

use retryscope::{Pacer, Policy};
use retryscope_test_support::{Reply, Server};
use std::time::Duration;
use tokio::time::{Instant, MissedTickBehavior};

mod common;

use common::{Answer, BOTH, Client, Integration, Setup};

/// Calls offered per 100 ms, open loop: one every 12.5 ms.
const PER_WINDOW: usize = 8;
const WINDOW: Duration = Duration::from_millis(100);
/// How long the calls are offered before the 429 and after the gate opens.
const BEFORE: Duration = Duration::from_millis(1_000);
const AFTER: Duration = Duration::from_millis(1_000);
/// The cold client's callers: each starts a call every [`EVERY`], open loop,
/// the 20 a twentieth of it apart (8 calls per 100 ms in all).
const CALLERS: u32 = 20;
const EVERY: Duration = Duration::from_millis(250);

fn hold() -> u64 {
    std::env::var("RETRYSCOPE_RELEASE_HOLD").ok().and_then(|s| s.parse().ok()).unwrap_or(2)
}

/// What the server saw of one integration's calls: how many arrived in each
/// 100 ms window before the 429 and from the gate's opening on, and the most
/// in any 100 ms (sliding) after it.
#[derive(Debug)]
struct Release {
    integration: Integration,
    before: Vec<usize>,
    per_window: Vec<usize>,
    busiest: usize,
    during_hold: usize,
    answers: Vec<Answer>,
}

/// A client whose dependency's pacer holds its calls; every call may take 15 s.
fn client(integration: Integration) -> Client {
    let policy = Policy::builder().max_attempts(1).deadline(Duration::from_secs(15)).build().expect("policy");
    integration.client(Setup::new(policy).pacer_per_dependency(Pacer::new))
}

async fn offer(integration: Integration, hold: u64) -> Release {
    let server = Server::start().await;
    let offered_before = BEFORE.as_millis() as usize / 100 * PER_WINDOW;
    server.script(
        "/api",
        (0..offered_before).map(|_| Reply::status(200)).chain([Reply::with_header(
            429,
            "retry-after",
            hold.to_string(),
        )]),
    );
    let client = client(integration);
    let url = server.url("/api");
    let started = Instant::now();
    let mut ticks = tokio::time::interval(WINDOW / PER_WINDOW as u32);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut calls = Vec::new();
    let stop = BEFORE + Duration::from_secs(hold) + AFTER;
    while started.elapsed() < stop {
        ticks.tick().await;
        let (client, url) = (client.clone(), url.clone());
        calls.push(tokio::spawn(async move { client.get(&url).await }));
    }
    let mut answers = Vec::with_capacity(calls.len());
    for call in calls {
        answers.push(call.await.expect("caller task"));
    }
    measure(integration, &server, offered_before, hold, answers)
}

/// A cold client: its first call is told `429 Retry-After: hold`, while
/// [`CALLERS`] callers go on starting calls, open loop, through the hold and
/// for [`AFTER`] beyond it.
async fn offer_cold(integration: Integration, hold: u64) -> Release {
    let server = Server::start().await;
    server.script("/api", [Reply::with_header(429, "retry-after", hold.to_string())]);
    let client = client(integration);
    let url = server.url("/api");
    let stop = Instant::now() + Duration::from_secs(hold) + AFTER;
    let callers = (0..CALLERS).map(|n| {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(Instant::now() + EVERY * n / CALLERS, EVERY);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
            let mut calls = Vec::new();
            while ticks.tick().await < stop {
                let (client, url) = (client.clone(), url.clone());
                calls.push(tokio::spawn(async move { client.get(&url).await }));
            }
            calls
        })
    });
    let mut calls = Vec::new();
    for caller in callers.collect::<Vec<_>>() {
        calls.extend(caller.await.expect("caller task"));
    }
    let mut answers = Vec::with_capacity(calls.len());
    for call in calls {
        answers.push(call.await.expect("call task"));
    }
    measure(integration, &server, 0, hold, answers)
}

/// What the server saw, the 429 being its answer to request `told`.
fn measure(
    integration: Integration,
    server: &Server,
    told: usize,
    hold: u64,
    answers: Vec<Answer>,
) -> Release {
    let seen: Vec<Instant> = server.seen().iter().map(|s| s.at).collect();
    let told_at = seen[told];
    let open = told_at + Duration::from_secs(hold);
    // A few calls were on their way before the 429 reached the client.
    let during_hold =
        seen.iter().filter(|at| **at > told_at + Duration::from_millis(50) && **at < open).count();
    let after: Vec<Duration> = seen.iter().filter(|at| **at >= open).map(|at| *at - open).collect();
    let earlier: Vec<Duration> = seen[..told].iter().map(|at| *at - seen[0]).collect();
    let busiest =
        after.iter().map(|from| after.iter().filter(|at| **at >= *from && **at < *from + WINDOW).count());
    Release {
        integration,
        before: windows(&earlier),
        per_window: windows(&after),
        busiest: busiest.max().unwrap_or(0),
        during_hold,
        answers,
    }
}

/// How many of `arrivals` fall in each 100 ms window.
fn windows(arrivals: &[Duration]) -> Vec<usize> {
    let last = arrivals.iter().max().copied().unwrap_or_default();
    let mut per_window = vec![0; (last.as_millis() / WINDOW.as_millis()) as usize + 1];
    for at in arrivals {
        per_window[(at.as_millis() / WINDOW.as_millis()) as usize] += 1;
    }
    per_window
}

/// 8 calls per 100 ms for a second, then a 429 with `Retry-After`: the calls
/// held through it come back ramping up, never more than the 8 new calls of a
/// window and 8 held ones in a 100 ms window, and every call is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_calls_come_back_at_the_offered_rate_not_in_a_spike() {
    let hold = hold();
    let [reqwest, tower] = BOTH.map(|integration| tokio::spawn(offer(integration, hold)));
    for release in [reqwest.await.expect("reqwest's run"), tower.await.expect("tower's run")] {
        let Release { integration, before, per_window, busiest, during_hold, answers } = &release;
        eprintln!(
            "{integration:?}, {hold} s hold: per 100 ms before it {before:?}; after it {per_window:?}, \
             at most {busiest} in any 100 ms (sliding)"
        );
        assert_eq!(*during_hold, 0, "{integration:?}: sent through the hold");
        let told = answers.iter().filter(|a| **a == Answer::Status(429)).count();
        let served = answers.iter().filter(|a| **a == Answer::Status(200)).count();
        assert_eq!((told, served), (1, answers.len() - 1), "{integration:?}: {answers:?}");
        assert!(per_window.iter().all(|n| *n <= 2 * PER_WINDOW), "{integration:?}: a spike: {per_window:?}");
        // The ramp: the first 100 ms after the gate hold no more than the
        // new calls and a quarter of the rate.
        assert!(per_window[0] <= PER_WINDOW + PER_WINDOW / 4 + 1, "{integration:?}: {per_window:?}");
    }
}

/// A cold client — its first call is told `429 Retry-After` — while 20
/// callers each start a call every 250 ms: the calls held through the hold
/// come back at the rate they arrived during it, ramping up, never above
/// twice the 8 offered in a 100 ms window, and every call is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_clients_held_calls_come_back_at_the_rate_they_arrived_during_the_hold() {
    let hold = hold();
    let [reqwest, tower] = BOTH.map(|integration| tokio::spawn(offer_cold(integration, hold)));
    let releases = [reqwest.await.expect("reqwest's run"), tower.await.expect("tower's run")];
    // Both printed before either is judged: the counts are the measurement.
    for Release { integration, per_window, busiest, .. } in &releases {
        eprintln!(
            "{integration:?}, cold, {hold} s hold: per 100 ms after it {per_window:?}, \
             at most {busiest} in any 100 ms (sliding)"
        );
    }
    for release in &releases {
        let Release { integration, per_window, during_hold, answers, .. } = release;
        assert_eq!(*during_hold, 0, "{integration:?}: sent through the hold");
        let held = CALLERS as usize * hold as usize * 4;
        assert!(answers.len() > held, "{integration:?}: only {} calls", answers.len());
        let told = answers.iter().filter(|a| **a == Answer::Status(429)).count();
        let served = answers.iter().filter(|a| **a == Answer::Status(200)).count();
        assert_eq!((told, served), (1, answers.len() - 1), "{integration:?}: {answers:?}");
        assert!(per_window.iter().all(|n| *n <= 2 * PER_WINDOW), "{integration:?}: a spike: {per_window:?}");
        assert!(per_window[0] <= PER_WINDOW + PER_WINDOW / 4 + 1, "{integration:?}: {per_window:?}");
    }
}
