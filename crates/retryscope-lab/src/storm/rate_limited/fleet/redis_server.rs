//! The fleet storm's own `redis-server` (Debian's, on PATH), on a spare
//! loopback port: for the run that stops it mid-storm (never the Redis the
//! user named, which other processes share), and for the shared run when the
//! user names no Redis.

use crate::storm::{StormError, own_server};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// How long a started `redis-server` has to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(5);

/// A `redis-server` this storm started; dropping it kills it.
pub(crate) struct RedisServer {
    port: u16,
    child: Option<Child>,
    /// What needed it and how to do without it, for the refusal when
    /// redis-server is not on PATH.
    needs: String,
    instead: String,
}

impl RedisServer {
    /// Starts one from `PATH` on a spare loopback port, and waits until it
    /// answers. `needs` and `instead` make the refusal when there is none: what
    /// needed it, and how to do without it.
    pub(crate) async fn start(
        needs: impl Into<String>,
        instead: impl Into<String>,
    ) -> Result<RedisServer, StormError> {
        let port = own_server::free_port("redis-server")?;
        let mut server = RedisServer { port, child: None, needs: needs.into(), instead: instead.into() };
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
            .map_err(|e| own_server::missing("redis-server", &self.needs, &self.instead, e))?;
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
