//! Fault injection below the retries (`FaultMiddleware`, `FaultLayer`), for
//! both integrations, against a real HTTP server on 127.0.0.1 with tokio's
//! paused clock: injected failures are retried, guarded and reported as real
//! ones, a seed reproduces its faults, and nothing is injected while off.

use retryscope::{ErrorType, Jitter, Policy, StopReason};
use retryscope_test_support::telemetry::{Telemetry, attr};
use retryscope_test_support::{Reply, Server};
use retryscope_tower::fault::{FAULT_KIND_HEADER, FaultKind, FaultSpec, Faults};

use std::time::Duration;

mod common;

use common::{Answer, BOTH, Call, Setup};

fn policy(attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .base_delay(Duration::from_millis(100))
        .jitter(Jitter::None)
        .attempt_timeout(Duration::from_secs(2))
        .no_deadline()
        .build()
        .expect("valid policy")
}

fn faults(spec: &str, seed: u64) -> Faults {
    let spec: FaultSpec = spec.parse().expect("a valid spec");
    Faults::builder().spec(spec).seed(seed).no_metrics().enabled().build()
}

/// A seed whose first draw for a lone rule at 50 % injects and whose second
/// does not: the first attempt fails, its retry goes through.
fn fail_once_seed(kind: &str) -> u64 {
    (0..)
        .find(|&seed| {
            let probe = faults(&format!("{kind}@50"), seed);
            let target = retryscope_http::fault::Target::new("x", "/");
            probe.decide(&target).is_some() && probe.decide(&target).is_none()
        })
        .expect("some seed")
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_injects_the_same_faults_into_the_same_calls() {
    for integration in BOTH {
        let server = Server::start().await;
        let mut runs = Vec::new();
        for _ in 0..2 {
            server.script("/items", std::iter::repeat_with(|| Reply::ok("fine")).take(40));
            let client = integration.client(Setup::new(policy(1)).faults(faults("503@30,reset@20", 9)));
            let mut answers = Vec::new();
            for _ in 0..40 {
                answers.push(client.get(&server.url("/items")).await);
            }
            runs.push(answers);
        }
        assert_eq!(runs[0], runs[1], "{integration:?}");
        assert!(
            runs[0].contains(&Answer::Status(503)) && runs[0].contains(&Answer::Status(200)),
            "{integration:?}"
        );
        assert!(
            runs[0].iter().any(|a| matches!(a, Answer::GaveUp(_, Some(ErrorType::RESET)))),
            "{integration:?}: {:?}",
            runs[0]
        );
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_is_injected_while_disabled_or_when_only_a_header_asks() {
    assert_eq!(FAULT_KIND_HEADER, "x-retryscope-fault-kind", "the header the calls send");
    for integration in BOTH {
        let server = Server::start().await;
        let off =
            Faults::builder().spec("503@100".parse().expect("spec")).header_control().no_metrics().build();
        let uncontrolled = Faults::builder().no_metrics().enabled().build();
        for faults in [off, uncontrolled] {
            server.script("/items", [Reply::ok("fine"), Reply::ok("fine")]);
            let client = integration.client(Setup::new(policy(1)).faults(faults));
            let call = Call::get(server.url("/items")).header("x-retryscope-fault-kind", "503");
            assert_eq!(client.answer(call).await, Answer::Status(200), "{integration:?}");
        }
        assert_eq!(server.seen().len(), 2, "{integration:?}: every call reached the server");

        // Under header control and enabled, the header is obeyed.
        let controlled = Faults::builder().header_control().no_metrics().enabled().build();
        let client = integration.client(Setup::new(policy(1)).faults(controlled));
        let call = Call::get(server.url("/items")).header("x-retryscope-fault-kind", "503");
        assert_eq!(client.answer(call).await, Answer::Status(503), "{integration:?}");
        assert_eq!(server.seen().len(), 2, "{integration:?}: answered by the fault");
    }
}

#[tokio::test(start_paused = true)]
async fn a_live_switch_takes_effect_within_a_second() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/items", std::iter::repeat_with(|| Reply::ok("fine")).take(40));
        let faults = faults("503@100", 0);
        faults.disable();
        let client = integration.client(Setup::new(policy(1)).faults(faults.clone()));
        let switch = faults.clone();
        let flipped = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1_050)).await;
            switch.enable();
            tokio::time::Instant::now()
        });
        let start = tokio::time::Instant::now();
        let mut first_injected = None;
        while first_injected.is_none() && start.elapsed() < Duration::from_secs(4) {
            if client.get(&server.url("/items")).await == Answer::Status(503) {
                first_injected = Some(tokio::time::Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let flipped = flipped.await.expect("the switch task");
        let first = first_injected.expect("injected once enabled");
        assert!(
            first >= flipped && first - flipped <= Duration::from_secs(1),
            "{integration:?}: {:?}",
            first - flipped
        );
        faults.disable();
        assert_eq!(
            client.get(&server.url("/items")).await,
            Answer::Status(200),
            "{integration:?}: off at once"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_stall_is_cut_by_the_attempt_timeout_and_retried() {
    let seed = fail_once_seed("stall");
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/items", [Reply::ok("fine")]);
        let client = integration.client(Setup::new(policy(3)).faults(faults("stall@50", seed)));
        let start = tokio::time::Instant::now();
        assert_eq!(client.get(&server.url("/items")).await, Answer::Status(200), "{integration:?}");
        // The attempt timeout (2 s) and one backoff (100 ms).
        assert_eq!(start.elapsed(), Duration::from_millis(2_100), "{integration:?}");
        assert_eq!(server.seen().len(), 1, "{integration:?}: the stalled attempt never left");
    }
}

#[tokio::test(start_paused = true)]
async fn an_injected_refusal_and_reset_are_judged_as_real_ones() {
    for integration in BOTH {
        let server = Server::start().await;
        // A refusal sent nothing: even a POST is retried, as a real one is.
        let client = integration.client(Setup::new(policy(3)).faults(faults("refused@100", 0)));
        let answer = client.answer(Call::post(server.url("/orders"))).await;
        assert_eq!(
            answer,
            Answer::GaveUp(StopReason::AttemptsExhausted, Some(ErrorType::CONNECT)),
            "{integration:?}"
        );
        // A reset may have reached the server: a POST is not retried, and
        // its error comes back as it came.
        let client = integration.client(Setup::new(policy(3)).faults(faults("reset@100", 0)));
        let failure = client.send(Call::post(server.url("/orders"))).await.expect_err("a reset");
        assert!(failure.stopped.is_none(), "{integration:?}: {failure:?}");
        assert!(
            failure.chain.iter().any(|e| e.contains("injected fault (reset)")),
            "{integration:?}: {failure:?}"
        );
        let answer = client.get(&server.url("/orders")).await;
        assert_eq!(
            answer,
            Answer::GaveUp(StopReason::AttemptsExhausted, Some(ErrorType::RESET)),
            "{integration:?}"
        );
        assert!(server.seen().is_empty(), "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_injected_retry_after_is_honoured_and_latency_delays_the_real_answer() {
    let seed = fail_once_seed("429+retry-after=3");
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/items", [Reply::ok("fine"), Reply::ok("fine")]);
        let client = integration.client(Setup::new(policy(3)).faults(faults("429+retry-after=3@50", seed)));
        let start = tokio::time::Instant::now();
        assert_eq!(client.get(&server.url("/items")).await, Answer::Status(200), "{integration:?}");
        // The hint, not the policy's 100 ms (the pacer spreads the calls it
        // releases at the end of a `Retry-After` over up to a second or so).
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(3) && waited < Duration::from_secs(5),
            "{integration:?}: {waited:?}"
        );

        let client = integration.client(Setup::new(policy(1)).faults(faults("latency=300ms@100", 0)));
        let start = tokio::time::Instant::now();
        assert_eq!(client.get(&server.url("/items")).await, Answer::Status(200), "{integration:?}");
        assert_eq!(start.elapsed(), Duration::from_millis(300), "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_broken_body_fails_its_read_and_a_slow_body_arrives_whole_and_late() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/items", [Reply::ok("fine"), Reply::ok("fine")]);
        let client = integration.client(Setup::new(policy(1)).faults(faults("broken-body@100", 0)));
        let response = client.send(Call::get(server.url("/items"))).await.expect("the real head");
        assert_eq!(response.status, 200, "{integration:?}");
        let chain = response.read().await.expect_err("the body fails");
        assert!(
            chain.iter().any(|e| e.contains("injected fault (broken-body)")),
            "{integration:?}: {chain:?}"
        );

        let client = integration.client(Setup::new(policy(1)).faults(faults("slow-body=400ms@100", 0)));
        let start = tokio::time::Instant::now();
        let response = client.send(Call::get(server.url("/items"))).await.expect("the real head");
        assert_eq!(response.text().await, "fine", "{integration:?}");
        assert!(start.elapsed() >= Duration::from_millis(400), "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn injected_faults_appear_in_spans_and_metrics_exactly_as_often_as_injected() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/items", std::iter::repeat_with(|| Reply::ok("fine")).take(200));
        let spec: FaultSpec = "503@40".parse().expect("spec");
        let faults = Faults::builder().spec(spec).seed(3).meter(t.meter.clone()).enabled().build();
        let client = integration.client(Setup::new(policy(3)).meter(&t).faults(faults));
        for _ in 0..30 {
            let _ = client.get(&server.url("/items")).await;
        }
        let spans = t.spans();
        let attempts: Vec<_> = spans.iter().filter(|s| attr(s, "retryscope.attempt").is_some()).collect();
        let marked = attempts
            .iter()
            .filter(|s| attr(s, "retryscope.fault.injected").as_deref() == Some(FaultKind::STATUS))
            .count();
        // Every attempt either reached the server or was answered by a fault.
        let injected = attempts.len() - server.seen().len();
        assert!(injected > 0, "{integration:?}");
        assert_eq!(marked, injected, "{integration:?}: spans");
        let counted = t.counter("retryscope.faults.injected", &[("retryscope.fault.kind", "status")]);
        assert_eq!(counted, u64::try_from(injected).expect("small"), "{integration:?}: metrics");
        let dependency = server.url("/").trim_start_matches("http://").trim_end_matches('/').to_owned();
        let by_dependency =
            t.counter("retryscope.faults.injected", &[("retryscope.dependency", dependency.as_str())]);
        assert_eq!(by_dependency, counted, "{integration:?}");
    }
}
