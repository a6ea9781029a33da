//! A restart of the service process between attempts, with the Redis store:
//! the request still runs once. The test binary is its own child: with
//! `IDEM_CHILD` set it serves the layer on 127.0.0.1 (printing `listening ADDR`
//! and one `executed` line per run of the handler); the parent sends, kills
//! and restarts it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use axum::Router;
use axum::routing::post;
use retryscope_idempotency::{IdempotencyLayer, RedisStore};

const CHILD: &str = "IDEM_CHILD";
const PREFIX: &str = "IDEM_PREFIX";
const LEASE: Duration = Duration::from_secs(1);
const PATIENCE: Duration = Duration::from_secs(20);

fn main() {
    if std::env::var_os(CHILD).is_some() {
        return serve_as_child();
    }
    let Some(url) = retryscope_test_support::external::required("RETRYSCOPE_REDIS_URL", "a Redis 7") else {
        return;
    };
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_nanos();
    let prefix = format!("test:restart:{nanos}:");
    a_response_lost_with_its_process_is_replayed_by_the_next_process(&url, &prefix);
    println!("test a_response_lost_with_its_process_is_replayed_by_the_next_process ... ok");
    a_process_that_dies_mid_request_holds_the_key_until_the_lease_ends(&url, &prefix);
    println!("test a_process_that_dies_mid_request_holds_the_key_until_the_lease_ends ... ok");
}

fn a_response_lost_with_its_process_is_replayed_by_the_next_process(url: &str, prefix: &str) {
    let mut first = Server::start(url, prefix);
    let mut stream = first.send("/orders", "\"restart-1\"", "sku=7");
    let mut status = [0u8; 12];
    stream.read_exact(&mut status).expect("the first bytes of the answer");
    assert_eq!(&status, b"HTTP/1.1 201");
    first.kill(); // the caller never reads the rest: the process and the response are gone
    drop(stream);
    assert_eq!(first.executions(), 1);

    let mut second = Server::start(url, prefix);
    let answer = second.request("/orders", "\"restart-1\"", "sku=7");
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("idempotency-replayed: true"), "{answer}");
    assert!(answer.ends_with("order in process 1"), "the first process's response: {answer}");
    second.kill();
    assert_eq!(second.executions(), 0, "the new process replays, it does not run the order again");
}

fn a_process_that_dies_mid_request_holds_the_key_until_the_lease_ends(url: &str, prefix: &str) {
    let mut first = Server::start(url, prefix);
    let mut stream = first.send("/crash", "\"restart-2\"", "");
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest); // the process aborts: no answer
    first.wait();
    assert_eq!(first.executions(), 1);

    let mut second = Server::start(url, prefix);
    let answer = second.request("/crash", "\"restart-2\"", "");
    assert!(answer.starts_with("HTTP/1.1 409"), "in flight until the lease ends: {answer}");
    assert_eq!(second.executions(), 0);

    // After the lease the key is free: the retry runs again (the documented
    // cost of a process dying mid-request; the lease bounds how long a key stays stuck).
    std::thread::sleep(LEASE + Duration::from_millis(500));
    let mut stream = second.send("/crash", "\"restart-2\"", "");
    let _ = stream.read_to_end(&mut rest);
    second.wait();
    assert_eq!(second.executions(), 1);
}

/// The child: the layer with a RedisStore around two handlers.
fn serve_as_child() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let url = std::env::var("RETRYSCOPE_REDIS_URL").expect("the parent passes the URL");
        let prefix = std::env::var(PREFIX).expect("the parent passes the prefix");
        let client = redis::Client::open(url).expect("a Redis URL");
        let store = RedisStore::connect(client).await.expect("Redis answers").prefix(prefix);
        let router = Router::new()
            .route("/orders", post(|| async { executed("order in process") }))
            .route("/crash", post(crash))
            .layer(IdempotencyLayer::new(store).lease(LEASE));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        println!("listening {}", listener.local_addr().expect("an address"));
        axum::serve(listener, router).await.expect("the server runs");
    });
}

/// Runs, then the process dies before the layer records the completion.
async fn crash() -> axum::http::StatusCode {
    executed("crash");
    std::process::abort()
}

fn executed(what: &str) -> (axum::http::StatusCode, String) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "executed").expect("stdout");
    stdout.flush().expect("stdout");
    (axum::http::StatusCode::CREATED, format!("{what} {n}"))
}

struct Server {
    child: Child,
    addr: SocketAddr,
    lines: mpsc::Receiver<String>,
    executions: usize,
}

impl Server {
    fn start(url: &str, prefix: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .env(CHILD, "1")
            .env("RETRYSCOPE_REDIS_URL", url)
            .env(PREFIX, prefix)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the child starts");
        let stdout = child.stdout.take().expect("piped");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let first = lines.recv_timeout(PATIENCE).expect("the child listens within 20 s");
        let addr = first
            .strip_prefix("listening ")
            .expect("the child says where it listens")
            .parse()
            .expect("an address");
        Self { child, addr, lines, executions: 0 }
    }

    fn send(&self, path: &str, key: &str, body: &str) -> TcpStream {
        let mut stream = TcpStream::connect(self.addr).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("a timeout");
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: {}\r\nidempotency-key: {key}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        stream.write_all(request.as_bytes()).expect("the request is sent");
        stream
    }

    fn request(&self, path: &str, key: &str, body: &str) -> String {
        let mut answer = String::new();
        self.send(path, key, body).read_to_string(&mut answer).expect("the answer");
        answer
    }

    fn kill(&mut self) {
        self.child.kill().expect("the child is killed");
        self.wait();
    }

    fn wait(&mut self) {
        self.child.wait().expect("the child ends");
    }

    /// The handler's runs in this process (read once it has ended).
    fn executions(&mut self) -> usize {
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
            if line == "executed" {
                self.executions += 1;
            }
        }
        self.executions
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
