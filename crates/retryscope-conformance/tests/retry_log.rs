//! The retry log's `request_id`, for both integrations, against a real
//! loopback server answering 503 then 200: read from the request's
//! `x-request-id` (or the header the builder names), bounded.

use http::HeaderName;
use retryscope_otel::names;
use retryscope_test_support::telemetry::Telemetry;
use retryscope_test_support::{Reply, Server, quick_policy};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt as _};

mod common;

use common::{Answer, BOTH, Call, Integration, Setup};

/// The fields of every retry-log event, as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<BTreeMap<String, String>>>>);

impl Capture {
    /// The `request_id` of each `message` event, in order.
    fn request_ids(&self, message: &str) -> Vec<Option<String>> {
        let events = self.0.lock().map(|events| events.clone()).unwrap_or_default();
        events
            .into_iter()
            .filter(|fields| fields.get("message").map(String::as_str) == Some(message))
            .map(|fields| fields.get("request_id").cloned())
            .collect()
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == names::TARGET {
            let mut fields = BTreeMap::new();
            event.record(&mut Fields(&mut fields));
            if let Ok(mut events) = self.0.lock() {
                events.push(fields);
            }
        }
    }
}

/// Sends `call` (to `/orders`, which answers 503 then 200) through a client
/// of `integration` built from `setup` with telemetry on; returns the
/// `request_id` of the one retry's `retryscope.backoff` line.
async fn logged_request_id(
    integration: Integration,
    setup: Setup,
    call: impl FnOnce(&str) -> Call,
) -> Option<String> {
    let server = Server::start().await;
    server.script("/orders", [Reply::status(503), Reply::ok("done")]);
    let telemetry = Telemetry::install();
    let log = Capture::default();
    let _guard =
        retryscope_test_support::telemetry::set_default(tracing_subscriber::registry().with(log.clone()));
    let client = integration.client(setup.meter(&telemetry));
    let answer = client.answer(call(&server.url("/orders"))).await;
    assert_eq!(answer, Answer::Status(200), "{integration:?}");
    let ids = log.request_ids(names::BACKOFF_EVENT);
    assert_eq!(ids.len(), 1, "{integration:?}: one retry, one line: {ids:?}");
    ids.into_iter().next().flatten()
}

#[tokio::test]
async fn a_request_carrying_x_request_id_is_logged_with_it() {
    for integration in BOTH {
        let id = logged_request_id(integration, Setup::new(quick_policy()), |url| {
            Call::get(url).header("x-request-id", "req-5d1f0c")
        })
        .await;
        assert_eq!(id.as_deref(), Some("req-5d1f0c"), "{integration:?}");
    }
}

/// A client built with `no_telemetry()` keeps the retry log, and the log the
/// request's id.
#[tokio::test]
async fn with_telemetry_off_the_log_alone_still_has_the_request_id() {
    for integration in BOTH {
        let server = Server::start().await;
        server.script("/orders", [Reply::status(503), Reply::ok("done")]);
        let log = Capture::default();
        let _guard =
            retryscope_test_support::telemetry::set_default(tracing_subscriber::registry().with(log.clone()));
        let client = integration.client(Setup::new(quick_policy()));
        let call = Call::get(server.url("/orders")).header("x-request-id", "req-no-telemetry");
        assert_eq!(client.answer(call).await, Answer::Status(200), "{integration:?}");
        let ids = log.request_ids(names::BACKOFF_EVENT);
        assert_eq!(ids, [Some("req-no-telemetry".to_owned())], "{integration:?}");
    }
}

#[tokio::test]
async fn a_request_without_one_is_logged_without_a_request_id() {
    for integration in BOTH {
        let id = logged_request_id(integration, Setup::new(quick_policy()), |url| Call::get(url)).await;
        assert_eq!(id, None, "{integration:?}");
    }
}

#[tokio::test]
async fn the_builder_names_the_header_the_id_is_read_from() {
    for integration in BOTH {
        let setup = Setup::new(quick_policy()).request_id_header(HeaderName::from_static("x-correlation-id"));
        let id = logged_request_id(integration, setup, |url| {
            Call::get(url).header("x-request-id", "not-this-one").header("x-correlation-id", "corr-77")
        })
        .await;
        assert_eq!(id.as_deref(), Some("corr-77"), "{integration:?}");
    }
}

#[tokio::test]
async fn an_id_longer_than_128_bytes_is_not_logged_and_the_call_goes_through() {
    for integration in BOTH {
        let long = "r".repeat(names::MAX_REQUEST_ID_LEN + 1);
        let id = logged_request_id(integration, Setup::new(quick_policy()), |url| {
            Call::get(url).header("x-request-id", &long)
        })
        .await;
        assert_eq!(id, None, "{integration:?}");
        let longest = "r".repeat(names::MAX_REQUEST_ID_LEN);
        let id = logged_request_id(integration, Setup::new(quick_policy()), |url| {
            Call::get(url).header("x-request-id", &longest)
        })
        .await;
        assert_eq!(id.as_deref(), Some(longest.as_str()), "{integration:?}");
    }
}
