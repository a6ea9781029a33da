//! The fleet storm's own `redis-server`, for the run that stops it mid-storm:
//! on a spare loopback port, never the Redis the user named (which other
//! processes share).

use crate::storm::{StormError, error};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// How long a started `redis-server` has to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(5);

/// A `redis-server` this storm started; dropping it kills it.
pub(crate) struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one from `PATH` on a spare loopback port, and waits until it answers.
    pub(crate) async fn start() -> Result<RedisServer, StormError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| error("finding a spare port for redis-server", e))?
            .port();
        let mut server = RedisServer { port, child: None };
        server.restart().await?;
        Ok(server)
    }

    /// Its URL.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts it again on its port (after [`stop`](Self::stop)), and waits until it answers.
    pub(crate) async fn restart(&mut self) -> Result<(), StormError> {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| error("starting redis-server from PATH (the run that stops Redis needs one)", e))?;
        self.child = Some(child);
        let started = Instant::now();
        while !ping(&self.url(), Duration::from_millis(200)).await {
            if started.elapsed() > START_TIMEOUT {
                return Err(StormError::new(format!("redis-server on port {} did not answer", self.port)));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Kills it, as an outage would.
    pub(crate) async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

/// Whether a Redis answers `PING` at `url` within `timeout`.
pub(crate) async fn ping(url: &str, timeout: Duration) -> bool {
    let Ok(client) = redis::Client::open(url) else { return false };
    let answer = async {
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut connection).await
    };
    matches!(tokio::time::timeout(timeout, answer).await, Ok(Ok(_)))
}
