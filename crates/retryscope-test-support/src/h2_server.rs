//! A raw HTTP/2 server on 127.0.0.1 (the `h2` crate, no gRPC library) for the
//! answers a tonic server will not give: a stream reset with a chosen reason,
//! or an HTTP error whose body does not end. It plays a script, one answer per
//! stream, then answers a gRPC OK; and it records each stream it saw and when
//! the client reset it. [`H2Server::start_after_goaways`] first answers some
//! connections with a graceful `GOAWAY` that leaves their first stream unprocessed.

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::net::TcpListener;

/// What the server does with one stream.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A gRPC OK: headers, one `EchoReply` with this message, `grpc-status: 0`.
    Ok(&'static str),
    /// `RST_STREAM` with this reason, before any response.
    Reset(h2::Reason),
    /// A Trailers-Only gRPC answer with this `grpc-status`.
    TrailersOnly(u8),
    /// This HTTP status (no `grpc-status`), then a body of `bytes` that does
    /// not end: the stream stays open until the client resets it.
    StatusWithEndlessBody(StatusCode, usize),
}

/// One stream as the server saw it.
#[derive(Debug, Clone)]
pub struct Stream {
    pub path: String,
    pub previous_attempts: Option<String>,
    pub timeout: Option<String>,
    pub at: Instant,
    /// When the client reset the stream, for an answer that left it open.
    pub reset_at: Option<Instant>,
}

#[derive(Default)]
struct State {
    script: Mutex<VecDeque<Answer>>,
    streams: Mutex<Vec<Stream>>,
    /// How many of the next connections get a GOAWAY before any stream.
    goaway_first: std::sync::atomic::AtomicUsize,
    /// The connections that got it.
    goaways: std::sync::atomic::AtomicUsize,
}

/// The running server; it stops when the test's runtime does.
#[derive(Clone)]
pub struct H2Server {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl H2Server {
    /// Plays `script`, one answer per stream, then answers [`Answer::Ok`].
    pub async fn start(script: Vec<Answer>) -> Self {
        Self::start_with(script, 0).await
    }

    /// Answers the first stream of each of the first `connections`
    /// connections with `GOAWAY(last stream 0, NO_ERROR)` — the server is
    /// going away and processed nothing — then plays `script` on the
    /// connections after them.
    pub async fn start_after_goaways(connections: usize, script: Vec<Answer>) -> Self {
        Self::start_with(script, connections).await
    }

    async fn start_with(script: Vec<Answer>, goaway_first: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(State {
            script: Mutex::new(script.into()),
            goaway_first: goaway_first.into(),
            ..State::default()
        });
        let shared = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                let sent_away = state.goaway_first.fetch_update(
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                    |left| left.checked_sub(1),
                );
                if sent_away.is_ok() {
                    tokio::spawn(go_away(state, socket));
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(mut connection) = h2::server::handshake(socket).await else { return };
                    while let Some(Ok((request, respond))) = connection.accept().await {
                        tokio::spawn(answer(Arc::clone(&state), request, respond));
                    }
                });
            }
        });
        Self { addr, state }
    }

    pub fn uri(&self) -> http::Uri {
        format!("http://{}", self.addr).parse().expect("valid uri")
    }

    pub fn streams(&self) -> Vec<Stream> {
        self.state.streams.lock().expect("lock").clone()
    }

    /// How many connections were sent away before any stream was processed.
    pub fn goaways(&self) -> usize {
        self.state.goaways.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// HTTP/2 by hand, for what `h2` will not send: a GOAWAY whose last stream is
/// below a stream the client already opened. Reads the client's preface and
/// frames up to its first HEADERS, answers with the server's SETTINGS, an ACK
/// of the client's and `GOAWAY(0, NO_ERROR)`, then closes.
async fn go_away(state: Arc<State>, mut socket: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const PREFACE: usize = 24;
    let mut preface = [0u8; PREFACE];
    if socket.read_exact(&mut preface).await.is_err() {
        return;
    }
    loop {
        let mut header = [0u8; 9];
        if socket.read_exact(&mut header).await.is_err() {
            return;
        }
        let length = usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let mut payload = vec![0u8; length];
        if socket.read_exact(&mut payload).await.is_err() {
            return;
        }
        // HEADERS: the client's first stream is open.
        if header[3] == 0x1 {
            break;
        }
    }
    let settings = [0, 0, 0, 0x4, 0, 0, 0, 0, 0];
    let settings_ack = [0, 0, 0, 0x4, 0x1, 0, 0, 0, 0];
    let mut goaway = vec![0, 0, 8, 0x7, 0, 0, 0, 0, 0];
    goaway.extend_from_slice(&[0, 0, 0, 0]); // last stream id: none processed
    goaway.extend_from_slice(&[0, 0, 0, 0]); // NO_ERROR
    let frames = [&settings[..], &settings_ack[..], &goaway[..]].concat();
    if socket.write_all(&frames).await.is_ok() {
        state.goaways.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    let _ = socket.flush().await;
    // Let the client read it all before the connection closes.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
}

async fn answer(
    state: Arc<State>,
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let text = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let index = {
        let mut streams = state.streams.lock().expect("lock");
        streams.push(Stream {
            path: request.uri().path().to_owned(),
            previous_attempts: text("grpc-previous-rpc-attempts"),
            timeout: text("grpc-timeout"),
            at: Instant::now(),
            reset_at: None,
        });
        streams.len() - 1
    };
    let next = state.script.lock().expect("lock").pop_front().unwrap_or(Answer::Ok("ok"));
    let grpc = |status: StatusCode| {
        Response::builder()
            .status(status)
            .header("content-type", "application/grpc")
            .body(())
            .expect("valid response")
    };
    match next {
        Answer::Reset(reason) => respond.send_reset(reason),
        Answer::TrailersOnly(code) => {
            let mut response = grpc(StatusCode::OK);
            response.headers_mut().insert("grpc-status", HeaderValue::from(u16::from(code)));
            let _ = respond.send_response(response, true);
        }
        Answer::Ok(message) => {
            let Ok(mut send) = respond.send_response(grpc(StatusCode::OK), false) else { return };
            let _ = send.send_data(grpc_message(message), false);
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            let _ = send.send_trailers(trailers);
        }
        Answer::StatusWithEndlessBody(status, bytes) => {
            let Ok(mut send) = respond.send_response(grpc(status), false) else { return };
            let _ = send.send_data(Bytes::from(vec![b'x'; bytes]), false);
            let reset = std::future::poll_fn(|cx| send.poll_reset(cx)).await;
            if reset.is_ok() {
                state.streams.lock().expect("lock")[index].reset_at = Some(Instant::now());
            }
        }
    }
}

/// One length-prefixed gRPC message holding an `EchoReply { message }`.
fn grpc_message(message: &str) -> Bytes {
    let encoded = prost::Message::encode_to_vec(&crate::echo::EchoReply { message: message.to_owned() });
    let mut frame = BytesMut::with_capacity(5 + encoded.len());
    frame.put_u8(0);
    frame.put_u32(u32::try_from(encoded.len()).expect("a small message"));
    frame.put_slice(&encoded);
    frame.freeze()
}
