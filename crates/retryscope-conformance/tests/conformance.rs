//! The behaviours retryscope-reqwest and retryscope-tower share, each specified
//! once and run against both, on tokio's paused clock.

use retryscope::{ErrorType, Policy, StopReason, Verdict};
use retryscope_test_support as support;
use retryscope_test_support::net::closed_port;
use retryscope_test_support::telemetry::{Telemetry, attr};
use retryscope_test_support::{Reply, Server};
use std::time::Duration;

mod common;

use common::{Answer, BOTH, Call, Integration, Setup};

fn policy() -> Policy {
    support::quick_policy()
}

/// A user's retry rule, as a plain function: both builders take the same one.
type Rule = fn(http::StatusCode, &http::HeaderMap) -> Option<Verdict>;

/// The error type the rules below name.
const MARKED: ErrorType = ErrorType::Kind("x_retry");

/// Retries whatever its server marked with `x-retry: please`.
fn retry_when_asked(_: http::StatusCode, headers: &http::HeaderMap) -> Option<Verdict> {
    headers.get("x-retry").is_some_and(|v| v == "please").then_some(Verdict::retryable(MARKED))
}

/// A 503 is permanent: the maintenance page, not an outage.
fn a_503_is_final(status: http::StatusCode, _: &http::HeaderMap) -> Option<Verdict> {
    (status == http::StatusCode::SERVICE_UNAVAILABLE).then_some(Verdict::permanent(ErrorType::Status(503)))
}

impl Integration {
    async fn send(self, telemetry: &Telemetry, method: http::Method, url: &str) -> Answer {
        self.client(Setup::new(policy()).meter(telemetry)).answer(Call::new(method, url)).await
    }

    /// Sends through a client with `rule` as its retry rule.
    async fn send_with(self, telemetry: &Telemetry, method: http::Method, url: &str, rule: Rule) -> Answer {
        self.client(Setup::new(policy()).meter(telemetry).retry_rule(rule))
            .answer(Call::new(method, url))
            .await
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_without_an_idempotency_key_is_not_retried() {
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let server = Server::start().await;
        server.script("/orders", [Reply::status(503), Reply::ok("must not be reached")]);
        let answer = integration.send(&telemetry, http::Method::POST, &server.url("/orders")).await;
        assert_eq!(answer, Answer::Status(503), "{integration:?}");
        assert_eq!(server.seen().len(), 1, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_503_is_retried() {
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let server = Server::start().await;
        server.script("/inventory", [Reply::status(503), Reply::ok("stock")]);
        let answer = integration.send(&telemetry, http::Method::GET, &server.url("/inventory")).await;
        assert_eq!(answer, Answer::Status(200), "{integration:?}");
        assert_eq!(server.seen().len(), 2, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured() {
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let server = Server::start().await;
        server.script("/slow", [Reply::with_header(503, "retry-after", "2"), Reply::ok("done")]);
        let started = tokio::time::Instant::now();
        let answer = integration.send(&telemetry, http::Method::GET, &server.url("/slow")).await;
        assert_eq!(answer, Answer::Status(200), "{integration:?}");
        assert!(started.elapsed() >= Duration::from_secs(2), "{integration:?}: {:?}", started.elapsed());
        // The hint replaced the computed delay: the server saw the retry 2 s after the first attempt.
        let seen = server.seen();
        assert_eq!(seen.len(), 2, "{integration:?}");
        assert!(
            seen[1].at - seen[0].at >= Duration::from_secs(2),
            "{integration:?}: {:?}",
            seen[1].at - seen[0].at
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_hint_longer_than_the_policy_allows_gives_up_naming_the_status() {
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let server = Server::start().await;
        server.script("/busy", [Reply::with_header(503, "retry-after", "86400"), Reply::ok("too late")]);
        let answer = integration.send(&telemetry, http::Method::GET, &server.url("/busy")).await;
        let Answer::GaveUp(reason, error_type) = answer else { panic!("{integration:?}: {answer:?}") };
        assert!(matches!(reason, StopReason::HintTooLong { .. }), "{integration:?}: {reason:?}");
        assert_eq!(error_type, Some(ErrorType::Status(503)), "{integration:?}");
        assert_eq!(server.seen().len(), 1, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_a_retryable_connect_failure_even_for_a_post() {
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let port = closed_port().await;
        let answer = integration
            .send(&telemetry, http::Method::POST, &format!("http://127.0.0.1:{port}/orders"))
            .await;
        assert_eq!(
            answer,
            Answer::GaveUp(StopReason::AttemptsExhausted, Some(ErrorType::CONNECT)),
            "{integration:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_attempt_span_carries_the_http_client_fields() {
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let server = Server::start().await;
        server.script("/items", [Reply::status(503), Reply::ok("items")]);
        let answer =
            integration.send(&telemetry, http::Method::GET, &server.url("/items?token=secret")).await;
        assert_eq!(answer, Answer::Status(200), "{integration:?}");
        let spans = telemetry.spans();
        let retry = spans
            .iter()
            .find(|span| attr(span, "http.request.resend_count").as_deref() == Some("1"))
            .unwrap_or_else(|| panic!("{integration:?}: no second attempt span"));
        assert_eq!(retry.name, "GET", "{integration:?}");
        assert_eq!(attr(retry, "http.request.method").as_deref(), Some("GET"), "{integration:?}");
        assert_eq!(attr(retry, "server.address").as_deref(), Some("127.0.0.1"), "{integration:?}");
        assert_eq!(attr(retry, "http.response.status_code").as_deref(), Some("200"), "{integration:?}");
        let url = attr(retry, "url.full").unwrap_or_default();
        assert!(url.ends_with("/items?token=REDACTED"), "{integration:?}: {url}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_rule_retries_a_200_its_server_marked_with_x_retry() {
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let server = Server::start().await;
        server.script("/report", [Reply::with_header(200, "x-retry", "please"), Reply::ok("the report")]);
        let answer = integration
            .send_with(&telemetry, http::Method::GET, &server.url("/report"), retry_when_asked)
            .await;
        assert_eq!(answer, Answer::Status(200), "{integration:?}");
        assert_eq!(server.seen().len(), 2, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_rule_that_makes_a_503_permanent_returns_it_after_one_attempt() {
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let server = Server::start().await;
        server.script("/maintenance", [Reply::status(503), Reply::ok("must not be reached")]);
        let url = server.url("/maintenance");
        let answer = integration.send_with(&telemetry, http::Method::GET, &url, a_503_is_final).await;
        assert_eq!(answer, Answer::Status(503), "{integration:?}");
        assert_eq!(server.seen().len(), 1, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_rule_cannot_make_a_post_run_again_after_it_was_sent() {
    for integration in BOTH {
        let telemetry = Telemetry::install();
        let server = Server::start().await;
        server.script("/orders", [Reply::with_header(200, "x-retry", "please"), Reply::ok("a second order")]);
        let url = server.url("/orders");
        let answer = integration.send_with(&telemetry, http::Method::POST, &url, retry_when_asked).await;
        assert_eq!(answer, Answer::Status(200), "{integration:?}: the first answer, as it came");
        assert_eq!(server.seen().len(), 1, "{integration:?}");
        server.assert_no_unsafe_request_ran_twice();
    }
}
