//! Retrying at one layer of a call chain (`.retry_at_one_layer()`), for both
//! integrations, inside a request served under `Upstream::scope` as a server
//! layer runs it, against a real HTTP server on 127.0.0.1 with tokio's paused
//! clock.

use retryscope::{Jitter, Policy};
use retryscope_otel::{IncomingAttempt, Upstream};
use retryscope_test_support::telemetry::Telemetry;
use retryscope_test_support::{Reply, Server};
use std::time::Duration;

mod common;

use common::{BOTH, Call, Client, Integration, Setup};

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(100))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid policy")
}

/// The client of a service in the middle of a chain, retrying at one layer.
fn one_layer_client(integration: Integration, t: &Telemetry) -> Client {
    integration.client(Setup::new(policy()).meter(t).retry_at_one_layer())
}

/// The request being served, as the server layer saw its `retry-attempt`.
fn upstream(attempt: &str) -> Upstream {
    let mut headers = http::HeaderMap::new();
    headers.insert("retry-attempt", attempt.parse().expect("header value"));
    Upstream::new(IncomingAttempt::from_headers(&headers))
}

#[tokio::test(start_paused = true)]
async fn at_one_layer_a_request_that_is_itself_a_retry_is_not_retried_downstream() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/down", [Reply::status(503), Reply::status(503), Reply::status(503)]);
        let client = one_layer_client(integration, &t);
        let response = upstream("2").scope(client.send(Call::get(server.url("/down")))).await;
        assert_eq!(
            response.expect("response").status,
            503,
            "{integration:?}: the downstream answer, as it came"
        );
        assert_eq!(server.seen().len(), 1, "{integration:?}: one attempt: the caller above retries");
        let throttled =
            t.counter("retryscope.throttled", &[("retryscope.throttle.reason", "upstream_retry")]);
        assert_eq!(throttled, 1, "{integration:?}");
        let calls = t.histogram_count("retryscope.request.duration", &[("retryscope.outcome", "throttled")]);
        assert_eq!(calls, 1, "{integration:?}");

        // The same request on a first attempt is retried as usual.
        server.script("/down", [Reply::status(503), Reply::ok("fine")]);
        let response = upstream("1").scope(client.send(Call::get(server.url("/down")))).await;
        assert_eq!(response.expect("response").status, 200, "{integration:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn at_one_layer_a_failure_already_retried_below_is_not_retried_and_exhaustion_is_passed_up() {
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        server.script("/below", [Reply::with_header(503, "retry-exhausted", "4")]);
        let client = one_layer_client(integration, &t);
        let served = upstream("1");
        let response = served.clone().scope(client.send(Call::get(server.url("/below")))).await;
        let status = response.expect("response").status;
        assert_eq!(
            (status, server.seen().len()),
            (503, 1),
            "{integration:?}: the layer below already retried"
        );
        let throttled =
            t.counter("retryscope.throttled", &[("retryscope.throttle.reason", "upstream_retry")]);
        assert_eq!(throttled, 1, "{integration:?}");
        let passed_on = served.exhausted_below();
        assert_eq!(
            passed_on,
            Some(4),
            "{integration:?}: passed on, so that no layer above retries it either"
        );

        // This layer retries and gives up: the request it serves learns it.
        let served = upstream("1");
        server.script("/flaky", [Reply::status(503), Reply::status(503), Reply::status(503)]);
        let response = served.clone().scope(client.send(Call::get(server.url("/flaky")))).await;
        let status = response.expect("response").status;
        assert_eq!((status, server.seen().len()), (503, 4), "{integration:?}");
        assert_eq!(served.exhausted_below(), Some(3), "{integration:?}");
    }
}
