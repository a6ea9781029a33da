//! A live chain of three services on loopback — the top calls the middle, the
//! middle calls the bottom, each through the storm's own retry middleware — with
//! the bottom always down. What every service counted of the retries it
//! received, read from the service itself and from its
//! `retryscope.server.requests` through an in-process metric reader.
//!
//! Real sockets, so real time (a paused clock would fire the attempt timeouts
//! while the sockets work); every assertion is on counts, which do not depend
//! on timing: the bottom answers 503 to every call, so each retrying service
//! makes exactly its 4 attempts.

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use retryscope_lab::storm::chain::{Caller, Chain};
use retryscope_lab::storm::layers::LayerPolicy;
use retryscope_lab::storm::metrics::{InProcessReader, IncomingTotals};
use retryscope_lab::storm::server::{Behaviour, Model};
use retryscope_otel::{EXHAUSTED_HEADER, IncomingRequests};
use retryscope_reqwest::prelude::*;
use std::time::Duration;

/// User requests sent into the chain, concurrently.
const USER_REQUESTS: u64 = 5;
/// Attempts every retrying service makes.
const ATTEMPTS: u64 = 4;

/// A chain of three services whose bottom answers 503 to everything, and the
/// telemetry its services record.
struct Lab {
    chain: Chain,
    provider: SdkMeterProvider,
    reader: InProcessReader,
}

impl Lab {
    async fn start(policy: LayerPolicy) -> Lab {
        Self::with_services(policy, 3).await
    }

    async fn with_services(policy: LayerPolicy, services: usize) -> Lab {
        // Collected when flushed: the test reads the metrics once, at the end.
        let (periodic, reader) = InProcessReader::new(Duration::from_secs(3_600));
        let provider = SdkMeterProvider::builder().with_reader(periodic).build();
        let meter = provider.meter("chain-test");
        let always_down = Behaviour {
            capacity: 1_000,
            outage_start: Duration::ZERO,
            outage_len: Duration::from_secs(3_600),
            model: Model::Shed,
        };
        // Five minutes of 100 ms slices: past them the bottom would answer 200,
        // and the counts below would fail loudly rather than hang.
        let slices = 3_000;
        let incoming = IncomingRequests::from_meter(&meter);
        let chain = Chain::start(services, always_down, slices, &incoming, |k| {
            let middleware = policy.middleware().expect("the storm's policy builds").meter(&meter).build();
            let client = reqwest_middleware::ClientBuilder::new(plain_client()).with(middleware).build();
            Ok(Caller { client, operation: format!("test/service-{k}").into() })
        })
        .await
        .expect("the chain starts");
        Lab { chain, provider, reader }
    }

    /// Sends the user requests (users do not retry) and returns their statuses.
    async fn send_user_requests(&self) -> Vec<u16> {
        let mut users = tokio::task::JoinSet::new();
        for _ in 0..USER_REQUESTS {
            let url = self.chain.url();
            users.spawn(async move { plain_client().get(url).send().await.map(|r| r.status().as_u16()) });
        }
        let mut statuses = Vec::new();
        while let Some(joined) = users.join_next().await {
            statuses.push(joined.expect("user task").expect("the top answers"));
        }
        statuses
    }

    /// `retryscope.server.requests` of service `k`, as the metric reader sees it.
    fn incoming(&self, k: usize) -> IncomingTotals {
        self.provider.force_flush().expect("metrics collected");
        self.reader.incoming(&format!("/service-{k}"))
    }
}

fn plain_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().expect("a reqwest client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_at_every_layer_multiply_and_every_service_sees_which_attempt_it_gets() {
    let lab = Lab::start(LayerPolicy::PerLayer).await;
    let statuses = lab.send_user_requests().await;
    assert_eq!(statuses, vec![503; USER_REQUESTS as usize], "the bottom is down, and the users hear it");

    // The bottom's own reading of `retry-attempt`: attempts 1 to 4 from the
    // middle, once per attempt the top made of the middle.
    let bottom = &lab.chain.services[2].attempts;
    for number in 1..=4 {
        assert_eq!(bottom.count(number), ATTEMPTS * USER_REQUESTS, "attempt {number} at the bottom");
    }
    assert_eq!(bottom.highest(), Some(4));
    assert_eq!(bottom.unknown(), 0);
    assert_eq!(bottom.total(), ATTEMPTS * ATTEMPTS * USER_REQUESTS, "4 x 4 calls per user request");

    // The middle's `retryscope.server.requests` counts the top's retries.
    let middle = lab.incoming(2);
    for bucket in ["1", "2", "3", "4+"] {
        assert_eq!(middle.attempt(bucket), USER_REQUESTS, "bucket {bucket} at the middle: {middle:?}");
    }
    assert_eq!(middle.retries(), 3 * USER_REQUESTS);
    assert_eq!(middle.attempt("unknown"), 0);
    // The top receives only first attempts: the users do not retry.
    assert_eq!(lab.incoming(1).by_attempt, [("1".to_owned(), USER_REQUESTS)].into());
    // The metric agrees with the bottom's own count.
    assert_eq!(lab.incoming(3).attempt("4+"), ATTEMPTS * USER_REQUESTS);
    assert_eq!(lab.incoming(3).total(), bottom.total());
    // The clients' own telemetry: the top retried each user request 3 times.
    assert_eq!(lab.reader.totals("test/service-1").retries, 3 * USER_REQUESTS);
    assert_eq!(lab.reader.totals("test/service-2").retries, 3 * ATTEMPTS * USER_REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_at_one_layer_sends_at_most_four_attempts_per_user_request_to_the_bottom() {
    let lab = Lab::start(LayerPolicy::OneLayer).await;
    let statuses = lab.send_user_requests().await;
    assert_eq!(statuses, vec![503; USER_REQUESTS as usize]);

    let bottom = &lab.chain.services[2].attempts;
    for number in 1..=4 {
        assert_eq!(bottom.count(number), USER_REQUESTS, "attempt {number} at the bottom");
    }
    assert_eq!(bottom.highest(), Some(4), "never a fifth attempt");
    assert_eq!(bottom.total(), ATTEMPTS * USER_REQUESTS, "4 calls per user request, not 16");
    // The middle retried and answered `retry-exhausted`; the top did not retry that.
    assert_eq!(lab.incoming(2).by_attempt, [("1".to_owned(), USER_REQUESTS)].into());
    assert_eq!(lab.reader.totals("test/service-1").retries, 0);
    assert_eq!(lab.reader.totals("test/service-2").retries, 3 * USER_REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_whose_calls_below_gave_up_says_how_many_attempts_were_made() {
    let lab = Lab::start(LayerPolicy::PerLayer).await;
    let middle = lab.chain.services[1].url();
    let response = plain_client().get(middle).send().await.expect("the middle answers");
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(response.headers().get(EXHAUSTED_HEADER).and_then(|v| v.to_str().ok()), Some("4"));
    assert_eq!(lab.chain.services[2].attempts.total(), ATTEMPTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_one_layer_an_exhausted_answer_is_passed_up_a_deeper_chain() {
    // Four services: the third retries the bottom; the second passes its
    // `retry-exhausted` answer on, so the top does not retry it either.
    let lab = Lab::with_services(LayerPolicy::OneLayer, 4).await;
    let statuses = lab.send_user_requests().await;
    assert_eq!(statuses, vec![503; USER_REQUESTS as usize]);
    let bottom = &lab.chain.services[3].attempts;
    assert_eq!(bottom.total(), ATTEMPTS * USER_REQUESTS, "4 calls per user request at any depth, not 16");
    // Every service above the third received each user request exactly once.
    assert_eq!(lab.incoming(1).total(), USER_REQUESTS);
    assert_eq!(lab.incoming(2).total(), USER_REQUESTS);
    assert_eq!(lab.incoming(3).total(), USER_REQUESTS);
    assert_eq!(lab.reader.totals("test/service-1").retries, 0);
    assert_eq!(lab.reader.totals("test/service-2").retries, 0);
    assert_eq!(lab.reader.totals("test/service-3").retries, 3 * USER_REQUESTS);
}
