//! A hedging delay is learned per dependency: one client of either
//! integration, hedging with a percentile delay, calls a fast host and a slow
//! one, and each host's delay comes from its own latencies. On the wall clock:
//! the hosts are real loopback servers whose answers take real time.

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use retryscope::Policy;
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope_reqwest::RetryMiddleware;
use retryscope_reqwest::prelude::*;
use retryscope_tower::{RetryLayer, RetryService};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tower::{Service, ServiceBuilder, ServiceExt};

/// The two integrations under test. (The shared `common` module's answers
/// are not needed here: every call answers 200.)
#[derive(Debug, Clone, Copy)]
enum Integration {
    Reqwest,
    Tower,
}

const BOTH: [Integration; 2] = [Integration::Reqwest, Integration::Tower];

const FAST: Duration = Duration::from_millis(5);
const SLOW: Duration = Duration::from_millis(60);
/// Calls per host before the delays are read: enough for the percentile.
const WARM_UP: usize = 10;
/// The tracker's window: long enough that every warm-up call lands in the
/// first one, which the read after it closes.
const WINDOW: Duration = Duration::from_secs(2);

/// p90 of each dependency's latencies, over windows of [`WINDOW`], once 5 are
/// known; 1 s until then, so no warm-up call is hedged (every copy counted
/// is a first copy's whole latency).
fn template() -> HedgePolicy {
    HedgePolicy::builder()
        .max_copies(2)
        .delay(
            HedgeDelay::percentile(0.9)
                .fallback(Duration::from_secs(1))
                .clamp(Duration::from_millis(1), Duration::from_secs(1))
                .min_samples(5)
                .window(WINDOW),
        )
        .build()
        .expect("valid hedging policy")
}

/// A loopback HTTP/1.1 server that answers every request with a 200 after
/// `latency`, one request per connection.
async fn host(latency: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                tokio::time::sleep(latency).await;
                let reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
                let _ = stream.write_all(reply).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

/// One client of `integration` hedging GETs with [`template`], and a way to
/// read each dependency's learned delay.
enum Client {
    Reqwest(reqwest_middleware::ClientWithMiddleware, Arc<RetryMiddleware>),
    Tower(Box<RetryService<HyperClient<HttpConnector, Full<Bytes>>>>, RetryLayer),
}

impl Integration {
    fn hedging_client(self) -> Client {
        match self {
            Integration::Reqwest => {
                let middleware = Arc::new(
                    RetryMiddleware::builder(Policy::interactive()).hedge(template()).no_telemetry().build(),
                );
                let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                    .with_arc(Arc::clone(&middleware) as Arc<dyn reqwest_middleware::Middleware>)
                    .build();
                Client::Reqwest(client, middleware)
            }
            Integration::Tower => {
                let layer =
                    RetryLayer::builder(Policy::interactive()).hedge(template()).no_telemetry().build();
                let inner = HyperClient::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
                Client::Tower(Box::new(ServiceBuilder::new().layer(layer.clone()).service(inner)), layer)
            }
        }
    }
}

impl Client {
    /// GETs `url`; the status it answered.
    async fn get(&self, url: &str) -> u16 {
        match self {
            Client::Reqwest(client, _) => client.get(url).send().await.expect("a response").status().as_u16(),
            Client::Tower(service, _) => {
                let request = http::Request::get(url).body(Full::default()).expect("valid request");
                let mut service = (**service).clone();
                let response = service.ready().await.expect("ready").call(request).await.expect("a response");
                response.status().as_u16()
            }
        }
    }

    /// The delay `dependency` has learned.
    fn hedge_delay(&self, dependency: &str) -> Option<Duration> {
        match self {
            Client::Reqwest(_, middleware) => middleware.hedge_delay(dependency),
            Client::Tower(_, layer) => layer.hedge_delay(dependency),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_host_and_a_slow_host_of_one_client_learn_different_hedging_delays() {
    for integration in BOTH {
        let (fast, slow) = (host(FAST).await, host(SLOW).await);
        let client = integration.hedging_client();
        let started = tokio::time::Instant::now();
        let warm_up = |addr: SocketAddr| {
            let client = &client;
            async move {
                for _ in 0..WARM_UP {
                    assert_eq!(client.get(&format!("http://{addr}/")).await, 200, "{integration:?}");
                }
            }
        };
        tokio::join!(warm_up(fast), warm_up(slow));
        // Past the first window: reading the delay closes it.
        tokio::time::sleep_until(started + WINDOW + Duration::from_millis(100)).await;
        let fast_delay = client.hedge_delay(&fast.to_string()).expect("the fast host's delay");
        let slow_delay = client.hedge_delay(&slow.to_string()).expect("the slow host's delay");
        eprintln!(
            "{integration:?}: learned hedging delay: fast host {fast_delay:?}, slow host {slow_delay:?}"
        );
        // Each is its own host's p90 (a histogram bucket's bound, plus what
        // a loopback call adds), learned rather than the 1 s fallback. One
        // tracker for both would give both the slow host's p90: the top
        // tenth of twenty latencies is slow.
        assert!(fast_delay >= FAST && fast_delay < SLOW, "{integration:?}: fast {fast_delay:?}");
        assert!(
            slow_delay >= SLOW && slow_delay < Duration::from_secs(1),
            "{integration:?}: slow {slow_delay:?}"
        );
    }
}
