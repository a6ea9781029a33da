//! The struggling service: an HTTP server on loopback with a capacity and an outage.
//!
//! Above its capacity (requests per second, enforced per 100 ms slice) it sheds
//! load with 503; during the outage it answers 503 to everything. It counts what
//! it receives per slice — that is the "server load" the storm report shows, as
//! the server saw it, independent of any client-side telemetry — and records
//! each request in `retryscope.server.requests` by the attempt its caller says
//! it is.

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use retryscope_otel::IncomingRequests;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The resolution of the server's accounting and of the storm's time series.
pub const SLICE: Duration = Duration::from_millis(100);

/// How the server behaves over time.
#[derive(Debug, Clone, Copy)]
pub struct Behaviour {
    /// Requests per second served before shedding load.
    pub capacity: u32,
    /// When the outage starts, from the server's start.
    pub outage_start: Duration,
    /// How long the outage lasts.
    pub outage_len: Duration,
}

/// Per-slice counters, shared by every connection.
#[derive(Debug)]
pub struct Counters {
    received: Vec<AtomicU32>,
    served: Vec<AtomicU32>,
}

impl Counters {
    fn new(slices: usize) -> Self {
        let zeros = || (0..slices).map(|_| AtomicU32::new(0)).collect();
        Self { received: zeros(), served: zeros() }
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

/// A running server; dropping it stops accepting connections.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it saw.
    pub counters: Arc<Counters>,
    accept: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Server {
    /// Starts a server on an ephemeral loopback port, counting `slices` slices
    /// and recording incoming attempts with `incoming`.
    pub async fn start(
        behaviour: Behaviour,
        slices: usize,
        incoming: IncomingRequests,
    ) -> std::io::Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let counters = Arc::new(Counters::new(slices));
        let state =
            Arc::new(State { behaviour, started: Instant::now(), counters: Arc::clone(&counters), incoming });
        let accept = tokio::spawn(accept_loop(listener, state));
        Ok(Server { addr, counters, accept })
    }
}

struct State {
    behaviour: Behaviour,
    started: Instant,
    counters: Arc<Counters>,
    incoming: IncomingRequests,
}

impl State {
    fn answer(&self) -> StatusCode {
        let elapsed = self.started.elapsed();
        let slice = usize::try_from(elapsed.as_millis() / SLICE.as_millis()).unwrap_or(usize::MAX);
        let (Some(received), Some(served)) =
            (self.counters.received.get(slice), self.counters.served.get(slice))
        else {
            // Past the planned run: answer, but there is nothing left to count.
            return StatusCode::OK;
        };
        let load = received.fetch_add(1, Ordering::Relaxed) + 1;
        let b = self.behaviour;
        let in_outage = elapsed >= b.outage_start && elapsed < b.outage_start + b.outage_len;
        let per_slice = (b.capacity / 10).max(1);
        if in_outage || load > per_slice {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            served.fetch_add(1, Ordering::Relaxed);
            StatusCode::OK
        }
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors under a storm: back off instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                state.incoming.observe(request.headers(), Some("/work"));
                let status = state.answer();
                async move { Ok::<_, Infallible>(respond(status)) }
            });
            // A client that goes away mid-request is no concern of the server's.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

fn respond(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"")));
    *response.status_mut() = status;
    response
}
