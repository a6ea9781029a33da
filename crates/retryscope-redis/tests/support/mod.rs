//! A loopback HTTP/1.1 server that plays a rate-limited API, and the client
//! processes of a fleet (this test binary run again as `child`).

#![allow(dead_code)]

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Milliseconds since the Unix epoch: the one clock the processes of a test
/// on one machine share.
pub(crate) fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0))
}

/// How the server answers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode {
    /// The first request gets a 429 with `Retry-After: 2`; the rest 200.
    FirstThrottled,
    /// `limit` requests per fixed window of `window`, announced in OpenAI's
    /// headers (`x-ratelimit-remaining-requests`, `x-ratelimit-reset-requests`
    /// in milliseconds); beyond it a 429 with `retry-after-ms`.
    Quota { limit: u32, window: Duration },
    /// Down: every request gets a 503 (no `Retry-After`, so only the retry
    /// budget bounds the retries).
    Down,
}

/// One request the server answered: when (epoch ms) and with what.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen {
    pub(crate) at_ms: u64,
    pub(crate) status: u16,
    /// Whether the request was a retry: it carried the `retry-attempt`
    /// header the integrations send from the second attempt on.
    pub(crate) retry: bool,
}

pub(crate) struct Server {
    pub(crate) port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    pub(crate) async fn start(mode: Mode) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let port = listener.local_addr().expect("an address").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(Mutex::new((Instant::now(), 0u64, 0u32)));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (log, state) = (Arc::clone(&log), Arc::clone(&state));
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut read = BufReader::new(read);
                    loop {
                        let mut line = String::new();
                        let mut length = 0usize;
                        let mut retry = false;
                        // The request line and headers; GETs only.
                        loop {
                            line.clear();
                            match read.read_line(&mut line).await {
                                Ok(0) | Err(_) => return,
                                Ok(_) if line == "\r\n" => break,
                                Ok(_) => {
                                    let lower = line.to_ascii_lowercase();
                                    if let Some(v) = lower.strip_prefix("content-length:") {
                                        length = v.trim().parse().unwrap_or(0);
                                    }
                                    retry |= lower.starts_with("retry-attempt:");
                                }
                            }
                        }
                        let mut body = vec![0; length];
                        if read.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        let (status, headers) = answer(mode, &state);
                        log.lock().expect("not poisoned").push(Seen { at_ms: epoch_ms(), status, retry });
                        let reason = match status {
                            200 => "OK",
                            503 => "Service Unavailable",
                            _ => "Too Many Requests",
                        };
                        let response =
                            format!("HTTP/1.1 {status} {reason}\r\ncontent-length: 0\r\n{headers}\r\n");
                        if write.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self { port, seen }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/things", self.port)
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("not poisoned").clone()
    }
}

/// The status and headers of the next answer.
fn answer(mode: Mode, state: &Mutex<(Instant, u64, u32)>) -> (u16, String) {
    let mut state = state.lock().expect("not poisoned");
    let (start, window_seen, count) = &mut *state;
    match mode {
        Mode::Down => (503, String::new()),
        Mode::FirstThrottled => {
            *count += 1;
            if *count == 1 { (429, "retry-after: 2\r\n".to_owned()) } else { (200, String::new()) }
        }
        Mode::Quota { limit, window } => {
            let elapsed = start.elapsed();
            let index = (elapsed.as_nanos() / window.as_nanos()) as u64;
            if index != *window_seen {
                *window_seen = index;
                *count = 0;
            }
            let end = window * u32::try_from(index + 1).unwrap_or(u32::MAX);
            let reset_ms = end.saturating_sub(elapsed).as_millis().max(1);
            if *count < limit {
                *count += 1;
                let left = limit - *count;
                (
                    200,
                    format!(
                        "x-ratelimit-remaining-requests: {left}\r\nx-ratelimit-reset-requests: {reset_ms}ms\r\nx-ratelimit-limit-requests: {limit}\r\n"
                    ),
                )
            } else {
                (
                    429,
                    format!(
                        "x-ratelimit-remaining-requests: 0\r\nx-ratelimit-reset-requests: {reset_ms}ms\r\nretry-after-ms: {reset_ms}\r\n"
                    ),
                )
            }
        }
    }
}

/// One client process of the fleet: this test binary again, running the
/// ignored test `child` with its orders in the environment.
pub(crate) struct Replica {
    pub(crate) child: Child,
    stdin: ChildStdin,
    lines: tokio::io::Lines<BufReader<ChildStdout>>,
}

pub(crate) struct Orders<'a> {
    pub(crate) url: &'a str,
    pub(crate) redis: &'a str,
    pub(crate) quota: &'a str,
    /// `watch` (wait for a gate, then one call), `call` (`calls` calls) or
    /// `budget` (`calls` calls 25 ms apart through a retry budget, see
    /// `fleet.rs`).
    pub(crate) role: &'a str,
    pub(crate) calls: u32,
    pub(crate) replicas: u32,
    pub(crate) timeout_ms: u64,
    /// For `budget`: whether the budget's floor is shared with the fleet.
    pub(crate) share_budget: bool,
}

impl Replica {
    pub(crate) fn spawn(orders: &Orders<'_>) -> Self {
        let exe = std::env::current_exe().expect("the test binary");
        let mut child = Command::new(exe)
            .args(["child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env("RS_CHILD_URL", orders.url)
            .env("RS_CHILD_REDIS", orders.redis)
            .env("RS_CHILD_QUOTA", orders.quota)
            .env("RS_CHILD_ROLE", orders.role)
            .env("RS_CHILD_CALLS", orders.calls.to_string())
            .env("RS_CHILD_REPLICAS", orders.replicas.to_string())
            .env("RS_CHILD_TIMEOUT_MS", orders.timeout_ms.to_string())
            .env("RS_CHILD_SHARE_BUDGET", if orders.share_budget { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the child process starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        Self { child, stdin, lines }
    }

    /// What follows `tag ` on the next line that says it (the test
    /// harness's own lines are skipped), within `within`.
    pub(crate) async fn expect(&mut self, tag: &str, within: Duration) -> String {
        let prefix = format!("{tag} ");
        tokio::time::timeout(within, async {
            while let Ok(Some(line)) = self.lines.next_line().await {
                // The harness may have begun the line (`test child ... `).
                if let Some((_, rest)) = line.split_once(&prefix) {
                    return rest.to_owned();
                }
            }
            panic!("the child ended before saying {tag}");
        })
        .await
        .unwrap_or_else(|_| panic!("no {tag} from the child within {within:?}"))
    }

    pub(crate) async fn go(&mut self) {
        self.stdin.write_all(b"GO\n").await.expect("the child reads its orders");
        self.stdin.flush().await.expect("flushed");
    }
}

/// The Redis the fleet tests share (`RETRYSCOPE_REDIS_URL`): `None` skips a
/// test outside CI; in CI a missing one fails it.
pub(crate) fn redis_url() -> Option<String> {
    retryscope_test_support::external::required("RETRYSCOPE_REDIS_URL", "a Redis for fleet pacing")
}

/// A `redis-server` of this test's own, on a spare loopback port, so that
/// stopping it harms no other test.
pub(crate) struct OwnRedis {
    pub(crate) port: u16,
    process: Option<tokio::process::Child>,
}

impl OwnRedis {
    pub(crate) async fn start(port: u16) -> Self {
        let process = tokio::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server starts (apt-get install redis-server)");
        let url = format!("redis://127.0.0.1:{port}/");
        let client = redis::Client::open(url).expect("a URL");
        let started = Instant::now();
        while client.get_multiplexed_async_connection().await.is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "redis-server on {port} did not come up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self { port, process: Some(process) }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub(crate) async fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill().await.expect("redis-server stops");
        }
    }
}

/// A loopback port free now.
pub(crate) fn spare_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a port")
}

pub(crate) async fn until(what: &str, within: Duration, test: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !test() {
        assert!(started.elapsed() < within, "not {what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    started.elapsed()
}
