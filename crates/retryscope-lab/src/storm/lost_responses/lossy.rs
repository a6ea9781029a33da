//! The server of the lost-responses storm: it executes every POST it is
//! handed, counting executions per logical operation, and then loses a share
//! of the responses on their way back — the connection dropped, or a 503 in
//! place of the answer — after the work was done.
//!
//! The loss sits in front of everything else, where a proxy or the network
//! loses responses: behind it, the operation ran and (behind the idempotency
//! layer) its response was stored. A handler that itself answered 503 after
//! committing would be run again: by default the layer frees the key of a
//! 5xx, taking it to say that the operation failed.
//!
//! Which attempts lose their response is a function of the seed, the
//! operation and the attempt's number at the server, so every policy meets
//! the same losses whatever the scheduling.

use crate::storm::server::respond;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry::metrics::Meter;
use retryscope_idempotency::{IDEMPOTENCY_REPLAYED, IdempotencyLayer, IdempotencyService, MemoryStore};
use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tower_layer::Layer;
use tower_service::Service;

/// The header the clients name their logical operation in: its number, from 0.
pub const OPERATION_HEADER: &str = "x-operation-id";

/// How one response is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// The connection is closed after the work, before any byte of the answer.
    Dropped,
    /// A 503 goes back instead of the answer.
    Unavailable,
}

/// What the server counted, per operation and in all.
#[derive(Debug)]
pub struct Ledger {
    /// Times each operation's work ran.
    executions: Vec<AtomicU32>,
    /// Attempts that reached the server, per operation.
    arrivals: Vec<AtomicU32>,
    /// Responses lost by closing the connection.
    pub dropped: AtomicU64,
    /// Responses lost by answering 503 instead.
    pub unavailable: AtomicU64,
    /// Answers the idempotency layer gave from its store (before any loss).
    pub replayed: AtomicU64,
    /// Answers that were neither the work's nor a replay (409, 422, …).
    pub refused: AtomicU64,
}

impl Ledger {
    fn new(operations: usize) -> Self {
        let zeros = || (0..operations).map(|_| AtomicU32::new(0)).collect();
        Ledger {
            executions: zeros(),
            arrivals: zeros(),
            dropped: AtomicU64::new(0),
            unavailable: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Times each operation ran, by operation number.
    pub fn executions(&self) -> Vec<u32> {
        self.executions.iter().map(|n| n.load(Ordering::Relaxed)).collect()
    }

    /// Attempts that reached the server, in all.
    pub fn arrivals(&self) -> u64 {
        self.arrivals.iter().map(|n| u64::from(n.load(Ordering::Relaxed))).sum()
    }
}

/// Where and how the server loses responses.
#[derive(Debug, Clone, Copy)]
pub struct Losses {
    /// The share of responses lost, in [0, 1).
    pub share: f64,
    /// Picks which ones.
    pub seed: u64,
}

impl Losses {
    /// Whether the `arrival`-th attempt (from 0) of operation `op` loses its
    /// response, and how: half of the losses each way.
    pub fn of(&self, op: usize, arrival: u32) -> Option<Loss> {
        let h = mix(self.seed ^ mix(((op as u64) << 32) | u64::from(arrival)));
        // 53 high bits for the draw, the lowest bit for the kind.
        let draw = (h >> 11) as f64 / (1u64 << 53) as f64;
        (draw < self.share).then_some(if h & 1 == 0 { Loss::Dropped } else { Loss::Unavailable })
    }
}

/// SplitMix64's finaliser: a well-spread 64-bit hash.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The running server; it stops when dropped.
#[derive(Debug)]
pub struct LossyServer {
    /// Where it listens, on 127.0.0.1.
    pub addr: SocketAddr,
    /// What it counted.
    pub ledger: Arc<Ledger>,
    accept: JoinHandle<()>,
}

impl Drop for LossyServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl LossyServer {
    /// Serves `operations` operations, behind the idempotency layer when
    /// `keyed` (reporting to `meter`, the storm's: `--prometheus` serves its
    /// `retryscope_idempotency_requests_total`), losing responses as `losses`
    /// says.
    pub async fn start(
        operations: usize,
        keyed: bool,
        losses: Losses,
        meter: &Meter,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let ledger = Arc::new(Ledger::new(operations));
        let work = Work { ledger: Arc::clone(&ledger) };
        let app = match keyed {
            true => App::Keyed(IdempotencyLayer::new(MemoryStore::default()).meter(meter).layer(work)),
            false => App::Plain(work),
        };
        let front = Front { app, ledger: Arc::clone(&ledger), losses };
        let accept = tokio::spawn(accept_loop(listener, front));
        Ok(LossyServer { addr, ledger, accept })
    }
}

/// Accepts connections until aborted; a connection whose response is to be
/// dropped is closed by dropping its hyper connection.
async fn accept_loop(listener: TcpListener, front: Front) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors: back off instead of spinning.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let front = front.clone();
        tokio::spawn(async move {
            let close = Arc::new(Notify::new());
            let closer = Arc::clone(&close);
            let service = service_fn(move |request: Request<Incoming>| {
                let (front, close) = (front.clone(), Arc::clone(&closer));
                async move { Ok::<_, Infallible>(front.answer(request, &close).await) }
            });
            let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            // A client that goes away mid-request is no concern of the server's.
            tokio::select! {
                _ = connection => {}
                () = close.notified() => {}
            }
        });
    }
}

/// The loss stage, in front of the application.
#[derive(Clone)]
struct Front {
    app: App,
    ledger: Arc<Ledger>,
    losses: Losses,
}

impl Front {
    async fn answer(&self, request: Request<Incoming>, close: &Notify) -> Response<Full<Bytes>> {
        let Some(op) = operation(&request).filter(|&op| op < self.ledger.arrivals.len()) else {
            return respond(StatusCode::BAD_REQUEST);
        };
        let arrival = self.ledger.arrivals[op].fetch_add(1, Ordering::Relaxed);
        // The whole answer, body included: the work is done, and stored.
        let answer = self.app.clone().call(request).await;
        if answer.headers().get(IDEMPOTENCY_REPLAYED).is_some_and(|v| v == "true") {
            self.ledger.replayed.fetch_add(1, Ordering::Relaxed);
        } else if !answer.status().is_success() {
            self.ledger.refused.fetch_add(1, Ordering::Relaxed);
        }
        match self.losses.of(op, arrival) {
            None => answer,
            Some(Loss::Unavailable) => {
                self.ledger.unavailable.fetch_add(1, Ordering::Relaxed);
                respond(StatusCode::SERVICE_UNAVAILABLE)
            }
            Some(Loss::Dropped) => {
                self.ledger.dropped.fetch_add(1, Ordering::Relaxed);
                close.notify_one();
                // The connection is closed before this answer is written.
                std::future::pending().await
            }
        }
    }
}

/// The operation a request names in [`OPERATION_HEADER`].
fn operation<B>(request: &Request<B>) -> Option<usize> {
    request.headers().get(OPERATION_HEADER)?.to_str().ok()?.parse().ok()
}

/// The application: the work alone, or behind the idempotency layer.
#[derive(Clone)]
enum App {
    Plain(Work),
    Keyed(IdempotencyService<Work, MemoryStore>),
}

impl App {
    /// The application's answer to `request`, its body read whole.
    async fn call(self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        match self {
            App::Plain(work) => collect(call(work, request).await).await,
            App::Keyed(service) => collect(call(service, request).await).await,
        }
    }
}

async fn call<S, B>(mut service: S, request: Request<B>) -> Result<S::Response, S::Error>
where
    S: Service<Request<B>>,
{
    poll_fn(|cx| service.poll_ready(cx)).await?;
    service.call(request).await
}

/// The answer with its body in memory; a failure to produce it is a 500.
async fn collect<B, E>(answer: Result<Response<B>, E>) -> Response<Full<Bytes>>
where
    B: Body<Data = Bytes>,
{
    let Ok(answer) = answer else { return respond(StatusCode::INTERNAL_SERVER_ERROR) };
    let (parts, body) = answer.into_parts();
    match body.collect().await {
        Ok(body) => Response::from_parts(parts, Full::new(body.to_bytes())),
        Err(_) => respond(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

/// The operation itself: counts one execution and answers 201 with it.
#[derive(Debug, Clone)]
struct Work {
    ledger: Arc<Ledger>,
}

impl<B: Send + 'static> Service<Request<B>> for Work {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let counted = operation(&request)
            .and_then(|op| self.ledger.executions.get(op))
            .map(|n| n.fetch_add(1, Ordering::Relaxed) + 1);
        Box::pin(async move {
            let Some(execution) = counted else { return Ok(respond(StatusCode::BAD_REQUEST)) };
            let mut response =
                Response::new(Full::new(Bytes::from(format!("{{\"execution\":{execution}}}"))));
            *response.status_mut() = StatusCode::CREATED;
            response.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_losses_hit_the_share_asked_for_half_of_them_each_way() {
        let losses = Losses { share: 0.3, seed: 42 };
        let draws: Vec<_> = (0..10_000).flat_map(|op| (0..3).map(move |a| losses.of(op, a))).collect();
        let lost = draws.iter().filter(|d| d.is_some()).count() as f64 / draws.len() as f64;
        assert!((lost - 0.3).abs() < 0.01, "{lost}");
        let dropped = draws.iter().filter(|d| **d == Some(Loss::Dropped)).count() as f64;
        let share_dropped = dropped / (lost * draws.len() as f64);
        assert!((share_dropped - 0.5).abs() < 0.02, "{share_dropped}");
        assert_eq!(losses.of(7, 1), losses.of(7, 1), "a function of its arguments");
        assert!(Losses { share: 0.0, seed: 1 }.of(7, 0).is_none());
    }
}
