//! The Prometheus exposition, scraped over real HTTP: the series names are the
//! ones in the last column of the telemetry contract (docs/telemetry.md).

#![cfg(feature = "prometheus")]

mod common;

use common::Refuse;
use retryscope::budget::InFlightBudget;
use retryscope::clock::ManualClock;
use retryscope::dependency::{Dependencies, Dependency};
use retryscope::overload::{AdaptiveThrottle, Aimd, ConcurrencyLimiter, Priority};
use retryscope::pace::{PaceSignal, Quota};
use retryscope::{
    CircuitBreaker, ErrorType, Jitter, Pacer, Policy, Retryable, StopReason, TokenBucket, Verdict,
};
use retryscope_otel::{PrometheusMetrics, publish_guard_gauges};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// How long the server gives a client to send its request head (documented on
/// `PrometheusMetrics::serve`).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n").expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    response
}

#[test]
fn the_scrape_has_the_contract_series() {
    let prometheus = PrometheusMetrics::new().expect("exporter");
    let observer = prometheus.observer();
    let meter = prometheus.meter();
    // An open breaker (2) and a budget with four retries to give, published
    // as any dependency's guards are.
    let breaker = CircuitBreaker::builder().min_calls(1).failure_ratio(0.5).build().expect("valid breaker");
    breaker.try_acquire().expect("closed").failure();
    let four = TokenBucket::builder().max_tokens(8).build().expect("valid bucket");
    let db = Arc::new(Dependency::new("db").with_breaker(breaker).with_budget(four));
    publish_guard_gauges(&meter, &db);
    let policy = Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(10))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let classify = |r: &Result<(), u16>| match r {
        Ok(()) => Verdict::Success,
        Err(code) => Verdict::retryable(ErrorType::Status(*code)),
    };
    let clock = ManualClock::new();
    // Succeeds on its second attempt: a retry and a wait.
    let mut calls = 0;
    let ok = (|| {
        calls += 1;
        if calls < 2 { Err(503) } else { Ok(()) }
    })
    .retry(policy)
    .classify(classify)
    .observe(observer.clone())
    .dependency("db")
    .call_with(&clock, |d| clock.advance(d));
    assert!(ok.is_ok());
    // Refused by the budget: a throttled retry.
    let refused = (|| Err::<(), u16>(503))
        .retry(policy)
        .classify(classify)
        .dependency(&Dependency::new("db").with_budget(Refuse))
        .observe(observer)
        .call_with(&clock, |d| clock.advance(d));
    assert!(refused.is_err());
    // Two requests left in four seconds: the second call is held 2 s, and
    // the pacer's rate is in force.
    let guards = Dependencies::builder()
        .pacer({
            let clock = clock.clone();
            move || Pacer::with_clock(clock.clone())
        })
        .build();
    retryscope_otel::publish_dependency_gauges(&meter, &guards);
    let paced = guards.get("api");
    let pacer = paced.pacer().expect("a pacer per dependency");
    pacer.learn(&PaceSignal {
        quota: Some(Quota { remaining: 2, reset: Duration::from_secs(4), policy: None }),
        ..PaceSignal::none()
    });
    for _ in 0..2 {
        let sent = (|| Ok::<(), u16>(()))
            .retry(policy)
            .classify(classify)
            .observe(prometheus.observer())
            .dependency(&paced)
            .call_with(&clock, |d| clock.advance(d));
        assert!(sent.is_ok());
    }

    // A dependency that accepted one request of four: the adaptive throttle
    // rejects the next with probability (4 − 2·1) / 5, and this seed's draw
    // falls below it: refused locally, never sent.
    // (The registry's factory hands out clones of one throttle: clones share
    // its state, so the test can feed it.)
    let throttle = AdaptiveThrottle::builder().clock(clock.clone()).build().expect("valid");
    let overloaded = Dependencies::builder()
        .guard({
            let throttle = throttle.clone();
            move || throttle.clone()
        })
        .build();
    retryscope_otel::publish_dependency_gauges(&meter, &overloaded);
    let guards_of = overloaded.get("overloaded");
    for n in 0..4 {
        assert!(throttle.admit(1.0));
        if n == 0 {
            throttle.accepted();
        }
    }
    let mut sent = false;
    let rejected = (|| {
        sent = true;
        Ok::<(), u16>(())
    })
    .retry(policy)
    .classify(classify)
    .seed(7)
    .observe(prometheus.observer())
    .dependency(&guards_of)
    .call_with(&clock, |d| clock.advance(d));
    assert_eq!(rejected.map_err(|e| e.reason()), Err(StopReason::RejectedLocally));
    assert!(!sent);

    // A dependency whose concurrency limit of 1 is taken: a sheddable call
    // finds it full and is refused locally, never sent; the gauges read the
    // limit and the slot held.
    // (The registry's factory hands out clones of one limiter: clones share
    // its slots, so the test can take one.)
    let limiter =
        ConcurrencyLimiter::new(Aimd::builder().initial_limit(1).min_limit(1).build().expect("valid"));
    let limited = Dependencies::builder()
        .concurrency_limit({
            let limiter = limiter.clone();
            move || limiter.clone()
        })
        .build();
    retryscope_otel::publish_dependency_gauges(&meter, &limited);
    let guards_of = limited.get("limited");
    let held = limiter.try_acquire(Priority::Critical).expect("a free slot");
    let mut sent = false;
    let refused = (|| {
        sent = true;
        Ok::<(), u16>(())
    })
    .retry(policy)
    .classify(classify)
    .priority(Priority::Sheddable)
    .observe(prometheus.observer())
    .dependency(&guards_of)
    .call_with(&clock, |d| clock.advance(d));
    assert!(
        matches!(refused.map_err(|e| e.reason()), Err(StopReason::ConcurrencyLimited { limit: 1, .. })),
        "refused by the full limit"
    );
    assert!(!sent);

    // A dependency with an in-flight budget (a `Guard`): its gauges come
    // through `Guard::gauges`, nothing written for them here.
    let guarded = Dependencies::builder().guard(InFlightBudget::envoy).build();
    retryscope_otel::publish_dependency_gauges(&meter, &guarded);
    let _guarded = guarded.get("guarded");

    let server = prometheus.serve("127.0.0.1:0").expect("serve");
    let response = get(server.local_addr(), "/metrics");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("Content-Type: text/plain; version=0.0.4"), "{response}");
    for series in [
        "retryscope_requests_total{",
        "retryscope_retries_total{",
        "retryscope_throttled_total{",
        "retryscope_attempt_duration_seconds_bucket{",
        "retryscope_attempt_duration_seconds_sum{",
        "retryscope_attempt_duration_seconds_count{",
        "retryscope_request_duration_seconds_bucket{",
        "retryscope_backoff_delay_seconds_bucket{",
        "retryscope_breaker_state{",
        "retryscope_budget_available{",
        "retryscope_pace_held_seconds_bucket{",
        "retryscope_pace_rate_per_second{",
        "retryscope_overload_accepted_ratio{",
        "retryscope_limit_limit{",
        "retryscope_limit_in_flight{",
    ] {
        assert!(response.lines().any(|l| l.starts_with(series)), "no {series} in:\n{response}");
    }
    let scope =
        concat!(r#"otel_scope_name="retryscope",otel_scope_version=""#, env!("CARGO_PKG_VERSION"), r#"""#);
    for (series, labels, value) in [
        ("retryscope_requests_total", r#"retryscope_dependency="db""#, "2"),
        ("retryscope_retries_total", r#"retryscope_dependency="db",retryscope_retry_reason="503""#, "1"),
        (
            "retryscope_throttled_total",
            r#"retryscope_dependency="db",retryscope_priority="critical",retryscope_throttle_reason="budget""#,
            "1",
        ),
        ("retryscope_breaker_state", r#"retryscope_dependency="db""#, "2"),
        ("retryscope_budget_available", r#"retryscope_dependency="db""#, "4"),
        (
            "retryscope_pace_held_seconds_count",
            r#"retryscope_dependency="api",retryscope_pace_source="rate_limit""#,
            "1",
        ),
        (
            "retryscope_pace_held_seconds_sum",
            r#"retryscope_dependency="api",retryscope_pace_source="rate_limit""#,
            "2",
        ),
        ("retryscope_pace_rate_per_second", r#"retryscope_dependency="api""#, "0.5"),
        // One accepted of five counted: the rejected call counts as a request.
        ("retryscope_overload_accepted_ratio", r#"retryscope_dependency="overloaded""#, "0.2"),
        (
            "retryscope_refused_total",
            r#"retryscope_dependency="overloaded",retryscope_outcome="throttled",retryscope_priority="critical",retryscope_throttle_reason="rejected_locally""#,
            "1",
        ),
        // The limit of 1 and its one slot held.
        ("retryscope_limit_limit", r#"retryscope_dependency="limited""#, "1"),
        ("retryscope_limit_in_flight", r#"retryscope_dependency="limited""#, "1"),
        ("retryscope_budget_retries_in_flight", r#"retryscope_dependency="guarded""#, "0"),
        ("retryscope_budget_retries_in_flight_limit", r#"retryscope_dependency="guarded""#, "3"),
        (
            "retryscope_refused_total",
            r#"retryscope_dependency="limited",retryscope_outcome="throttled",retryscope_priority="sheddable",retryscope_throttle_reason="concurrency_limited""#,
            "1",
        ),
        (
            "retryscope_throttled_total",
            r#"retryscope_dependency="limited",retryscope_priority="sheddable",retryscope_throttle_reason="concurrency_limited""#,
            "1",
        ),
    ] {
        let line = format!("{series}{{{labels},{scope}}} {value}");
        assert!(response.lines().any(|l| l == line), "no line {line} in:\n{response}");
    }
    assert!(get(server.local_addr(), "/other").starts_with("HTTP/1.1 404"));
    drop(held);
    if std::env::var_os("RETRYSCOPE_SAVE_FIXTURES").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/prometheus.txt");
        std::fs::write(path, &response).expect("fixture");
    }
}

/// Calls an open breaker refused before any attempt are counted as refused,
/// never as operations with 0 attempts: five refused and five single-attempt
/// calls leave one `retryscope_attempts` value, `1`, so the shipped rules read
/// a 2+ share of 0 and an attempt p99 of 1 (dashboards/tests/recording_test.yml
/// evaluates them on these series).
#[test]
fn refused_calls_are_counted_apart_from_the_attempt_figures() {
    let prometheus = PrometheusMetrics::new().expect("exporter");
    let observer = prometheus.observer();
    let policy = Policy::builder().max_attempts(3).jitter(Jitter::None).build().unwrap();
    let classify = |r: &Result<(), u16>| match r {
        Ok(()) => Verdict::Success,
        Err(code) => Verdict::retryable(ErrorType::Status(*code)),
    };
    let clock = ManualClock::new();
    let open =
        retryscope::CircuitBreaker::builder().min_calls(1).clock(clock.clone()).build().expect("breaker");
    open.try_acquire().expect("closed at first").failure();
    assert!(open.try_acquire().is_err(), "the breaker is open");
    for _ in 0..5 {
        let refused = (|| Ok::<(), u16>(()))
            .retry(policy)
            .classify(classify)
            .dependency(&Dependency::new("payments").with_breaker(open.clone()))
            .observe(observer.clone())
            .call_with(&clock, |d| clock.advance(d));
        assert_eq!(refused.unwrap_err().reason(), retryscope::StopReason::CircuitOpen);
        let single = (|| Ok::<(), u16>(()))
            .retry(policy)
            .classify(classify)
            .observe(observer.clone())
            .dependency("payments")
            .call_with(&clock, |d| clock.advance(d));
        assert!(single.is_ok());
    }
    let server = prometheus.serve("127.0.0.1:0").expect("serve");
    let response = get(server.local_addr(), "/metrics");
    let scope =
        concat!(r#"otel_scope_name="retryscope",otel_scope_version=""#, env!("CARGO_PKG_VERSION"), r#"""#);
    for (series, labels) in [
        (
            "retryscope_refused_total",
            r#"retryscope_dependency="payments",retryscope_outcome="throttled",retryscope_priority="critical",retryscope_throttle_reason="circuit_open""#,
        ),
        (
            "retryscope_throttled_total",
            r#"retryscope_dependency="payments",retryscope_priority="critical",retryscope_throttle_reason="circuit_open""#,
        ),
        (
            "retryscope_request_duration_seconds_count",
            r#"retryscope_attempts="1",retryscope_dependency="payments",retryscope_outcome="success""#,
        ),
    ] {
        let line = format!("{series}{{{labels},{scope}}} 5");
        assert!(response.lines().any(|l| l == line), "no line {line} in:\n{response}");
    }
    let attempts: Vec<&str> =
        response.lines().filter(|l| l.starts_with("retryscope_request_duration_seconds_count{")).collect();
    assert_eq!(attempts.len(), 1, "one operation series, attempts=1: {attempts:?}");
    assert!(!response.contains(r#"retryscope_attempts="0""#), "{response}");
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    stream
}

/// Everything the server sends until it closes the connection; a reset counts
/// as a close (the server may drop a connection with unread input).
fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    match stream.read_to_end(&mut received) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the server neither answered nor closed the connection: {e}"),
    }
    String::from_utf8_lossy(&received).into_owned()
}

/// A slowloris attack: clients that open connections and send their request
/// heads a few bytes at a time, never finishing. Scrapes on other connections
/// are answered at once, not after the slow heads time out, and the slow
/// clients are cut off after the header timeout without an answer.
#[test]
fn slow_clients_do_not_hold_up_scrapes() {
    let prometheus = PrometheusMetrics::new().expect("exporter");
    let server = prometheus.serve("127.0.0.1:0").expect("serve");
    let addr = server.local_addr();
    let started = Instant::now();
    let mut slow: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut stream = connect(addr);
            stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").expect("send");
            stream
        })
        .collect();
    for stream in &mut slow {
        stream.write_all(b"X-Slow: 1\r\n").expect("trickle");
    }
    for _ in 0..3 {
        let response = get(addr, "/metrics");
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    }
    // The scrapes did not wait for the slow heads to time out.
    assert!(started.elapsed() < HEADER_READ_TIMEOUT, "scrapes took {:?}", started.elapsed());
    for stream in &mut slow {
        let answer = read_until_closed(stream);
        assert!(!answer.contains("200 OK"), "a request head that never ended was answered: {answer}");
    }
    let cut_off = started.elapsed();
    assert!(
        (HEADER_READ_TIMEOUT..HEADER_READ_TIMEOUT + Duration::from_secs(4)).contains(&cut_off),
        "slow clients cut off after {cut_off:?}"
    );
}

/// A 10 MB request line is refused after the first few KiB (the server reads
/// at most a bounded head), while scrapes on other connections go on.
#[test]
fn a_ten_megabyte_request_line_is_refused_while_scrapes_go_on() {
    const TEN_MB: usize = 10 * 1024 * 1024;
    let prometheus = PrometheusMetrics::new().expect("exporter");
    let server = prometheus.serve("127.0.0.1:0").expect("serve");
    let addr = server.local_addr();
    let (sending, started_sending) = mpsc::channel();
    let huge = std::thread::spawn(move || {
        let mut stream = connect(addr);
        stream.set_write_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let chunk = vec![b'a'; 64 * 1024];
        let mut sent = stream.write(b"GET /").unwrap_or(0);
        while sent < TEN_MB {
            match stream.write(&chunk) {
                Ok(n) => sent += n,
                // The server closed the connection: it stopped reading.
                Err(_) => break,
            }
            let _ = sending.send(());
        }
        (sent, read_until_closed(&mut stream))
    });
    started_sending.recv_timeout(Duration::from_secs(10)).expect("the huge request started");
    for _ in 0..3 {
        let response = get(addr, "/metrics");
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    }
    let (sent, answer) = huge.join().expect("the huge client");
    // Either the server said so, or it closed the connection before the
    // client could push all 10 MB through: never a scrape's answer.
    assert!(
        answer.starts_with("HTTP/1.1 431") || (answer.is_empty() && sent < TEN_MB),
        "{sent} bytes sent, answer: {answer:?}"
    );
}

/// Connections beyond the limit are closed on accept instead of queueing
/// behind the others; once the others are gone, scrapes are answered again.
#[test]
fn connections_beyond_the_limit_are_closed_at_once() {
    let prometheus = PrometheusMetrics::new().expect("exporter");
    let server = prometheus.serve("127.0.0.1:0").expect("serve");
    let addr = server.local_addr();
    // The documented limit: 32 connections at once.
    let idle: Vec<TcpStream> = (0..32).map(|_| connect(addr)).collect();
    let started = Instant::now();
    let mut extra = connect(addr);
    // The server may have closed (reset) the connection before the request is
    // written: that refusal is what is being tested, so a failed write is fine.
    let _ = write!(extra, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let answer = read_until_closed(&mut extra);
    assert_eq!(answer, "", "a connection over the limit was served");
    assert!(started.elapsed() < HEADER_READ_TIMEOUT, "closed after {:?}", started.elapsed());
    drop(idle);
    // The server notices the closed connections asynchronously: bounded retries.
    let answered = (0..100).any(|_| {
        let mut stream = connect(addr);
        let _ = write!(stream, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n");
        let ok = read_until_closed(&mut stream).starts_with("HTTP/1.1 200 OK");
        if !ok {
            std::thread::sleep(Duration::from_millis(20));
        }
        ok
    });
    assert!(answered, "no scrape answered after the idle connections closed");
}

/// The hedge counters' series, as hedge-lab's rules read them.
#[tokio::test(start_paused = true)]
async fn a_hedged_call_shows_as_hedges_and_wins_total() {
    use retryscope::hedge::{HedgeDelay, HedgePolicy};
    let prometheus = PrometheusMetrics::new().expect("exporter");
    let policy = HedgePolicy::builder().delay(HedgeDelay::Fixed(Duration::from_millis(50))).build().unwrap();
    let mut copies = 0;
    let answer = (|| {
        copies += 1;
        let stall = if copies == 1 { Duration::from_secs(3_600) } else { Duration::from_millis(5) };
        async move {
            tokio::time::sleep(stall).await;
            Ok::<_, std::io::Error>(())
        }
    })
    .hedge(policy.clone())
    .observe(prometheus.observer())
    .dependency("inventory")
    .await;
    assert!(answer.is_ok());
    let text = prometheus.render().expect("render");
    for series in ["retryscope_hedges_total", "retryscope_hedge_wins_total", "retryscope_requests_total"] {
        let found = text.lines().any(|l| {
            l.starts_with(&format!("{series}{{"))
                && l.contains(r#"retryscope_dependency="inventory""#)
                && l.ends_with("} 1")
        });
        assert!(found, "no {series} = 1 in:\n{text}");
    }
}
