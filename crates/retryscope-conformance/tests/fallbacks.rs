//! Fallbacks (issue 35), for both integrations, against a real loopback
//! server on tokio's paused clock: a dependency's fallback answers the calls
//! that give up — attempts exhausted, the breaker open — and never a success
//! or an answer the server meant (a 404); its answer is marked; one that fails
//! reports both errors; each run is counted and leaves an event on the call's
//! span.

use bytes::Bytes;
use retryscope::{CircuitBreaker, Jitter, Policy, StopReason};
use retryscope_test_support::telemetry::Telemetry;
use retryscope_test_support::{Reply, Server};
use retryscope_tower::{FallbackContext, FallbackFuture, FallbackReason, LastAnswer};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::Instrument;

mod common;

use common::{Answer, BOTH, Call, Client, Integration, Response, Setup};
use retryscope_reqwest::prelude::*;

const COOL_DOWN: Duration = Duration::from_millis(300);

/// Two attempts 10 ms apart, within 2 s.
fn policy() -> Policy {
    Policy::builder()
        .max_attempts(2)
        .base_delay(Duration::from_millis(10))
        .jitter(Jitter::None)
        .deadline(Duration::from_secs(2))
        .build()
        .expect("valid policy")
}

/// Opens on the second failure of two calls, for `COOL_DOWN`.
fn quick_breaker() -> CircuitBreaker {
    CircuitBreaker::builder()
        .min_calls(2)
        .failure_ratio(0.5)
        .cool_down(COOL_DOWN)
        .build()
        .expect("valid breaker")
}

/// What a fallback saw of the calls it answered: reason, method, path, the
/// last status (0: none).
type Seen = Arc<Mutex<Vec<(FallbackReason, String, String, u16)>>>;

/// A fallback answering `200 stale` and noting what it was told.
fn stale(seen: Seen) -> impl Fn(&FallbackContext<'_>) -> FallbackFuture + Send + Sync + 'static {
    move |context: &FallbackContext<'_>| {
        let status = match context.last() {
            LastAnswer::Response { status, .. } => status.as_u16(),
            _ => 0,
        };
        let noted = (context.reason(), context.method().to_string(), context.uri().path().to_owned(), status);
        seen.lock().expect("not poisoned").push(noted);
        Box::pin(async { Ok(http::Response::new(Bytes::from_static(b"stale"))) })
    }
}

fn dependency(server: &Server) -> String {
    server.url("/").trim_start_matches("http://").trim_end_matches('/').to_owned()
}

/// Sends `call` inside a span of its own, the caller's, where the fallback's
/// event lands.
async fn send_in_span(client: &Client, call: Call) -> Result<Response, common::Failure> {
    client.send(call).instrument(tracing::info_span!("caller")).await
}

#[tokio::test(start_paused = true)]
async fn the_fallback_answers_while_the_breaker_is_open_and_not_otherwise() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        let seen = Seen::default();
        let dep = dependency(&server);
        let setup = Setup::new(policy())
            .meter(&t)
            .breaker_per_dependency(quick_breaker)
            .fallback("stale-cache", stale(Arc::clone(&seen)))
            .fallback_for(dep.clone(), "stale-cache");
        let client = integration.client(setup);
        let url = server.url("/inventory");

        // Healthy: the server's answers, never the fallback's.
        server.script("/inventory", (0..5).map(|_| Reply::ok("fresh")));
        for _ in 0..5 {
            let response = send_in_span(&client, Call::get(&url)).await.expect("an answer");
            assert_eq!((response.status, response.fallback.is_none()), (200, true), "{integration:?}");
            assert_eq!(response.text().await, "fresh", "{integration:?}");
        }
        // A permanent failure the server meant: the caller sees it as it came.
        server.script("/missing", [Reply::status(404)]);
        let missing = send_in_span(&client, Call::get(server.url("/missing"))).await.expect("the 404");
        assert_eq!((missing.status, missing.fallback.is_none()), (404, true), "{integration:?}");
        assert!(seen.lock().expect("not poisoned").is_empty(), "{integration:?}: the fallback ran");
        assert_eq!(t.counter("retryscope.fallbacks", &[]), 0, "{integration:?}");

        // Down: each call's two attempts fail, and the fallback answers for
        // it, until the failures open the breaker; then it answers for the
        // call the open breaker refuses without sending anything.
        server.script("/inventory", (0..40).map(|_| Reply::status(503)));
        let mut reasons = Vec::new();
        while reasons.last() != Some(&FallbackReason::GaveUp(StopReason::CircuitOpen)) && reasons.len() < 20 {
            let sent = server.seen().len();
            let answer = send_in_span(&client, Call::get(&url)).await.expect("the fallback's answer");
            let marked = answer.fallback.clone().expect("marked as a fallback");
            assert_eq!(marked.name(), "stale-cache", "{integration:?}");
            if marked.reason() == FallbackReason::GaveUp(StopReason::CircuitOpen) {
                assert_eq!(server.seen().len(), sent, "{integration:?}: the open breaker let a call through");
            }
            assert_eq!((answer.status, answer.text().await.as_str()), (200, "stale"), "{integration:?}");
            reasons.push(marked.reason());
        }
        let exhausted = reasons.len() - 1;
        assert!(exhausted >= 1, "{integration:?}: {reasons:?}");
        assert_eq!(
            reasons,
            [
                vec![FallbackReason::GaveUp(StopReason::AttemptsExhausted); exhausted],
                vec![FallbackReason::GaveUp(StopReason::CircuitOpen)]
            ]
            .concat(),
            "{integration:?}"
        );
        let told: Vec<_> = seen.lock().expect("not poisoned").clone();
        let mut expected = vec![
            (
                FallbackReason::GaveUp(StopReason::AttemptsExhausted),
                "GET".into(),
                "/inventory".into(),
                503
            );
            exhausted
        ];
        expected.push((
            FallbackReason::GaveUp(StopReason::CircuitOpen),
            "GET".into(),
            "/inventory".into(),
            0,
        ));
        assert_eq!(told, expected, "{integration:?}: what the fallback was told");

        // Recovered: after the cool-down the server answers again, unmarked.
        tokio::time::sleep(COOL_DOWN + Duration::from_millis(50)).await;
        server.script("/inventory", [Reply::ok("fresh")]);
        let back = send_in_span(&client, Call::get(&url)).await.expect("an answer");
        assert_eq!((back.status, back.fallback.is_none()), (200, true), "{integration:?}");

        // Telemetry: one count per run, by dependency and reason; an event
        // on the caller's span of each call it answered.
        let by = |reason: &str| {
            t.counter(
                "retryscope.fallbacks",
                &[("retryscope.dependency", dep.as_str()), ("retryscope.fallback.reason", reason)],
            )
        };
        let runs = u64::try_from(reasons.len()).expect("small");
        assert_eq!((by("attempts_exhausted"), by("circuit_open")), (runs - 1, 1), "{integration:?}");
        assert_eq!(t.counter("retryscope.fallbacks", &[]), runs, "{integration:?}");
        let events: Vec<(String, String)> = t
            .spans()
            .iter()
            .filter(|span| span.name == "caller")
            .flat_map(|span| span.events.iter())
            .filter(|event| event.name == "retryscope.fallback")
            .map(|event| {
                let get = |key: &str| {
                    event
                        .attributes
                        .iter()
                        .find(|kv| kv.key.as_str() == key)
                        .map(|kv| kv.value.to_string())
                        .unwrap_or_default()
                };
                (get("retryscope.fallback.reason"), get("retryscope.fallback.result"))
            })
            .collect();
        let mut expected = vec![("attempts_exhausted".to_owned(), "served".to_owned()); exhausted];
        expected.push(("circuit_open".into(), "served".into()));
        assert_eq!(events, expected, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_failing_fallback_reports_its_error_and_the_calls() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        let failing = |_: &FallbackContext<'_>| -> FallbackFuture {
            Box::pin(async { Err("the cache is empty".into()) })
        };
        let setup =
            Setup::new(policy()).meter(&t).fallback("stale-cache", failing).default_fallback("stale-cache");
        let client = integration.client(setup);
        server.script("/inventory", (0..2).map(|_| Reply::status(503)));
        let failure =
            send_in_span(&client, Call::get(server.url("/inventory"))).await.expect_err("both failed");
        assert_eq!(
            failure.fallback_failed,
            Some(FallbackReason::GaveUp(StopReason::AttemptsExhausted)),
            "{integration:?}: {:?}",
            failure.chain
        );
        assert_eq!(
            failure.chain[..2],
            [
                "the call gave up (attempts_exhausted) and its fallback `stale-cache` failed".to_owned(),
                "fallback: the cache is empty".to_owned(),
            ],
            "{integration:?}"
        );
        // Then the call's own failure: the give-up on its last 503.
        assert!(failure.chain.len() >= 3, "{integration:?}: {:?}", failure.chain);
        assert!(failure.chain[2].contains("503"), "{integration:?}: {:?}", failure.chain);
        let dep = dependency(&server);
        let counted = t.counter(
            "retryscope.fallbacks",
            &[("retryscope.dependency", dep.as_str()), ("retryscope.fallback.reason", "attempts_exhausted")],
        );
        assert_eq!(counted, 1, "{integration:?}");
        let results: Vec<String> = t
            .spans()
            .iter()
            .flat_map(|span| span.events.iter())
            .filter(|event| event.name == "retryscope.fallback")
            .filter_map(|event| {
                event.attributes.iter().find(|kv| kv.key.as_str() == "retryscope.fallback.result")
            })
            .map(|kv| kv.value.to_string())
            .collect();
        assert_eq!(results, ["failed"], "{integration:?}");
    }
}

/// A fallback that waits is cut at what is left of the call's deadline; both
/// errors reach the caller.
#[tokio::test(start_paused = true)]
async fn a_slow_fallback_is_cut_at_the_calls_deadline() {
    for integration in BOTH {
        let server = Server::start().await;
        let slow = |_: &FallbackContext<'_>| -> FallbackFuture {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(http::Response::new(Bytes::from_static(b"late")))
            })
        };
        let client = integration.client(Setup::new(policy()).fallback("slow", slow).default_fallback("slow"));
        server.script("/inventory", (0..2).map(|_| Reply::status(503)));
        let started = tokio::time::Instant::now();
        let failure = client.send(Call::get(server.url("/inventory"))).await.expect_err("cut");
        assert!(started.elapsed() <= Duration::from_secs(2), "{integration:?}: {:?}", started.elapsed());
        assert!(failure.fallback_failed.is_some(), "{integration:?}: {:?}", failure.chain);
        assert!(
            failure.chain[1].starts_with("fallback: the fallback did not answer within the call's remaining"),
            "{integration:?}: {:?}",
            failure.chain
        );
    }
}

/// With no deadline in the policy a fallback has 10 s (`NO_DEADLINE_LIMIT`,
/// the guide's "10 s when the policy has none"), at its edge: one that
/// answers after exactly 10 s is served, one that answers 1 ms later is cut
/// at 10 s; both errors reach the caller.
#[tokio::test(start_paused = true)]
async fn without_a_deadline_a_fallback_has_ten_seconds_and_not_a_millisecond_more() {
    use retryscope_tower::NO_DEADLINE_LIMIT;
    assert_eq!(NO_DEADLINE_LIMIT, Duration::from_secs(10), "the guide's figure");
    let no_deadline = policy().to_builder().no_deadline().build().expect("valid policy");
    assert_eq!(no_deadline.deadline(), None);
    for integration in BOTH {
        for (wait, served) in
            [(NO_DEADLINE_LIMIT, true), (NO_DEADLINE_LIMIT + Duration::from_millis(1), false)]
        {
            let server = Server::start().await;
            let answers_after = move |_: &FallbackContext<'_>| -> FallbackFuture {
                Box::pin(async move {
                    let started = tokio::time::Instant::now();
                    tokio::time::sleep(wait).await;
                    assert_eq!(started.elapsed(), wait, "the paused clock moves exactly");
                    Ok(http::Response::new(Bytes::from_static(b"late")))
                })
            };
            let setup = Setup::new(no_deadline).fallback("slow", answers_after).default_fallback("slow");
            let client = integration.client(setup);
            server.script("/inventory", (0..2).map(|_| Reply::status(503)));
            let started = tokio::time::Instant::now();
            let result = client.send(Call::get(server.url("/inventory"))).await;
            let elapsed = started.elapsed();
            // Two attempts 10 ms apart, then the fallback's 10 s at most.
            let limit = NO_DEADLINE_LIMIT + Duration::from_millis(100);
            assert!(
                elapsed >= NO_DEADLINE_LIMIT && elapsed <= limit,
                "{integration:?} {wait:?}: {elapsed:?}"
            );
            if served {
                let response = result.expect("answered within its 10 s");
                assert_eq!(response.text().await, "late", "{integration:?} {wait:?}");
            } else {
                let failure = result.expect_err("cut at 10 s");
                assert!(failure.fallback_failed.is_some(), "{integration:?} {wait:?}: {:?}", failure.chain);
                assert_eq!(
                    failure.chain[1], "fallback: the fallback did not answer within the call's remaining 10s",
                    "{integration:?} {wait:?}: {:?}",
                    failure.chain
                );
            }
        }
    }
}

/// A dependency's own fallback wins over the default; a dependency with
/// neither gets the failure as it came.
#[tokio::test(start_paused = true)]
async fn a_dependencys_own_fallback_wins_over_the_default() {
    for integration in BOTH {
        let (own, other) = (Server::start().await, Server::start().await);
        let answer = |body: &'static str| {
            move |_: &FallbackContext<'_>| -> FallbackFuture {
                Box::pin(async move { Ok(http::Response::new(Bytes::from_static(body.as_bytes()))) })
            }
        };
        let setup = Setup::new(policy())
            .fallback("own", answer("own"))
            .fallback("default", answer("default"))
            .fallback_for(dependency(&own), "own")
            .default_fallback("default");
        let client = integration.client(setup);
        for (server, expected) in [(&own, "own"), (&other, "default")] {
            server.script("/x", (0..2).map(|_| Reply::status(503)));
            let response = client.send(Call::get(server.url("/x"))).await.expect("a fallback's answer");
            assert_eq!(response.text().await, expected, "{integration:?}");
        }
        let without = integration.client(
            Setup::new(policy()).fallback("own", answer("own")).fallback_for(dependency(&own), "own"),
        );
        other.script("/x", (0..2).map(|_| Reply::status(503)));
        assert_eq!(without.get(&other.url("/x")).await, Answer::Status(503), "{integration:?}");
    }
}

/// A name never registered is refused when named, with the names known.
#[test]
fn an_unknown_fallback_name_is_refused() {
    let ok = |_: &FallbackContext<'_>| -> FallbackFuture {
        Box::pin(async { Ok(http::Response::new(Bytes::new())) })
    };
    for integration in BOTH {
        let error = match integration {
            Integration::Reqwest => {
                let builder =
                    retryscope_reqwest::RetryMiddleware::builder(policy()).fallback("stale-cache", ok);
                assert_eq!(builder.fallback_names().collect::<Vec<_>>(), ["stale-cache"]);
                builder.fallback_for("inventory", "stale").expect_err("unknown").to_string()
            }
            Integration::Tower => {
                let builder = retryscope_tower::RetryLayer::builder(policy()).fallback("stale-cache", ok);
                assert_eq!(builder.fallback_names().collect::<Vec<_>>(), ["stale-cache"]);
                let by_default = builder.default_fallback("stale").expect_err("unknown").to_string();
                assert_eq!(by_default, "no fallback named `stale` is registered (registered: stale-cache)");
                by_default
            }
        };
        assert_eq!(
            error, "no fallback named `stale` is registered (registered: stale-cache)",
            "{integration:?}"
        );
    }
}

/// "At most 256 dependencies have a fallback of their own"
/// (`MAX_FALLBACKS`), at its edge, in both builders: the 256th dependency is
/// given its fallback, and one of those 256 may be given another; a 257th
/// is refused, naming the bound.
#[test]
fn the_256th_dependency_gets_its_own_fallback_and_a_257th_is_refused() {
    use retryscope_reqwest::MAX_FALLBACKS;
    assert_eq!(MAX_FALLBACKS, 256, "the guide's figure");
    let ok = |_: &FallbackContext<'_>| -> FallbackFuture {
        Box::pin(async { Ok(http::Response::new(Bytes::new())) })
    };
    let refusal = "fallback `stale` refused: at most 256 dependencies may have a fallback of their own";
    let error =
        |result: Result<(), retryscope_reqwest::UnknownFallback>| result.expect_err("a 257th").to_string();
    let reqwest = (0..MAX_FALLBACKS).fold(
        retryscope_reqwest::RetryMiddleware::builder(policy()).fallback("stale", ok).fallback("empty", ok),
        |builder, n| builder.fallback_for(&format!("host-{n}"), "stale").expect("within the bound"),
    );
    let reqwest = reqwest.fallback_for("host-0", "empty").expect("a dependency that has one already");
    assert_eq!(error(reqwest.fallback_for("host-256", "stale").map(drop)), refusal);
    let tower = (0..MAX_FALLBACKS).fold(
        retryscope_tower::RetryLayer::builder(policy()).fallback("stale", ok).fallback("empty", ok),
        |builder, n| builder.fallback_for(&format!("host-{n}"), "stale").expect("within the bound"),
    );
    let tower = tower.fallback_for("host-255", "empty").expect("a dependency that has one already");
    assert_eq!(error(tower.fallback_for("host-256", "stale").map(drop)), refusal);
}

/// Where fallbacks meet hedging: a hedged GET whose three copies all fail
/// is answered by its fallback once — not once per copy — after the server
/// saw every copy; a hedged call whose copy gets an answer the server meant
/// (a 404) returns it as it came, with the other copy still stalled.
#[tokio::test(start_paused = true)]
async fn a_hedged_call_that_gives_up_runs_its_fallback_once() {
    use retryscope::hedge::{HedgeDelay, HedgePolicy};
    let hedged = || {
        HedgePolicy::builder()
            .max_copies(3)
            .delay(HedgeDelay::Fixed(Duration::from_millis(50)))
            .deadline(Duration::from_secs(2))
            .build()
            .expect("a valid hedging policy")
    };
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        let seen = Seen::default();
        let setup = Setup::new(policy())
            .meter(&t)
            .hedge(hedged())
            .fallback("stale-cache", stale(Arc::clone(&seen)))
            .default_fallback("stale-cache");
        let client = integration.client(setup);

        server.script("/inventory", (0..3).map(|_| Reply::status(503)));
        let answer = client.send(Call::get(server.url("/inventory"))).await.expect("the fallback's answer");
        let marked = answer.fallback.clone().expect("marked as a fallback");
        assert_eq!(marked.reason(), FallbackReason::GaveUp(StopReason::AttemptsExhausted), "{integration:?}");
        assert_eq!(answer.text().await, "stale", "{integration:?}");
        assert_eq!(server.seen().len(), 3, "{integration:?}: every copy was sent");
        assert_eq!(seen.lock().expect("not poisoned").len(), 1, "{integration:?}: one run for the call");
        assert_eq!(t.counter("retryscope.fallbacks", &[]), 1, "{integration:?}");

        // A copy's 404 is the server's answer: no fallback, the stalled copy dropped.
        server.script("/item", [Reply::stall(), Reply::status(404).into()]);
        let meant = client.send(Call::get(server.url("/item"))).await.expect("the 404");
        assert_eq!((meant.status, meant.fallback.is_none()), (404, true), "{integration:?}");
        assert_eq!(
            seen.lock().expect("not poisoned").len(),
            1,
            "{integration:?}: the fallback ran for a 404"
        );
    }
}

/// The operation's outcome says how the call ended for its caller: a call
/// the fallback answered is `fallback` — on `retryscope.request.duration`
/// (or `retryscope.refused` when the open breaker sent nothing) and on the
/// operation span, without status Error — while a call whose fallback failed
/// keeps the engine's `exhausted`, and a success stays `success`.
#[tokio::test(start_paused = true)]
async fn a_call_the_fallback_answered_has_the_outcome_fallback() {
    use retryscope_test_support::telemetry::attr;
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        let dep = dependency(&server);
        let setup = Setup::new(policy())
            .meter(&t)
            .operation_spans()
            .breaker_per_dependency(quick_breaker)
            .fallback("stale-cache", stale(Seen::default()))
            .fallback_for(dep.clone(), "stale-cache");
        let client = integration.client(setup);
        let url = server.url("/inventory");
        let duration_count = |outcome: &str| {
            t.histogram_count(
                "retryscope.request.duration",
                &[("retryscope.dependency", dep.as_str()), ("retryscope.outcome", outcome)],
            )
        };

        // Healthy first, so that the breaker opens only after whole calls gave up.
        server.script("/inventory", (0..5).map(|_| Reply::ok("fresh")));
        for _ in 0..5 {
            let fresh = send_in_span(&client, Call::get(&url)).await.expect("an answer");
            assert_eq!((fresh.status, fresh.fallback.is_none()), (200, true), "{integration:?}");
        }
        // Calls that give up, answered by the fallback, until their failures
        // open the breaker (its refusal of a retry ends a call too); then a
        // call it refuses before sending anything, answered too.
        server.script("/inventory", (0..40).map(|_| Reply::status(503)));
        let (mut sent_calls, mut refused_calls) = (0u64, 0u64);
        while refused_calls == 0 && sent_calls < 20 {
            let before = server.seen().len();
            let answer = send_in_span(&client, Call::get(&url)).await.expect("the fallback's answer");
            assert!(answer.fallback.is_some(), "{integration:?}: marked as a fallback");
            match server.seen().len() == before {
                true => refused_calls += 1,
                false => sent_calls += 1,
            }
        }
        assert!(sent_calls >= 1 && refused_calls == 1, "{integration:?}: {sent_calls} {refused_calls}");
        assert_eq!(
            (duration_count("success"), duration_count("fallback"), duration_count("exhausted")),
            (5, sent_calls, 0),
            "{integration:?}: every call that gave up was answered by the fallback"
        );
        let refused_as = |outcome: &str| {
            t.counter(
                "retryscope.refused",
                &[("retryscope.dependency", dep.as_str()), ("retryscope.outcome", outcome)],
            )
        };
        assert_eq!((refused_as("fallback"), refused_as("throttled")), (1, 0), "{integration:?}");
        // The engine's refusals are still counted as such (that call's, and any refused retry).
        assert!(t.counter("retryscope.throttled", &[("retryscope.throttle.reason", "circuit_open")]) >= 1);

        // The operation spans: the call's outcome, no status Error for a fallback's answer.
        let operations: Vec<(String, bool)> = t
            .spans()
            .iter()
            // The operation spans (the callers' spans are INTERNAL too, without the attribute).
            .filter(|s| {
                s.span_kind == opentelemetry::trace::SpanKind::Internal
                    && attr(s, "retryscope.dependency").is_some()
            })
            .map(|s| {
                let error = matches!(s.status, opentelemetry::trace::Status::Error { .. });
                (attr(s, "retryscope.outcome").unwrap_or_default(), error)
            })
            .collect();
        let mut expected = vec![("success".to_owned(), false); 5];
        let answered = usize::try_from(sent_calls + refused_calls).expect("small");
        expected.extend(std::iter::repeat_n(("fallback".to_owned(), false), answered));
        assert_eq!(operations, expected, "{integration:?}: the operation spans' outcomes");
    }

    // A failing fallback: the caller gets both errors, the outcome stays the engine's.
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        let dep = dependency(&server);
        let failing = |_: &FallbackContext<'_>| -> FallbackFuture {
            Box::pin(async { Err("the cache is empty".into()) })
        };
        let setup = Setup::new(policy()).meter(&t).fallback("empty", failing).default_fallback("empty");
        let client = integration.client(setup);
        server.script("/inventory", (0..2).map(|_| Reply::status(503)));
        let failed = send_in_span(&client, Call::get(server.url("/inventory"))).await;
        assert!(failed.is_err(), "{integration:?}");
        let count = |outcome: &str| {
            t.histogram_count(
                "retryscope.request.duration",
                &[("retryscope.dependency", dep.as_str()), ("retryscope.outcome", outcome)],
            )
        };
        assert_eq!((count("exhausted"), count("fallback")), (1, 0), "{integration:?}");
    }
}
