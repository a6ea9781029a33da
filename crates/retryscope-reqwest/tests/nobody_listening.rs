//! A middleware built while no meter provider is installed skips its
//! telemetry on every call that no `tracing` subscriber could hear, and takes
//! it up with the first call after one is set. Its own process: nothing here
//! installs a provider or a global subscriber.

use retryscope_reqwest::RetryMiddleware;
use retryscope_test_support::http_server::HttpServer;
use retryscope_test_support::quick_policy as policy;
use std::sync::{Arc, Mutex};
use tracing::span::{Attributes, Id};
use tracing_subscriber::Registry;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The names of the spans opened while it is the subscriber's layer.
#[derive(Clone, Default)]
struct SpanNames(Arc<Mutex<Vec<&'static str>>>);

impl<S: tracing::Subscriber> Layer<S> for SpanNames {
    fn on_new_span(&self, attributes: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        if let Ok(mut names) = self.0.lock() {
            names.push(attributes.metadata().name());
        }
    }
}

impl SpanNames {
    /// The HTTP attempt spans (`tracing` name `HTTP`).
    fn attempts(&self) -> usize {
        self.0.lock().map(|names| names.iter().filter(|n| **n == "HTTP").count()).unwrap_or(0)
    }
}

#[tokio::test]
async fn telemetry_nobody_hears_is_skipped_and_the_first_call_after_a_subscriber_is_set_has_its_spans() {
    assert!(!tracing::dispatcher::has_been_set(), "this test's process sets no subscriber before it");
    let server = HttpServer::start(&[503, 503]).await;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(policy()))
        .build();

    // Nobody listening: the call is retried as ever, its telemetry skipped.
    let answer = client.get(server.url("/a")).send().await.expect("answered");
    assert_eq!(answer.status(), 200);
    assert_eq!(server.seen().len(), 3, "two 503s retried, then the 200");

    // A subscriber set after the middleware was built hears the next call:
    // one attempt span for its one attempt.
    let names = SpanNames::default();
    let _subscriber = tracing::subscriber::set_default(Registry::default().with(names.clone()));
    let answer = client.get(server.url("/b")).send().await.expect("answered");
    assert_eq!(answer.status(), 200);
    assert_eq!(names.attempts(), 1, "{:?}", names.0.lock().map(|n| n.clone()));
}
