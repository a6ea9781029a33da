//! The service with a slow tail: an HTTP server on loopback that answers most
//! requests in a few milliseconds and a small share of them in a second.
//!
//! Which requests are slow is drawn per request, from a seeded generator, so a
//! hedge of a slow request is itself slow with the same small probability —
//! as when the slowness is a busy replica, a garbage-collection pause or a
//! cold cache on the path of that one request, not a property of the request.
//! There is no capacity limit: the tail is the only trouble, and every request
//! the server receives costs it the same.
//!
//! The server counts, per 100 ms slice of their arrival, the requests it
//! received and answered, and every request its client gave up on before the
//! answer was ready: hyper notices the client's connection closing while the
//! request is being worked on (a cancelled copy of a hedged call) and drops
//! the work, which a guard in the handler counts.

use crate::storm::server::{Counters, Serving, respond};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long the server takes, and how often it is slow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tail {
    /// Share of requests that take [`slow`](Self::slow), in `[0, 1]`.
    pub slow_share: f64,
    /// How long a slow request takes.
    pub slow: Duration,
    /// The other requests take between this and twice this, uniformly.
    pub fast: Duration,
}

impl Tail {
    /// The default tail: 2 % of requests take 1 s, the rest 2–4 ms.
    pub const DEFAULT: Tail =
        Tail { slow_share: 0.02, slow: Duration::from_secs(1), fast: Duration::from_millis(2) };

    /// How long one request takes, and whether it is a slow one, from one
    /// draw of `rng`.
    fn work(&self, rng: &mut SmallRng) -> (Duration, bool) {
        if rng.random_bool(self.slow_share.clamp(0.0, 1.0)) {
            (self.slow, true)
        } else {
            (self.fast.mul_f64(rng.random_range(1.0..2.0)), false)
        }
    }
}

/// What the server counted over a run.
#[derive(Debug)]
pub struct Seen {
    /// Requests received and answered 200, per slice of their arrival.
    pub counters: Counters,
    /// Requests that were slow.
    slow: AtomicU64,
    /// Requests whose work was dropped before it was done: the client had
    /// closed the connection (a cancelled copy).
    abandoned: AtomicU64,
}

impl Seen {
    /// Requests drawn slow.
    pub fn slow(&self) -> u64 {
        self.slow.load(Ordering::Relaxed)
    }

    /// Requests the client gave up on before they were answered.
    pub fn abandoned(&self) -> u64 {
        self.abandoned.load(Ordering::Relaxed)
    }
}

/// A running slow-tail server; dropping it stops it.
pub struct SlowTailServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it counted.
    pub seen: Arc<Seen>,
    _serving: Serving,
}

impl SlowTailServer {
    /// Starts a server with `tail` on an ephemeral loopback port, counting
    /// `slices` slices, drawing slow requests from `seed`.
    pub fn start(tail: Tail, slices: usize, seed: u64) -> std::io::Result<SlowTailServer> {
        let seen = Arc::new(Seen {
            counters: Counters::new(slices),
            slow: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
        });
        let state = Arc::new(State {
            tail,
            started: Instant::now(),
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            seen: Arc::clone(&seen),
        });
        let (addr, serving) = Serving::start("storm-slow-tail", move |_request: Request<Incoming>| {
            let state = Arc::clone(&state);
            async move { respond(state.answer().await) }
        })?;
        Ok(SlowTailServer { addr, seen, _serving: serving })
    }
}

struct State {
    tail: Tail,
    started: Instant,
    rng: Mutex<SmallRng>,
    seen: Arc<Seen>,
}

impl State {
    async fn answer(&self) -> StatusCode {
        let slice = self.seen.counters.receive(self.started.elapsed()).map(|(slice, _)| slice);
        let (work, slow) = self.tail.work(&mut self.rng.lock().unwrap_or_else(PoisonError::into_inner));
        if slow {
            self.seen.slow.fetch_add(1, Ordering::Relaxed);
        }
        let mut unanswered = Abandoned { seen: &self.seen, answered: false };
        tokio::time::sleep(work).await;
        unanswered.answered = true;
        if let Some(slice) = slice {
            self.seen.counters.serve(slice);
        }
        StatusCode::OK
    }
}

/// Counts the request as abandoned when its work is dropped unfinished.
struct Abandoned<'a> {
    seen: &'a Seen,
    answered: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.seen.abandoned.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_of_slow_requests_is_the_configured_one_and_the_others_are_fast() {
        let tail = Tail::DEFAULT;
        let mut rng = SmallRng::seed_from_u64(1);
        let draws: Vec<(Duration, bool)> = (0..100_000).map(|_| tail.work(&mut rng)).collect();
        let slow = draws.iter().filter(|&&(_, slow)| slow).count();
        assert!((1_800..=2_200).contains(&slow), "{slow} slow of 100000");
        for (work, slow) in draws {
            if slow {
                assert_eq!(work, Duration::from_secs(1));
            } else {
                assert!(work >= Duration::from_millis(2) && work < Duration::from_millis(4), "{work:?}");
            }
        }
    }
}
