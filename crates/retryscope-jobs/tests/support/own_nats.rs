//! A nats-server of the test's own (the `nats-server` CI installs, on a free
//! port, with its own store), for the tests that stop and restart it.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct OwnNats {
    child: Child,
    pub port: u16,
    pub store: std::path::PathBuf,
}

impl OwnNats {
    pub fn start(port: u16, store: &std::path::Path) -> Self {
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server on PATH (Debian package nats-server)");
        Self { child, port, store: store.to_owned() }
    }

    /// A graceful stop (SIGTERM: the server flushes its store), as a restart does.
    pub fn stop(&mut self) {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until a server listens on `port`.
pub async fn ready(port: u16) {
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("nats-server did not listen on {port}");
}
