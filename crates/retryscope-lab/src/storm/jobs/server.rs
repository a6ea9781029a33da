//! A nats-server for the storm: the one `--nats-url` names, or one of the
//! storm's own (Debian's `nats-server` on PATH) on a free loopback port with
//! a throwaway store, stopped when dropped.

use crate::storm::{StormError, own_server};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The nats-server the storm uses.
pub(crate) struct Nats {
    pub(crate) url: String,
    own: Option<(Child, PathBuf)>,
}

impl Nats {
    pub(crate) async fn start(url: Option<&str>) -> Result<Self, StormError> {
        if let Some(url) = url {
            return Ok(Self { url: url.to_owned(), own: None });
        }
        let port = own_server::free_port("nats-server")?;
        let store = std::env::temp_dir().join(format!("retryscope-storm-jobs-{}-{port}", std::process::id()));
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                own_server::missing(
                    "nats-server",
                    "storm --jobs needs a nats-server with JetStream",
                    "--nats-url",
                    e,
                )
            })?;
        let nats = Self { url: format!("nats://127.0.0.1:{port}"), own: Some((child, store)) };
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Ok(nats);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(StormError::new(format!("nats-server did not listen on 127.0.0.1:{port}")))
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        if let Some((child, store)) = &mut self.own {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(store);
        }
    }
}
