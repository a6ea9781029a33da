//! The clients: open-loop load through a real reqwest client with the middleware.
//!
//! Open loop on purpose: real clients keep sending whatever the server's state,
//! so every retry is load *added* to the offered load. Each client fires at a
//! fixed rate from a seeded phase, so the clients do not start in lock-step.

use crate::storm::server::Counters;
use rand::{RngExt, SeedableRng};
use reqwest::StatusCode;
use reqwest_middleware::ClientWithMiddleware;
use retryscope_reqwest::RetryOptions;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, MissedTickBehavior};

/// What the clients do.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    /// Concurrent clients.
    pub(crate) clients: u32,
    /// Logical requests per second per client.
    pub(crate) rate: f64,
    /// How long the clients send.
    pub(crate) duration: Duration,
    /// Seeds the clients' phases.
    pub(crate) seed: u64,
}

/// Sends the load to `url` until `load.duration` has passed, then gives the
/// requests in flight `drain` to finish and cancels the rest. Returns, per
/// slice of their start, the logical requests sent and those that succeeded
/// (in `Counters`' received and served): what the callers saw.
pub(crate) async fn run(
    load: Load,
    client: ClientWithMiddleware,
    url: String,
    operation: &'static str,
    drain: Duration,
    slices: usize,
) -> Arc<Counters> {
    let outcomes = Arc::new(Counters::new(slices));
    let served = Arc::clone(&outcomes);
    let record = move |call: Finished| {
        if let (Ok(status), Some(slice)) = (&call.result, call.slice)
            && status.is_success()
        {
            served.serve(slice);
        }
    };
    drive(load, client, url, operation, drain, Arc::clone(&outcomes), Arc::new(record)).await;
    outcomes
}

/// One logical request, finished.
pub(crate) struct Finished {
    /// The slice it was started in; `None` past the planned run.
    pub(crate) slice: Option<usize>,
    /// From the moment it was due to be sent until its answer was read.
    pub(crate) latency: Duration,
    /// The status of the answer whose body was read to the end, or the error.
    pub(crate) result: Result<StatusCode, reqwest_middleware::Error>,
}

/// What [`drive`] calls with each finished request.
pub(crate) type Record = Arc<dyn Fn(Finished) + Send + Sync>;

/// Like [`run`], counting each request started in `started` (its received
/// counters) and handing each finished one to `record`. Returns how many were
/// still in flight when the drain ran out, and were cancelled.
pub(crate) async fn drive(
    load: Load,
    client: ClientWithMiddleware,
    url: String,
    operation: &'static str,
    drain: Duration,
    started_per_slice: Arc<Counters>,
    record: Record,
) -> u64 {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(load.seed);
    let period = Duration::from_secs_f64(1.0 / load.rate);
    let started = Instant::now();
    let deadline = started + load.duration;
    let mut clients = JoinSet::new();
    for _ in 0..load.clients {
        let phase = period.mul_f64(rng.random_range(0.0..1.0));
        let call = Call {
            client: client.clone(),
            url: url.clone(),
            operation,
            started,
            outcomes: Arc::clone(&started_per_slice),
            record: Arc::clone(&record),
        };
        clients.spawn(client_loop(call, period, phase, deadline));
    }
    let mut in_flight = Vec::new();
    while let Some(joined) = clients.join_next().await {
        // A client loop hands back the requests it left in flight.
        in_flight.extend(joined.unwrap_or_default());
    }
    let finish_all = async {
        for request in &mut in_flight {
            let _ = request.await;
        }
    };
    let _ = tokio::time::timeout(drain, finish_all).await;
    // Cancelled requests are reported as `cancelled` by the instrumentation.
    let mut cancelled = 0;
    for request in &in_flight {
        if !request.is_finished() {
            cancelled += 1;
        }
        request.abort();
    }
    cancelled
}

/// What one client calls, and where it counts the outcomes.
struct Call {
    client: ClientWithMiddleware,
    url: String,
    operation: &'static str,
    started: Instant,
    outcomes: Arc<Counters>,
    record: Record,
}

/// One client: a request every `period` until `deadline`. Returns the requests
/// still in flight.
async fn client_loop(
    call: Call,
    period: Duration,
    phase: Duration,
    deadline: Instant,
) -> Vec<JoinHandle<()>> {
    let mut ticks = tokio::time::interval_at(Instant::now() + phase, period);
    // Open loop: a late tick is sent late, not skipped and not bunched.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut in_flight = Vec::new();
    loop {
        let tick = ticks.tick().await;
        if tick >= deadline {
            return in_flight;
        }
        in_flight.retain(|h: &JoinHandle<()>| !h.is_finished());
        let request =
            call.client.get(&call.url).with_extension(RetryOptions::new().operation(call.operation));
        let slice = call.outcomes.receive(tick - call.started).map(|(slice, _)| slice);
        let record = Arc::clone(&call.record);
        in_flight.push(tokio::spawn(async move {
            // The body is read so the connection goes back to the pool.
            let result = match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    response.bytes().await.map(|_| status).map_err(reqwest_middleware::Error::Reqwest)
                }
                Err(error) => Err(error),
            };
            record(Finished { slice, latency: tick.elapsed(), result });
        }));
    }
}
