//! Prometheus exposition (feature `prometheus`): a meter provider whose metrics
//! are read by a Prometheus registry, rendered in the text format and optionally
//! served on `GET /metrics` by a small hyper server.
//!
//! Series names follow opentelemetry-prometheus: dots become underscores,
//! counters get `_total`, the unit `s` becomes `_seconds`, and curly-brace
//! units such as `{request}` add no suffix, giving exactly the names in the last
//! column of the [telemetry contract] (`retryscope_requests_total`,
//! `retryscope_attempt_duration_seconds_bucket`, `retryscope_breaker_state`, ...).
//!
//! [telemetry contract]: https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md

use crate::observer::{OtelObserver, scope};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_prometheus::PrometheusExporter;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, SdkMeterProvider};
use prometheus::{Registry, TextEncoder};
use std::convert::Infallible;
use std::error::Error;
use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::task::JoinSet;

/// How long a scraper may take to send its request head; a slow or silent
/// client is disconnected after that.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may last, answer included.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head the server accepts; a scrape's is a few hundred
/// bytes. Longer heads are refused with `431` and the connection closed.
const MAX_REQUEST_HEAD: usize = 8 * 1024;
/// The most connections served at once; further ones are closed on accept
/// until a slot frees up.
const MAX_CONNECTIONS: usize = 32;
/// The pause after a failed `accept` (e.g. out of file descriptors), so that
/// the error does not turn into a busy loop.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

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
        let provider = meters(
            SdkMeterProvider::builder()
                .with_reader(reader(&registry)?)
                .with_resource(Resource::builder().build()),
        )
        .build();
        Ok(Self { registry, provider })
    }

    /// The metrics `registry` holds, read by `provider` (which has a
    /// [`reader`] on that registry).
    #[cfg(feature = "otlp")]
    pub(crate) fn from_parts(registry: Registry, provider: SdkMeterProvider) -> Self {
        Self { registry, provider }
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
            .map_err(|e| PrometheusSetupError { what: "cannot render", source: Box::new(e) })
    }

    /// The answer to a scrape: [`render`](Self::render)'s text with the
    /// Prometheus content type, or `500` with the error. Mount it on the
    /// service's own router, no server of this crate needed; an
    /// `http::Response<String>` is a response for axum and hyper alike.
    ///
    /// With axum:
    ///
    /// ```no_run
    /// use axum::routing::get;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let metrics = retryscope_otel::PrometheusMetrics::new()?;
    /// let observer = metrics.observer(); // `.observe(observer.clone())` on retries
    /// # drop(observer);
    /// let app: axum::Router = axum::Router::new()
    ///     .route("/metrics", get(move || async move { metrics.scrape() }));
    /// # drop(app);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// With hyper, in a `service_fn`: `Ok::<_, Infallible>(metrics.scrape())`.
    pub fn scrape(&self) -> http::Response<String> {
        match self.render() {
            Ok(text) => {
                let mut response = Response::new(text);
                response
                    .headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static(prometheus::TEXT_FORMAT));
                response
            }
            Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
        }
    }

    /// Serves [`render`](Self::render) on `GET /metrics` at `addr` from a
    /// background thread, until the returned server is dropped.
    ///
    /// Built to face untrusted clients: connections are served concurrently (at
    /// most 32 at once, one request each; more are closed on accept), a client
    /// gets 5 s to send a request head of at most 8 KiB (a longer one is
    /// answered `431`), and no connection outlives 30 s. A slow or oversized
    /// request costs its own connection, never a scrape on another one.
    ///
    /// # Errors
    ///
    /// Binding `addr` or starting the server's thread failed.
    pub fn serve(&self, addr: impl ToSocketAddrs) -> io::Result<MetricsServer> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let local_addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
        let (stop, stopped) = oneshot::channel();
        let metrics = self.clone();
        let thread = std::thread::Builder::new().name("retryscope-metrics".into()).spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => accept_loop(listener, metrics, stopped).await,
                    Err(e) => tracing::warn!(error = %e, "the metrics server could not start"),
                }
            });
        })?;
        Ok(MetricsServer { local_addr, stop: Some(stop), thread: Some(thread) })
    }
}

/// Accepts connections until `stop` fires (or its sender is dropped), serving
/// each on its own task; the tasks end with the loop.
async fn accept_loop(listener: TcpListener, metrics: PrometheusMetrics, mut stop: oneshot::Receiver<()>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => return,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => match slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        connections.spawn(serve_connection(stream, metrics.clone(), slot));
                    }
                    // Full: closing at once costs nothing and tells the client.
                    Err(_) => drop(stream),
                },
                Err(_) => tokio::time::sleep(ACCEPT_ERROR_PAUSE).await,
            },
        }
    }
}

/// Serves one request on `stream`, within the limits of [`PrometheusMetrics::serve`].
async fn serve_connection(stream: TcpStream, metrics: PrometheusMetrics, _slot: OwnedSemaphorePermit) {
    let service = service_fn(move |request: Request<Incoming>| {
        let response = answer(&metrics, &request);
        async move { Ok::<_, Infallible>(response) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_header_size(MAX_REQUEST_HEAD)
        .max_buf_size(MAX_REQUEST_HEAD.max(8_192) * 2)
        .keep_alive(false)
        // Scrapers do not care, but people reading with curl -v do.
        .title_case_headers(true)
        .serve_connection(TokioIo::new(stream), service);
    // Errors (a client gone, a head too large or too slow) concern this
    // connection only; hyper has already answered what can be answered.
    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
}

/// The answer to one request: the metrics for `GET /metrics`, 404 for other
/// paths, 405 for other methods on `/metrics`.
fn answer(metrics: &PrometheusMetrics, request: &Request<Incoming>) -> Response<String> {
    if request.uri().path() != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "not found\n");
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    metrics.scrape()
}

fn plain(status: StatusCode, body: &str) -> Response<String> {
    let mut response = Response::new(body.to_owned());
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// A Prometheus reader on `registry`, for a meter provider.
pub(crate) fn reader(registry: &Registry) -> Result<PrometheusExporter, PrometheusSetupError> {
    opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .build()
        .map_err(|e| PrometheusSetupError { what: "cannot build", source: Box::new(e) })
}

/// A running `GET /metrics` server; dropping it stops the server.
#[derive(Debug)]
pub struct MetricsServer {
    local_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
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
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The Prometheus exporter could not be built or could not render; the
/// exporter's or encoder's error is the [`source`](Error::source).
#[derive(Debug)]
pub struct PrometheusSetupError {
    /// What failed: building or rendering.
    what: &'static str,
    source: Box<dyn Error + Send + Sync + 'static>,
}

impl fmt::Display for PrometheusSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The cause is the source, not repeated here.
        write!(f, "prometheus exporter: {}", self.what)
    }
}

impl Error for PrometheusSetupError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}
