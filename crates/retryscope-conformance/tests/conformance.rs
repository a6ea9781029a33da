//! A GET with retries, for both integrations, on tokio's paused clock: a 503
//! retried, a Retry-After honoured or too long to wait, and the HTTP client
//! fields of an attempt span. The other shared behaviours have files of their
//! own (`middleware.rs`, `body_rules.rs`, `idempotency_keys.rs`, `hedging.rs`,
//! `one_layer.rs`, `pacing.rs`).

use retryscope::{ErrorType, Policy, StopReason};
use retryscope_test_support as support;
use retryscope_test_support::telemetry::{Telemetry, attr};
use retryscope_test_support::{Reply, Server};
use std::time::Duration;

mod common;

use common::{Answer, BOTH, Call, Integration, Setup};

fn policy() -> Policy {
    support::quick_policy()
}

impl Integration {
    async fn send(self, telemetry: &Telemetry, method: http::Method, url: &str) -> Answer {
        self.client(Setup::new(policy()).meter(telemetry)).answer(Call::new(method, url)).await
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
