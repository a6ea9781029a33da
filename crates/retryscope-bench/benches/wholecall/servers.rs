//! The servers, each in a process of its own, and the client's handle on them.
//!
//! `serve-http` is a hyper HTTP/1.1 server: `GET /ok` answers 200; `GET
//! /fail-once/N` answers 503 the first time it sees `N` and 200 when asked
//! again (a retry), and `/fail-once-retry-after/N` does the same with
//! `Retry-After: 0` on the 503. `serve-grpc` is a tonic server answering
//! `test.Echo/Unary` (the test-support client's method) with the request's
//! message; a message `fail-once-N` is answered `UNAVAILABLE` the first time.
//!
//! "The first time" is kept in [`FailOnce`]: the last failed `N` per slot
//! `N mod` [`SLOTS`], which is enough because each logical call has a new `N`
//! and fewer than [`SLOTS`] calls are in flight at once (one at a time in the
//! counted variants; a few at 1,000 calls/s in `reload-load`).
//!
//! Each prints its address on its first line of stdout and exits when its
//! stdin closes, so a server never outlives the client that spawned it.

use crate::CallError;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use retryscope_test_support::echo::{EchoReply, EchoRequest};
use std::convert::Infallible;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::net::TcpListener;

/// The environment variable naming the CPUs the servers run on (`taskset -c`
/// syntax), for wall-time runs that pin the client elsewhere.
const SERVER_CPUS: &str = "WHOLECALL_SERVER_CPUS";

/// The servers the client spawned; dropping this stops them.
pub(crate) struct Servers {
    pub(crate) http: SocketAddr,
    pub(crate) grpc: SocketAddr,
    children: Vec<(Child, Option<ChildStdin>)>,
}

impl Servers {
    /// Spawns both servers and waits for their addresses.
    pub(crate) fn start() -> Result<Self, CallError> {
        let mut servers = Servers { http: unspecified(), grpc: unspecified(), children: Vec::new() };
        servers.http = servers.spawn("serve-http")?;
        servers.grpc = servers.spawn("serve-grpc")?;
        Ok(servers)
    }

    fn spawn(&mut self, mode: &str) -> Result<SocketAddr, CallError> {
        let exe = std::env::current_exe()?;
        let mut command = match std::env::var(SERVER_CPUS) {
            Ok(cpus) => {
                let mut taskset = Command::new("taskset");
                taskset.arg("-c").arg(cpus).arg(&exe);
                taskset
            }
            Err(_) => Command::new(&exe),
        };
        let mut child = command.arg(mode).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        self.children.push((child, stdin));
        let Some(stdout) = stdout else { return Err("a server without stdout".into()) };
        let mut line = String::new();
        // Bounded: an address is short, and the server prints it first.
        BufReader::new(stdout.take(256)).read_line(&mut line)?;
        Ok(line.trim().parse().map_err(|e| format!("{mode} printed {line:?}: {e}"))?)
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for (mut child, stdin) in self.children.drain(..) {
            // Closing stdin asks the server to exit; kill it in case it cannot.
            drop(stdin);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn unspecified() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Prints the address, then exits when stdin closes (the client is gone).
fn announce(addr: SocketAddr) -> Result<(), CallError> {
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{addr}")?;
    stdout.flush()?;
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    Ok(())
}

fn server_runtime() -> Result<tokio::runtime::Runtime, CallError> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// `wholecall serve-http`.
pub(crate) fn serve_http() -> Result<(), CallError> {
    server_runtime()?.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        announce(listener.local_addr()?)?;
        let failed = Arc::new(FailOnce::new());
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            let failed = Arc::clone(&failed);
            let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                std::future::ready(Ok::<_, Infallible>(answer(&request, &failed)))
            });
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    })
}

/// Slots of [`FailOnce`]: far more than the calls in flight at once.
const SLOTS: usize = 4096;

/// Which call numbers were answered with a failure: a logical call's first
/// attempt fails, its retry (the same `N`) succeeds. Bounded: one atomic per slot.
pub(crate) struct FailOnce {
    last: Box<[AtomicU64]>,
}

impl FailOnce {
    fn new() -> Self {
        Self { last: (0..SLOTS).map(|_| AtomicU64::new(u64::MAX)).collect() }
    }

    /// Whether attempt at call `n` is its first (and so is failed).
    fn first(&self, n: u64) -> bool {
        // `SLOTS` fits any usize, and the remainder is below it.
        let slot = (n % SLOTS as u64) as usize;
        self.last[slot].swap(n, Ordering::Relaxed) != n
    }
}

fn answer<B>(request: &Request<B>, failed: &FailOnce) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let scripted = [("/fail-once/", false), ("/fail-once-retry-after/", true)].into_iter().find_map(
        |(prefix, retry_after)| Some((path.strip_prefix(prefix)?.parse::<u64>().ok()?, retry_after)),
    );
    let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
    match scripted {
        Some((n, retry_after)) if failed.first(n) => {
            // An empty body: the connection is reusable as soon as the head is read.
            *response.body_mut() = Full::new(Bytes::new());
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            if retry_after {
                response.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("0"));
            }
        }
        Some(_) => {}
        None if path == "/ok" => {}
        None => *response.status_mut() = StatusCode::NOT_FOUND,
    }
    response
}

/// `wholecall serve-grpc`.
pub(crate) fn serve_grpc() -> Result<(), CallError> {
    server_runtime()?.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        announce(listener.local_addr()?)?;
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let echo = Echo { failed: Arc::new(FailOnce::new()) };
        tonic::transport::Server::builder().serve_with_incoming(echo, incoming).await?;
        Ok(())
    })
}

/// `test.Echo/Unary`, answered with the request's message (`fail-once-N`:
/// `UNAVAILABLE` the first time); nothing else recorded, so the server's
/// memory stays flat however long a wall-time run goes.
#[derive(Clone)]
struct Echo {
    failed: Arc<FailOnce>,
}

/// The message prefix of a call whose first attempt fails.
pub(crate) const GRPC_FAIL_ONCE: &str = "fail-once-";

struct Unary {
    failed: Arc<FailOnce>,
}

impl tonic::server::UnaryService<EchoRequest> for Unary {
    type Response = EchoReply;
    type Future = std::future::Ready<Result<tonic::Response<EchoReply>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<EchoRequest>) -> Self::Future {
        let message = request.into_inner().message;
        let n = message.strip_prefix(GRPC_FAIL_ONCE).and_then(|n| n.parse::<u64>().ok());
        std::future::ready(match n {
            Some(n) if self.failed.first(n) => Err(tonic::Status::unavailable("the first attempt fails")),
            _ => Ok(tonic::Response::new(EchoReply { message })),
        })
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Echo {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let failed = Arc::clone(&self.failed);
        Box::pin(async move {
            Ok(match request.uri().path() {
                "/test.Echo/Unary" => {
                    let codec = tonic_prost::ProstCodec::<EchoReply, EchoRequest>::default();
                    tonic::server::Grpc::new(codec).unary(Unary { failed }, request).await
                }
                _ => tonic::Status::unimplemented("no such method").into_http(),
            })
        })
    }
}
