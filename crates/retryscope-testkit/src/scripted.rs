//! The scripted HTTP dependency: a real HTTP/1.1 server on 127.0.0.1 that
//! plays a script of outcomes per path.
//!
//! Hand-rolled on tokio's TCP types rather than a framework because tests
//! need what frameworks make hard on purpose: closing a connection halfway
//! through a response, resetting it, or never answering at all. Every request
//! is recorded (with the time it arrived, on tokio's clock, paused or not),
//! and executions are counted per `x-request-id`, so tests can prove that no
//! unsafe request ran twice.
//!
//! ```
//! use retryscope_testkit::scripted::{Reply, Server};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let server = Server::start().await;
//! server.script("/inventory", [
//!     // A `Response`, made a `Reply` to sit beside the delayed one.
//!     Reply::status(503).header("retry-after", "1").into(),
//!     Reply::status(200).body("7 in stock").after(Duration::from_millis(5)),
//! ]);
//! let client = reqwest::Client::new();
//! let first = client.get(server.url("/inventory")).send().await.unwrap();
//! assert_eq!((first.status().as_u16(), first.headers()["retry-after"].to_str().unwrap()), (503, "1"));
//! let second = client.get(server.url("/inventory")).send().await.unwrap();
//! assert_eq!(second.text().await.unwrap(), "7 in stock");
//! assert_eq!(server.seen().len(), 2);
//! # }
//! ```
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted answer: a [`Response`] ([`Reply::status`], [`Reply::ok`],
/// [`Reply::with_header`], then [`header`](Response::header) and
/// [`body`](Response::body)), or a failure with no response ([`Reply::reset`],
/// [`Reply::stall`]); delay any of them with [`after`](Reply::after).
///
/// Headers and a body belong to a response only: the methods that set them
/// exist on [`Response`], so a reset or a stall given a header does not
/// compile (it would be a setting silently ignored).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Reply {
    /// A complete response with a status, extra headers and a body.
    Status(u16, Vec<(&'static str, String)>, &'static str),
    /// Half a status line and header block, then the connection closes.
    DropMidResponse,
    /// Read the request and never answer.
    Stall,
    /// Read the request, never answer, and record when the client closes the
    /// connection (see [`Server::closed`]): a cancelled HTTP/1.1 request.
    StallUntilClosed,
    /// Read the request, then reset the connection (TCP RST) without a byte
    /// of answer: what a crashed or overloaded proxy does.
    Reset,
    /// Wait this long after reading the request, then play the inner reply.
    After(Duration, Box<Reply>),
}

/// A complete scripted response, before it becomes a [`Reply`]: its status,
/// headers and body. Anything that takes a `Reply` takes it (`Into<Reply>`).
#[derive(Debug, Clone)]
#[must_use = "a response does nothing until it is scripted"]
pub struct Response {
    code: u16,
    headers: Vec<(&'static str, String)>,
    body: &'static str,
}

impl Response {
    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: &'static str) -> Self {
        self.body = body;
        self
    }

    /// This response, played `delay` after the request was read (on tokio's
    /// clock: instant under `tokio::time::pause()`).
    pub fn after(self, delay: Duration) -> Reply {
        Reply::from(self).after(delay)
    }
}

impl From<Response> for Reply {
    fn from(response: Response) -> Self {
        Reply::Status(response.code, response.headers, response.body)
    }
}

impl Reply {
    /// A response with this status, no extra header and an empty body.
    pub fn status(code: u16) -> Response {
        Response { code, headers: Vec::new(), body: "" }
    }

    /// 200 with this body.
    pub fn ok(body: &'static str) -> Response {
        Reply::status(200).body(body)
    }

    /// A response with this status and one header (`Retry-After`, say).
    pub fn with_header(code: u16, name: &'static str, value: impl Into<String>) -> Response {
        Reply::status(code).header(name, value)
    }

    /// The connection reset after the request is read.
    pub fn reset() -> Self {
        Reply::Reset
    }

    /// No answer, ever: the client's attempt timeout must cut it.
    pub fn stall() -> Self {
        Reply::Stall
    }

    /// This reply, played `delay` after the request was read (on tokio's
    /// clock: instant under `tokio::time::pause()`).
    #[must_use]
    pub fn after(self, delay: Duration) -> Self {
        Reply::After(delay, Box::new(self))
    }
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Seen {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The headers, names in lower case.
    pub headers: HashMap<String, String>,
    /// The bytes of the body as they came on the wire (chunked framing included).
    pub body_len: usize,
    /// When the whole request had been read, on tokio's clock (paused or not).
    pub at: tokio::time::Instant,
}

#[derive(Default)]
struct State {
    script: Mutex<HashMap<String, VecDeque<Reply>>>,
    seen: Mutex<Vec<Seen>>,
    /// Stalled requests whose connection the client closed, by path.
    closed: Mutex<Vec<String>>,
}

/// The running server; it stops when the test's runtime does. Clones share
/// the script and the record.
#[derive(Clone)]
pub struct Server {
    /// Where it listens (127.0.0.1, a free port).
    pub addr: std::net::SocketAddr,
    state: Arc<State>,
}

impl Server {
    /// Starts a server on a free loopback port; every path answers 200 `ok`
    /// until [`script`](Self::script) says otherwise.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound: a test cannot run without one.
    pub async fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("a bound listener's address");
        let state = Arc::new(State::default());
        let server = Server { addr, state: Arc::clone(&state) };
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&state)));
            }
        });
        server
    }

    /// Answers the next requests to `path` with `replies` (each a [`Reply`]
    /// or a [`Response`]), in order; afterwards 200.
    pub fn script<R: Into<Reply>>(&self, path: &str, replies: impl IntoIterator<Item = R>) {
        self.state
            .script
            .lock()
            .expect("server state")
            .insert(path.to_owned(), replies.into_iter().map(Into::into).collect());
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request read so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().expect("server state").clone()
    }

    /// The paths of the [`Reply::StallUntilClosed`] requests whose
    /// connection the client has closed.
    pub fn closed(&self) -> Vec<String> {
        self.state.closed.lock().expect("server state").clone()
    }

    /// How many times the server received requests carrying `x-request-id: id`.
    pub fn executions(&self, id: &str) -> usize {
        self.seen().iter().filter(|s| s.headers.get("x-request-id").map(String::as_str) == Some(id)).count()
    }

    /// The spec every test ends with: a non-idempotent request without an
    /// idempotency key, not explicitly marked safe, ran at most once.
    pub fn assert_no_unsafe_request_ran_twice(&self) {
        let mut counts: HashMap<String, usize> = HashMap::new();
        for s in self.seen() {
            let unsafe_method = matches!(s.method.as_str(), "POST" | "PATCH" | "CONNECT");
            let has_key = s.headers.contains_key("idempotency-key");
            let marked = s.headers.contains_key("x-marked-safe");
            if unsafe_method && !has_key && !marked {
                let id = s.headers.get("x-request-id").cloned().unwrap_or_default();
                *counts.entry(id).or_default() += 1;
            }
        }
        for (id, n) in counts {
            assert!(n <= 1, "unsafe request {id:?} was executed {n} times");
        }
    }
}

async fn serve(mut stream: TcpStream, state: Arc<State>) {
    let Some(seen) = read_request(&mut stream).await else { return };
    let reply = state
        .script
        .lock()
        .expect("server state")
        .get_mut(&seen.path)
        .and_then(VecDeque::pop_front)
        .unwrap_or_else(|| Reply::ok("ok").into());
    let path = seen.path.clone();
    state.seen.lock().expect("server state").push(seen);
    play(stream, reply, path, state).await;
}

async fn play(mut stream: TcpStream, mut reply: Reply, path: String, state: Arc<State>) {
    while let Reply::After(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    match reply {
        Reply::Status(code, headers, body) => {
            let mut head =
                format!("HTTP/1.1 {code} X\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
        }
        Reply::DropMidResponse => {
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-le").await;
            // Dropping the stream closes the connection in the middle of the headers.
        }
        Reply::Stall => std::future::pending::<()>().await,
        Reply::StallUntilClosed => {
            let mut rest = [0u8; 1024];
            // Whatever more the client sends is ignored; end of stream (or a
            // reset) is the client closing the connection.
            while let Ok(n) = stream.read(&mut rest).await {
                if n == 0 {
                    break;
                }
            }
            state.closed.lock().expect("server state").push(path);
        }
        Reply::Reset => {
            // A zero linger makes the close an RST rather than a FIN; with
            // zero it never blocks, which is what the deprecation warns of.
            #[allow(deprecated)]
            let _ = stream.set_linger(Some(Duration::ZERO));
        }
        Reply::After(..) => unreachable!("unwrapped above"),
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let (method, path) = (request_line.next()?.to_owned(), request_line.next()?.to_owned());
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers.get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    // Read the whole body before answering: closing a socket with unread data
    // makes the kernel reset the connection, which the client would see as an error.
    while if chunked { !buf.ends_with(b"0\r\n\r\n") } else { buf.len() < header_end + length } {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let path = path.split('?').next().unwrap_or_default().to_owned();
    let body_len = buf.len() - header_end;
    Some(Seen { method, path, headers, body_len, at: tokio::time::Instant::now() })
}
