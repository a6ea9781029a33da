//! The struggling service: an HTTP server on loopback with a capacity and an outage.
//!
//! Two models of what happens above capacity ([`Model`]):
//!
//! - [`Model::Queue`], the storm's default, degrades the way real servers do.
//!   `workers` requests are served at a time, each for `service` of (simulated)
//!   work; the others wait in a FIFO queue of at most `queue` requests, and only
//!   a request arriving at a full queue is refused at once (503). A request is
//!   never cancelled once queued: when its caller's attempt timeout fires, the
//!   server does not know and still spends a worker on it later, so a queue
//!   longer than the callers' patience is wasted work. Offered load above
//!   capacity therefore fills the queue, every answer comes too late, the
//!   callers retry, and the retries keep the queue full after the cause is gone:
//!   the metastable failure `simulate collapse` reproduces in virtual time
//!   (there a load-sensitive server without a queue; same mechanism: work for
//!   callers who have left). During the outage a request costs its service
//!   time too and is answered 503, as when a dependency is down.
//! - [`Model::Shed`], the comparison: perfect shedding, an instant and free 503
//!   for every request above `capacity` per 100 ms slice, and for everything
//!   during the outage. No amount of retrying can keep such a server down.
//!
//! It counts what it receives per slice — that is the "server load" the storm
//! report shows, as the server saw it, independent of any client-side
//! telemetry — and what it served in time (goodput), and records each request
//! in `retryscope.server.requests` by the attempt its caller says it is.

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{HeaderMap, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use retryscope_otel::IncomingRequests;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// The resolution of the server's accounting and of the storm's time series.
pub const SLICE: Duration = Duration::from_millis(100);

/// How the server behaves over time.
#[derive(Debug, Clone, Copy)]
pub struct Behaviour {
    /// Requests per second served before shedding load ([`Model::Shed`]); with
    /// [`Model::Queue`], `workers / service`.
    pub capacity: u32,
    /// When the outage starts, from the server's start.
    pub outage_start: Duration,
    /// How long the outage lasts.
    pub outage_len: Duration,
    /// What happens above capacity.
    pub model: Model,
}

/// What the server does with more requests than it can serve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Model {
    /// Perfect shedding: an instant, free 503 above capacity.
    Shed,
    /// Bounded concurrency, a bounded queue and a service time per request.
    Queue(Overload),
}

/// The parameters of [`Model::Queue`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overload {
    /// Requests served at a time.
    pub workers: u32,
    /// Work per request, served or failed (slept, so it costs no CPU: the
    /// model's capacity does not depend on the machine running it).
    pub service: Duration,
    /// Requests that may wait for a worker; one more is refused at once.
    pub queue: u32,
    /// How long callers wait for an answer (their attempt timeout): a request
    /// answered later counts as received but not as goodput, since nobody
    /// reads the answer.
    pub patience: Duration,
}

impl Overload {
    /// Requests per second the workers can serve.
    pub fn capacity(&self) -> f64 {
        f64::from(self.workers) / self.service.as_secs_f64().max(1e-6)
    }

    /// How long a request arriving at a full queue waits for a worker.
    pub fn full_queue_wait(&self) -> Duration {
        self.service.mul_f64(f64::from(self.queue) / f64::from(self.workers.max(1)))
    }
}

/// Per-slice counters, shared by every connection.
#[derive(Debug)]
pub struct Counters {
    received: Vec<AtomicU32>,
    served: Vec<AtomicU32>,
}

impl Counters {
    pub(crate) fn new(slices: usize) -> Self {
        let zeros = || (0..slices).map(|_| AtomicU32::new(0)).collect();
        Self { received: zeros(), served: zeros() }
    }

    /// Counts a request received `elapsed` after the start: its slice and the
    /// slice's load so far, or `None` past the planned run.
    pub(crate) fn receive(&self, elapsed: Duration) -> Option<(usize, u32)> {
        let slice = usize::try_from(elapsed.as_millis() / SLICE.as_millis()).unwrap_or(usize::MAX);
        let load = self.received.get(slice)?.fetch_add(1, Ordering::Relaxed) + 1;
        Some((slice, load))
    }

    /// Counts a request of `slice` answered 200.
    pub(crate) fn serve(&self, slice: usize) {
        if let Some(served) = self.served.get(slice) {
            served.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Requests received per slice.
    pub fn received(&self) -> Vec<u32> {
        self.received.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    }

    /// Requests answered 200 per slice.
    pub fn served(&self) -> Vec<u32> {
        self.served.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    }
}

/// A running server; dropping it stops accepting connections and abandons the
/// work in progress.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it saw.
    pub counters: Arc<Counters>,
    _serving: Serving,
}

/// A loopback server's accept loop on a runtime of its own, until dropped:
/// a server in trouble is another process and must not slow down its
/// clients' timers (open loop means the clients send on time whatever the
/// server's state). What the storm's server and gateway share.
pub(crate) struct Serving {
    accept: JoinHandle<()>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Serving {
    /// Binds an ephemeral port on 127.0.0.1 and answers each request with
    /// `handle` on one thread named `name`.
    pub(crate) fn start<H, F>(name: &str, handle: H) -> std::io::Result<(SocketAddr, Serving)>
    where
        H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(name)
            .enable_all()
            .build()?;
        let listener = {
            let std = std::net::TcpListener::bind("127.0.0.1:0")?;
            std.set_nonblocking(true)?;
            let _inside = runtime.enter();
            TcpListener::from_std(std)?
        };
        let addr = listener.local_addr()?;
        let accept = runtime.spawn(accept_loop(listener, handle));
        Ok((addr, Serving { accept, runtime: Some(runtime) }))
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.accept.abort();
        if let Some(runtime) = self.runtime.take() {
            // Allowed inside an async context, unlike dropping the runtime.
            runtime.shutdown_background();
        }
    }
}

impl Server {
    /// Starts a server on an ephemeral loopback port, counting `slices` slices
    /// and recording incoming attempts with `incoming` (route `/work`).
    pub async fn start(
        behaviour: Behaviour,
        slices: usize,
        incoming: IncomingRequests,
    ) -> std::io::Result<Server> {
        Self::start_observed(behaviour, slices, move |headers| {
            incoming.observe(headers, Some("/work"));
        })
        .await
    }

    /// Like [`start`](Self::start), showing `observe` the headers of every
    /// request before it is answered, instead of recording them.
    pub async fn start_observed(
        behaviour: Behaviour,
        slices: usize,
        observe: impl Fn(&HeaderMap) + Send + Sync + 'static,
    ) -> std::io::Result<Server> {
        let counters = Arc::new(Counters::new(slices));
        let workers = match behaviour.model {
            Model::Queue(o) => usize::try_from(o.workers.max(1)).unwrap_or(1),
            Model::Shed => 1,
        };
        let state = Arc::new(State {
            behaviour,
            started: Instant::now(),
            counters: Arc::clone(&counters),
            workers: Arc::new(Semaphore::new(workers)),
            waiting: Arc::new(AtomicUsize::new(0)),
        });
        let observe = Arc::new(observe);
        let (addr, serving) = Serving::start("storm-server", move |request: Request<Incoming>| {
            observe(request.headers());
            let state = Arc::clone(&state);
            async move { respond(state.answer().await) }
        })?;
        Ok(Server { addr, counters, _serving: serving })
    }
}

struct State {
    behaviour: Behaviour,
    started: Instant,
    counters: Arc<Counters>,
    /// One permit per worker; tokio's semaphore is fair, so the waiters form
    /// the FIFO queue.
    workers: Arc<Semaphore>,
    /// Requests queued or being served: bounded by `queue + workers`.
    waiting: Arc<AtomicUsize>,
}

impl State {
    async fn answer(self: Arc<Self>) -> StatusCode {
        let arrived = self.started.elapsed();
        let counted = self.counters.receive(arrived);
        match (self.behaviour.model, counted) {
            (Model::Shed, Some((slice, load))) => self.shed(slice, load, arrived),
            // Past the planned run: answer, but there is nothing left to count.
            (Model::Shed, None) => StatusCode::OK,
            // Still queued like any other: an instant answer here would be a
            // free success for the retries still going on at the end.
            (Model::Queue(overload), counted) => self.queue(overload, counted.map(|(slice, _)| slice)).await,
        }
    }

    fn in_outage(&self, at: Duration) -> bool {
        let b = self.behaviour;
        at >= b.outage_start && at < b.outage_start + b.outage_len
    }

    fn shed(&self, slice: usize, load: u32, arrived: Duration) -> StatusCode {
        let per_slice = (self.behaviour.capacity / 10).max(1);
        if self.in_outage(arrived) || load > per_slice {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            self.counters.serve(slice);
            StatusCode::OK
        }
    }

    async fn queue(self: Arc<Self>, overload: Overload, slice: Option<usize>) -> StatusCode {
        let bound = usize::try_from(overload.queue.saturating_add(overload.workers)).unwrap_or(usize::MAX);
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= bound {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return StatusCode::SERVICE_UNAVAILABLE;
        }
        // The work runs in its own task: a caller that times out closes its
        // connection, which would cancel the handler, but a real server does
        // not notice and works on the request anyway.
        let work = tokio::spawn(async move {
            let arrived = Instant::now();
            let status = match Arc::clone(&self.workers).acquire_owned().await {
                Ok(_worker) => {
                    tokio::time::sleep(overload.service).await;
                    // The dependency is down for the requests served during the outage.
                    if self.in_outage(self.started.elapsed()) {
                        StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        if let (true, Some(slice)) = (arrived.elapsed() <= overload.patience, slice) {
                            self.counters.serve(slice);
                        }
                        StatusCode::OK
                    }
                }
                // Never closed; if it were, refusing is the honest answer.
                Err(_) => StatusCode::SERVICE_UNAVAILABLE,
            };
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            status
        });
        work.await.unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

/// Accepts connections on `listener` and answers each request with `handle`,
/// until the task is aborted.
pub(crate) async fn accept_loop<H, F>(listener: TcpListener, handle: H)
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors under a storm: back off instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let response = handle(request);
                async move { Ok::<_, Infallible>(response.await) }
            });
            // A client that goes away mid-request is no concern of the server's.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// An empty response with `status`.
pub(crate) fn respond(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"")));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_model_serves_workers_per_service_time_and_a_full_queue_outwaits_the_callers() {
        let overload = Overload {
            workers: 15,
            service: Duration::from_millis(20),
            queue: 3_000,
            patience: Duration::from_secs(2),
        };
        assert!((overload.capacity() - 750.0).abs() < 1e-9);
        assert_eq!(overload.full_queue_wait(), Duration::from_secs(4));
        assert!(overload.full_queue_wait() > overload.patience, "the default queue can hold dead work");
    }
}
