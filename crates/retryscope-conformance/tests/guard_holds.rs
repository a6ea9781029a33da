//! A guard of one's own that *holds* attempts, beside the built-in guards it
//! shares every call with, for both integrations on a real loopback server.
//!
//! `Spacing` keeps a dependency's sends at least 150 ms apart: at each send
//! it holds the attempt until the gap since the dependency's previous send
//! has passed (`Admission::Hold`, asked again after the hold). The calls also
//! carry the default budget, a breaker and a concurrency limit. What must
//! hold where they meet: the server sees the sends spaced, every call gets
//! its answer after the retries the 503s ask for, the breaker and the limit
//! hear every attempt's end (the limit gives every slot back), and every
//! admission of the guard is settled exactly once.

use retryscope::guard::{Admission, Attempt, End, Guard};
use retryscope::overload::{Aimd, ConcurrencyLimiter};
use retryscope::{CircuitBreaker, Jitter, Policy};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::{Answer, BOTH, Call, Setup};

/// The least time between two sends to the dependency.
const GAP: Duration = Duration::from_millis(150);

/// Holds each send until [`GAP`] after the previous one; counts what it
/// admits and settles.
#[derive(Default)]
struct Spacing {
    next: Mutex<Option<Instant>>,
    admitted: AtomicU32,
    held: AtomicU32,
    settled: AtomicU32,
}

impl Guard for Spacing {
    type Permit = ();

    fn admit(&self, _attempt: Attempt) -> Admission<()> {
        self.admitted.fetch_add(1, Ordering::SeqCst);
        Admission::Go(())
    }

    fn send(&self, _attempt: Attempt, (): &mut ()) -> Admission {
        let now = Instant::now();
        let mut next = self.next.lock().expect("not poisoned");
        match *next {
            Some(at) if at > now => {
                self.held.fetch_add(1, Ordering::SeqCst);
                Admission::Hold { wait: at - now, source: None, permit: () }
            }
            _ => {
                *next = Some(now + GAP);
                Admission::Go(())
            }
        }
    }

    fn settle(&self, _attempt: Attempt, (): (), _end: End) {
        self.settled.fetch_add(1, Ordering::SeqCst);
    }
}

/// A service whose first two requests answer 503, then 200; it records when
/// each request arrived.
async fn flaky(arrivals: Arc<Mutex<Vec<Instant>>>) -> String {
    let app = axum::Router::new().route(
        "/stock",
        axum::routing::get(move || {
            let arrivals = Arc::clone(&arrivals);
            async move {
                let n = {
                    let mut arrivals = arrivals.lock().expect("not poisoned");
                    arrivals.push(Instant::now());
                    arrivals.len()
                };
                if n <= 2 { http::StatusCode::SERVICE_UNAVAILABLE } else { http::StatusCode::OK }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let url = format!("http://{}/stock", listener.local_addr().expect("bound"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Three attempts 10 ms apart, no jitter, within 5 s.
fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(10))
        .jitter(Jitter::None)
        .deadline(Duration::from_secs(5))
        .build()
        .expect("valid policy")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_that_holds_spaces_the_sends_beside_the_breaker_the_limit_and_the_budget() {
    for integration in BOTH {
        let spacing = Arc::new(Spacing::default());
        let breaker = CircuitBreaker::default();
        let limiter = ConcurrencyLimiter::new(Aimd::default());
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let url = flaky(Arc::clone(&arrivals)).await;
        let setup = {
            let (spacing, breaker, limiter) = (Arc::clone(&spacing), breaker.clone(), limiter.clone());
            Setup::new(policy())
                .guard_per_dependency(move || Arc::clone(&spacing))
                .breaker_per_dependency(move || breaker.clone())
                .concurrency_limit_per_dependency(move || limiter.clone())
        };
        let client = Arc::new(integration.client(setup));
        // Three calls at once: two 503s among their first attempts, so two
        // retries, five sends in all, each held behind the one before.
        let calls: Vec<_> = (0..3)
            .map(|_| {
                let (client, url) = (Arc::clone(&client), url.clone());
                tokio::spawn(async move { client.answer(Call::get(url)).await })
            })
            .collect();
        for call in calls {
            let answer = call.await.expect("no panic");
            assert!(matches!(answer, Answer::Status(200)), "{integration:?}: {answer:?}");
        }
        let arrivals = arrivals.lock().expect("not poisoned").clone();
        assert_eq!(arrivals.len(), 5, "{integration:?}: three calls, two retries");
        let gaps: Vec<Duration> = arrivals.windows(2).map(|w| w[1].saturating_duration_since(w[0])).collect();
        println!("{integration:?}: gaps between sends {gaps:?}");
        // The hold is measured at the client; the server sees the request a
        // little later or sooner by scheduling: 20 ms of slack.
        for gap in &gaps {
            assert!(*gap + Duration::from_millis(20) >= GAP, "{integration:?}: sends {gaps:?} apart");
        }
        assert!(
            spacing.held.load(Ordering::SeqCst) >= 4,
            "{integration:?}: every send after the first was held"
        );
        assert_eq!(
            spacing.admitted.load(Ordering::SeqCst),
            spacing.settled.load(Ordering::SeqCst),
            "{integration:?}: every admission settled once"
        );
        assert_eq!(spacing.admitted.load(Ordering::SeqCst), 5, "{integration:?}: one admission per send");
        assert_eq!(limiter.in_flight(), 0, "{integration:?}: every slot given back");
        assert_eq!(breaker.state(), retryscope::breaker::BreakerState::Closed, "{integration:?}");
    }
}
