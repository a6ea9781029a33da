//! Two ends of "the server is not there": nobody listening, and somebody
//! listening who never answers.

use std::net::SocketAddr;
use tokio::net::TcpListener;

/// A port on which nothing listens: bound, read, then closed again. A
/// connection to it is refused, as a dependency that is down refuses it.
///
/// # Panics
///
/// If no loopback port can be bound.
pub async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    listener.local_addr().expect("local addr").port()
}

/// A server that accepts TCP connections and never answers: every connection
/// is held open, unread, until the server is dropped. For timeouts that must
/// fire on a connected socket rather than on a refused one.
pub struct StalledServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl StalledServer {
    /// Starts listening on a free loopback port.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            // Kept here, not dropped: dropping would close the connection,
            // which the client would see as an answer.
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        Self { addr, task }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for StalledServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
