//! Prometheus exposition (feature `prometheus`): a meter provider whose metrics
//! are read by a Prometheus registry, rendered in the text format and optionally
//! served on `GET /metrics` by a tiny std-only HTTP server.
//!
//! Series names follow opentelemetry-prometheus: dots become underscores,
//! counters get `_total`, the unit `s` becomes `_seconds`, and curly-brace
//! units such as `{request}` add no suffix, giving exactly the names in the last
//! column of the [telemetry contract] (`retryscope_requests_total`,
//! `retryscope_attempt_duration_seconds_bucket`, `retryscope_breaker_state`, ...).
//!
//! [telemetry contract]: https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md

use crate::observer::{OtelObserver, scope};
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, SdkMeterProvider};
use prometheus::{Registry, TextEncoder};
use std::error::Error;
use std::fmt;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long the server waits for a scraper to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head the server reads; a scrape's is a few hundred bytes.
const MAX_REQUEST_LINES: usize = 100;

/// A meter provider exporting to a Prometheus registry.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use retryscope_otel::PrometheusMetrics;
///
/// let metrics = PrometheusMetrics::new()?;
/// let observer = metrics.observer();
/// // ... `.observe(observer.clone())` on retries ...
/// # drop(observer);
/// let server = metrics.serve("127.0.0.1:0")?;
/// println!("scrape http://{}/metrics", server.local_addr());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PrometheusMetrics {
    registry: Registry,
    provider: SdkMeterProvider,
}

impl PrometheusMetrics {
    /// A new registry and a meter provider reading into it. The resource comes
    /// from `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` (exposed as
    /// `target_info`).
    pub fn new() -> Result<Self, PrometheusSetupError> {
        Self::with_readers(|meters| meters)
    }

    /// Like [`new`](Self::new), letting `meters` add to the meter provider before
    /// it is built — e.g. a second reader that feeds an in-process report.
    pub fn with_readers(
        meters: impl FnOnce(MeterProviderBuilder) -> MeterProviderBuilder,
    ) -> Result<Self, PrometheusSetupError> {
        let registry = Registry::new();
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .build()
            .map_err(|e| PrometheusSetupError(e.to_string()))?;
        let provider = meters(
            SdkMeterProvider::builder().with_reader(exporter).with_resource(Resource::builder().build()),
        )
        .build();
        Ok(Self { registry, provider })
    }

    /// The meter provider, e.g. to set it as the global one.
    pub fn meter_provider(&self) -> &SdkMeterProvider {
        &self.provider
    }

    /// A meter with this crate's instrumentation scope.
    pub fn meter(&self) -> Meter {
        self.provider.meter_with_scope(scope())
    }

    /// An observer recording into this provider.
    pub fn observer(&self) -> OtelObserver {
        OtelObserver::from_meter(&self.meter())
    }

    /// The current metrics in the Prometheus text exposition format.
    pub fn render(&self) -> Result<String, PrometheusSetupError> {
        TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .map_err(|e| PrometheusSetupError(e.to_string()))
    }

    /// Serves [`render`](Self::render) on `GET /metrics` at `addr` from a
    /// background thread, until the returned server is dropped.
    ///
    /// Scrapes are answered one at a time: this is an endpoint for a Prometheus
    /// server, not a general web server.
    pub fn serve(&self, addr: impl ToSocketAddrs) -> io::Result<MetricsServer> {
        let listener = TcpListener::bind(addr)?;
        let local_addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let metrics = self.clone();
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("retryscope-metrics".into())
            .spawn(move || accept_loop(&listener, &metrics, &stopping))?;
        Ok(MetricsServer { local_addr, stop, thread: Some(thread) })
    }
}

fn accept_loop(listener: &TcpListener, metrics: &PrometheusMetrics, stop: &AtomicBool) {
    for stream in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        // A broken scrape must not stop the server.
        if let Ok(stream) = stream {
            let _ = respond(stream, metrics);
        }
    }
}

fn respond(mut stream: TcpStream, metrics: &PrometheusMetrics) -> io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let target = read_request_target(&stream)?;
    let (status, content_type, body) = match target.as_deref() {
        Some("/metrics") => match metrics.render() {
            Ok(text) => ("200 OK", prometheus::TEXT_FORMAT, text),
            Err(e) => ("500 Internal Server Error", "text/plain", e.to_string()),
        },
        _ => ("404 Not Found", "text/plain", "not found\n".to_owned()),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()?;
    stream.shutdown(Shutdown::Write)
}

/// The path of a `GET` request (query ignored), reading the whole request head.
fn read_request_target(stream: &TcpStream) -> io::Result<Option<String>> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let target = match (parts.next(), parts.next()) {
        (Some("GET"), Some(target)) => target.split('?').next().map(str::to_owned),
        _ => None,
    };
    // Drain the headers so that closing the socket does not reset the connection
    // before the scraper reads the answer.
    for _ in 0..MAX_REQUEST_LINES {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    Ok(target)
}

/// A running `GET /metrics` server; dropping it stops the server.
#[derive(Debug)]
pub struct MetricsServer {
    local_addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The address the server listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // `accept` has no timeout: a connection of our own wakes it up to see the flag.
        let _ = TcpStream::connect(self.local_addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The Prometheus exporter could not be built or could not render.
#[derive(Debug)]
pub struct PrometheusSetupError(String);

impl fmt::Display for PrometheusSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "prometheus exporter: {}", self.0)
    }
}

impl Error for PrometheusSetupError {}
