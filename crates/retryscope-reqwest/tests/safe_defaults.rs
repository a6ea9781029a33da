//! Safe at the defaults, as a user meets them: `RetryMiddleware::new` with the
//! presets against real loopback servers that stall, answer late, or tell every
//! client to come back at the same moment.

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use retryscope::Policy;
use retryscope_reqwest::RetryMiddleware;
use retryscope_reqwest::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn client(policy: Policy) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
    ClientBuilder::new(inner).with(RetryMiddleware::new(policy)).build()
}

/// A loopback HTTP/1.1 server: the `n`th connection (from 0) gets `answer(n)`,
/// `None` meaning accept and never answer. Each answer closes its connection.
/// Returns its address and when each request arrived.
async fn serve(
    answer: impl Fn(usize) -> Option<(Duration, &'static str)> + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Instant>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("address"));
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&arrivals);
    let answer = Arc::new(answer);
    let count = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (answer, seen, n) =
                (Arc::clone(&answer), Arc::clone(&seen), count.fetch_add(1, Ordering::SeqCst));
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                if let Ok(mut seen) = seen.lock() {
                    seen.push(Instant::now());
                }
                match answer(n) {
                    Some((after, head)) => {
                        tokio::time::sleep(after).await;
                        let reply =
                            format!("HTTP/1.1 {head}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                        let _ = stream.write_all(reply.as_bytes()).await;
                    }
                    // Stalled: hold the connection open, say nothing.
                    None => std::future::pending::<()>().await,
                }
            });
        }
    });
    (url, arrivals)
}

#[tokio::test]
async fn interactive_retries_past_a_first_attempt_that_never_answers() {
    let (url, arrivals) = serve(|n| (n > 0).then_some((Duration::ZERO, "200 OK"))).await;
    let started = Instant::now();
    let response = client(Policy::interactive()).get(&url).send().await.expect("answered by the retry");
    let took = started.elapsed();
    eprintln!("interactive, stalled first attempt: 200 after {took:?}");
    assert_eq!(response.status(), 200);
    assert_eq!(arrivals.lock().map(|a| a.len()).unwrap_or(0), 2);
    // The 5 s attempt timeout cut the stalled attempt; the retry answered at once.
    assert!(took >= Duration::from_secs(5) && took < Duration::from_secs(8), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn background_ends_within_its_deadline_against_a_server_that_never_answers() {
    let (url, arrivals) = serve(|_| None).await;
    let started = tokio::time::Instant::now();
    let error = client(Policy::background()).get(&url).send().await.expect_err("never answered");
    let took = started.elapsed();
    // 60 s per attempt, 10 minutes in all: the call ends, and says why.
    assert!(took <= Duration::from_secs(600), "{took:?}");
    let attempts = arrivals.lock().map(|a| a.len()).unwrap_or(0);
    eprintln!("background, server never answers: gave up after {took:?} (virtual), {attempts} attempts");
    assert!((2..=8).contains(&attempts), "{attempts} attempts");
    let shown = error.to_string();
    assert!(shown.contains("attempt"), "{shown}");
}

#[tokio::test]
async fn clients_told_the_same_retry_after_come_back_spread_out() {
    const CLIENTS: usize = 20;
    // The first request of each client is told to come back in 1 s; every later one is served.
    let (url, arrivals) = serve(|n| {
        Some((Duration::ZERO, if n < CLIENTS { "429 Too Many Requests\r\nretry-after: 1" } else { "200 OK" }))
    })
    .await;
    let told = Arc::new(tokio::sync::Barrier::new(CLIENTS));
    let mut calls = Vec::new();
    for _ in 0..CLIENTS {
        let (url, _told) = (url.clone(), Arc::clone(&told));
        // Independent clients: each its own middleware and connection pool.
        calls.push(tokio::spawn(async move {
            client(Policy::interactive()).get(&url).send().await.map(|r| r.status())
        }));
    }
    for call in calls {
        assert_eq!(call.await.expect("no panic").expect("served").as_u16(), 200);
    }
    let arrivals = arrivals.lock().map(|a| a.clone()).unwrap_or_default();
    assert_eq!(arrivals.len(), 2 * CLIENTS);
    let (first, retries) = arrivals.split_at(CLIENTS);
    let last_told = first.iter().max().copied().expect("20 first attempts");
    let (earliest, latest) =
        (retries.iter().min().copied().expect("retries"), retries.iter().max().copied().expect("retries"));
    // Nobody comes back before the server said (measured from the last 429 sent,
    // which is the latest any client could have heard it), and they come back spread.
    let first_told = first.iter().min().copied().expect("20 first attempts");
    assert!(
        earliest >= first_told + Duration::from_secs(1),
        "a retry {:?} after the first 429",
        earliest - first_told
    );
    let spread = latest - earliest;
    eprintln!(
        "20 clients told Retry-After: 1: first back {:?} after the first 429, spread {spread:?}",
        earliest - first_told
    );
    assert!(spread >= Duration::from_millis(100), "20 retries within {spread:?}");
    assert!(
        latest <= last_told + Duration::from_millis(1_500),
        "a retry {:?} after the last 429",
        latest - last_told
    );
}

#[tokio::test]
async fn the_callers_timeout_bounds_the_whole_call_not_each_attempt() {
    // Every answer is a 503, 200 ms late; the caller allows 500 ms in all.
    let (url, arrivals) = serve(|_| Some((Duration::from_millis(200), "503 Service Unavailable"))).await;
    let started = Instant::now();
    let outcome = client(Policy::interactive()).get(&url).timeout(Duration::from_millis(500)).send().await;
    let took = started.elapsed();
    eprintln!("500 ms request timeout against 200 ms 503s: answered after {took:?}");
    // Before, each attempt had its own 500 ms and the caller waited 2.73 s.
    assert!(took < Duration::from_millis(800), "the caller waited {took:?}");
    let attempts = arrivals.lock().map(|a| a.len()).unwrap_or(0);
    assert!((1..=3).contains(&attempts), "{attempts} attempts");
    // The last answer, or the reason there is none, reaches the caller.
    match outcome {
        Ok(response) => assert_eq!(response.status(), 503),
        Err(error) => assert!(error.to_string().contains("deadline"), "{error}"),
    }
}

/// Counts the retry log's events by message, as a service's log output would show them.
#[derive(Clone, Default)]
struct LogLines(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LogLines {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(Option<String>);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = Some(format!("{value:?}"));
                }
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "message" {
                    self.0 = Some(value.to_owned());
                }
            }
        }
        let mut message = Message(None);
        event.record(&mut message);
        if let (Some(message), Ok(mut lines)) = (message.0, self.0.lock()) {
            lines.push(message);
        }
    }
}

impl LogLines {
    fn count(&self, message: &str) -> usize {
        self.0.lock().map(|lines| lines.iter().filter(|l| *l == message).count()).unwrap_or(0)
    }
}

#[tokio::test]
async fn the_retry_log_stays_on_when_telemetry_is_off_until_it_is_turned_off_itself() {
    use tracing_subscriber::layer::SubscriberExt;
    for (log_off, expected) in [(false, (1, 1)), (true, (0, 0))] {
        let (url, _) = serve(|_| Some((Duration::ZERO, "503 Service Unavailable"))).await;
        let lines = LogLines::default();
        let _guard = retryscope_test_support::telemetry::set_default(
            tracing_subscriber::registry().with(lines.clone()),
        );
        let policy =
            Policy::builder().max_attempts(2).base_delay(Duration::from_millis(1)).build().expect("valid");
        let builder = RetryMiddleware::builder(policy).no_telemetry();
        let middleware = if log_off { builder.no_retry_log().build() } else { builder.build() };
        let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
        let client = ClientBuilder::new(inner).with(middleware).build();
        let response = client.get(&url).send().await.expect("the last 503");
        assert_eq!(response.status(), 503);
        let seen = (lines.count("retryscope.backoff"), lines.count("retryscope.gave_up"));
        assert_eq!(seen, expected, "no_retry_log: {log_off}");
    }
}
