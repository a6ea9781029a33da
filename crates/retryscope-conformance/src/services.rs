//! The services the README's and the guide's doctests say they need, started
//! the way CI provides them: a real collector (rotel, `RETRYSCOPE_ROTEL`),
//! PostgreSQL (`RETRYSCOPE_POSTGRES_URL`), Redis (`RETRYSCOPE_REDIS_URL`), a
//! nats-server with JetStream (`RETRYSCOPE_NATS_URL`), and
//! the loopback servers their text describes. Without one of the variables a
//! doctest prints `skipped: … not set` and passes, except under `CI`.

use retryscope_test_support::echo::{Behaviour, EchoServer};
use retryscope_test_support::{Reply, Server, external, rotel};
use sqlx::Executor as _;

pub use retryscope_test_support::rotel::Collector;

/// A rotel collector on free loopback ports, with the standard variables
/// pointing at it: `OTEL_EXPORTER_OTLP_ENDPOINT` (OTLP/HTTP) and
/// `OTEL_SERVICE_NAME` (`tag`). `None` when `RETRYSCOPE_ROTEL` is not set.
///
/// Call it first in `main`, before any other thread exists: it sets the
/// process environment, as a user's shell would have.
pub fn collector(tag: &str) -> Option<Collector> {
    let binary = rotel::binary()?;
    let collector = Collector::start(&binary, tag);
    // SAFETY: the doctest calls this before it starts a runtime or any thread,
    // so nothing reads the environment while it changes.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{}", collector.http));
        std::env::set_var("OTEL_SERVICE_NAME", tag);
    }
    Some(collector)
}

/// A loopback HTTP server whose `/inventory` answers 503, then `7 in stock`.
pub async fn inventory() -> Server {
    let server = Server::start().await;
    server.script("/inventory", [Reply::status(503), Reply::ok("7 in stock")]);
    server
}

/// A loopback HTTP server whose `/inventory` answers 503 twice, then `7 in stock`.
pub async fn inventory_recovering() -> Server {
    let server = Server::start().await;
    server.script("/inventory", [Reply::status(503), Reply::status(503), Reply::ok("7 in stock")]);
    server
}

/// A loopback HTTP server whose `/inventory` is down: it answers 503 to its
/// next 16 requests.
pub async fn inventory_down() -> Server {
    let server = Server::start().await;
    server.script("/inventory", (0..16).map(|_| Reply::status(503)));
    server
}

/// The dependency name the retry layers give `server`: its `host:port`.
pub fn dependency_of(server: &Server) -> String {
    server.url("/").trim_start_matches("http://").trim_end_matches('/').to_owned()
}

/// A loopback `helloworld.Greeter` that answers `UNAVAILABLE` twice, then
/// echoes the greeting.
pub async fn greeter() -> EchoServer {
    EchoServer::start(vec![Behaviour::Fail(tonic::Code::Unavailable, None); 2]).await
}

/// The PostgreSQL server named by `RETRYSCOPE_POSTGRES_URL`.
pub fn postgres_url() -> Option<String> {
    external::required(
        "RETRYSCOPE_POSTGRES_URL",
        "a PostgreSQL superuser's URL; `bash scripts/postgres.sh start` prints one",
    )
}

/// A fresh schema `schema` on `url` holding the table the guide's transfer
/// moves money between (`accounts`: ids 1 and 2, 100 each); the URL whose
/// connections work in it.
pub async fn accounts(url: &str, schema: &str) -> Result<String, sqlx::Error> {
    let tables = "CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL);
                  INSERT INTO accounts VALUES (1, 100), (2, 100)";
    postgres_schema(url, schema, tables).await
}

/// A fresh schema `schema` on `url` (dropped first if an earlier run left it)
/// in which `tables` (SQL) has run; the URL whose connections work in it.
pub async fn postgres_schema(url: &str, schema: &str, tables: &str) -> Result<String, sqlx::Error> {
    let admin = sqlx::PgPool::connect(url).await?;
    admin
        .execute(
            format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; SET search_path = {schema}; {tables}")
                .as_str(),
        )
        .await?;
    admin.close().await;
    let separator = if url.contains('?') { '&' } else { '?' };
    Ok(format!("{url}{separator}options=-c%20search_path%3D{schema}"))
}

/// The Redis server (7.0 or later) named by `RETRYSCOPE_REDIS_URL`.
pub fn redis_url() -> Option<String> {
    external::required("RETRYSCOPE_REDIS_URL", "a Redis 7 URL, redis://127.0.0.1:6379/")
}

/// The nats-server (2.9 or later, started with `-js`) named by `RETRYSCOPE_NATS_URL`.
pub fn nats_url() -> Option<String> {
    external::required(
        "RETRYSCOPE_NATS_URL",
        "a nats-server 2.9+ with JetStream (-js), nats://127.0.0.1:4222",
    )
}

/// `prefix` and the current time in nanoseconds: a stream name no earlier run
/// used (JetStream keeps streams, and their de-duplication windows, across runs).
pub fn fresh_name(prefix: &str) -> String {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}_{nanos}")
}

/// What a fmt layer wrote, for the guide's log examples: a `MakeWriter` over a
/// shared buffer (clones write to the same one).
#[derive(Clone, Default)]
pub struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogBuffer {
    /// The lines written so far.
    pub fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).lines().map(str::to_owned).collect()
    }
}

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// A loopback HTTP server whose accept queue is full until `accepts_from`, so
/// that the kernel drops the SYNs of new connects (and resends them only after
/// its 1 s initial retransmission timeout), as under a SYN flood or behind a
/// firewall; from then on it answers every request `200 ok`, whatever its method. For the connect
/// limit's doctest and tests.
pub struct SynDropping {
    addr: std::net::SocketAddr,
    answered: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl SynDropping {
    /// Starts it; panics if the kernel never stops completing connects to a
    /// listener whose accept queue is full (the test would prove nothing).
    pub async fn start(accepts_from: std::time::Duration) -> SynDropping {
        use std::sync::atomic::Ordering;
        use std::time::Duration;
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind");
        let listener = socket.listen(1).expect("listen");
        let addr = listener.local_addr().expect("address");
        // Fill the accept queue: the first connect the kernel no longer
        // completes at once is the proof that it drops SYNs now.
        let mut queued = Vec::new();
        let full = loop {
            match tokio::time::timeout(Duration::from_millis(100), tokio::net::TcpStream::connect(addr)).await
            {
                Ok(Ok(stream)) => queued.push(stream),
                Ok(Err(error)) => panic!("loopback connect failed: {error}"),
                Err(_) => break true,
            }
            if queued.len() > 64 {
                break false;
            }
        };
        assert!(full, "the accept queue never filled: this kernel does not drop SYNs to a full listener");
        let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = std::sync::Arc::clone(&answered);
        tokio::spawn(async move {
            tokio::time::sleep(accepts_from).await;
            drop(queued);
            let app = axum::Router::new().route(
                "/",
                axum::routing::any(move || async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    "ok"
                }),
            );
            axum::serve(listener, app).await.expect("serve");
        });
        SynDropping { addr, answered }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The requests it answered.
    pub fn answered(&self) -> usize {
        self.answered.load(std::sync::atomic::Ordering::SeqCst)
    }
}
