//! Everything that comes from traffic is bounded: dependency labels, the guards
//! kept per dependency, and the gauges that report them.
//!
//! One test in its own binary: the dependency-name table is per process, and
//! another test's hosts would take some of its slots.

use retryscope_test_support as support;

use reqwest_middleware::ClientBuilder;
use retryscope::Policy;
use retryscope_reqwest::RetryMiddleware;
use retryscope_reqwest::prelude::*;
use std::net::SocketAddr;
use support::telemetry::Telemetry;
use support::{Reply, Server};

const HOSTS: usize = 5_000;
const DEPENDENCY: &str = "retryscope.dependency";

/// A client that sends every `*.test` host to `server`: thousands of distinct
/// dependencies, one real loopback server. Idle connections are closed at once,
/// so 5,000 hosts never hold 5,000 sockets.
fn client_for(server: SocketAddr, hosts: usize) -> reqwest::ClientBuilder {
    (0..hosts).fold(reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0), |builder, i| {
        builder.resolve(&format!("svc-{i}.test"), server)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_hosts_make_at_most_a_thousand_and_one_series() {
    let t = Telemetry::install();
    let server = Server::start().await;
    // Every answer reports a quota (a million requests a minute): every
    // dependency's pacer has a pace in force, and the gauge reports each.
    let quota = || Reply::Status(200, vec![("ratelimit", r#""default";r=1000000;t=60"#.to_owned())], "ok");
    server.script("/", (0..HOSTS).map(|_| quota()));
    let inner = client_for(server.addr, HOSTS).build().expect("reqwest client");
    let policy = Policy::builder().max_attempts(2).no_deadline().build().expect("policy");
    let client =
        ClientBuilder::new(inner).with(RetryMiddleware::builder(policy).meter(&t.meter).build()).build();
    let port = server.addr.port();
    for i in 0..HOSTS {
        let response = client.get(format!("http://svc-{i}.test:{port}/")).send().await.expect("response");
        assert_eq!(response.status(), 200);
    }
    assert_eq!(server.seen().len(), HOSTS, "every call went out");

    let cap = retryscope::dependency::MAX_DEPENDENCIES;
    for metric in ["retryscope.requests", "retryscope.request.duration", "retryscope.attempt.duration"] {
        let (names, series) = t.series(metric, DEPENDENCY);
        println!("{metric}: {series} series, {} dependency values", names.len());
        assert_eq!(names.len(), cap + 1, "{metric}: {cap} hosts and _OTHER");
        assert!(names.contains("_OTHER"));
        assert!(names.contains(&format!("svc-0.test:{port}")), "host:port, as the first host was seen");
        assert!(!names.contains(&format!("svc-{}.test:{port}", HOSTS - 1)));
    }
    assert_eq!(t.counter("retryscope.requests", &[(DEPENDENCY, "_OTHER")]), (HOSTS - cap) as u64);
    // One budget, one breaker and one pacer per dependency, the 4,000 hosts
    // past the bound each their own (the 1,000 used last kept): the gauges
    // stay bounded, one series per named dependency and one `_OTHER` for the
    // rest.
    for gauge in ["retryscope.budget.available", "retryscope.breaker.state", "retryscope.pace.rate"] {
        let (names, series) = t.series(gauge, DEPENDENCY);
        println!("{gauge}: {series} series");
        assert_eq!((names.len(), series), (cap + 1, cap + 1), "{gauge}");
    }
}
