//! The HTTP/1.1 variants: one `GET` per call to the hyper server, over a
//! keep-alive connection, its body read to the end.

use crate::telemetry::HandRolled;
use crate::{CallError, Caller};
use opentelemetry::KeyValue;
use reqwest::StatusCode;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::Instant;
use tracing::Instrument as _;

/// Which answer the server gives a call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Script {
    /// 200 at once (`/ok`).
    Ok,
    /// 503 then 200 (`/fail-once/N`).
    FailOnce,
    /// 503 with `Retry-After: 0`, then 200 (`/fail-once-retry-after/N`).
    FailOnceRetryAfter,
}

/// Where each call goes.
pub(crate) struct Url {
    base: String,
    ok: String,
    script: Script,
}

impl Url {
    pub(crate) fn new(server: SocketAddr, script: Script) -> Self {
        // An IP literal: reqwest resolves nothing, so no work leaves the thread.
        let base = format!("http://{server}");
        Self { ok: format!("{base}/ok"), base, script }
    }

    /// Call `n`'s URL; only the failing scripts format one per call.
    fn of(&self, n: u64) -> Cow<'_, str> {
        match self.script {
            Script::Ok => Cow::Borrowed(&self.ok),
            Script::FailOnce => Cow::Owned(format!("{}/fail-once/{n}", self.base)),
            Script::FailOnceRetryAfter => Cow::Owned(format!("{}/fail-once-retry-after/{n}", self.base)),
        }
    }
}

/// A plain reqwest client, sent through by each variant.
pub(crate) fn reqwest_client() -> Result<reqwest::Client, CallError> {
    Ok(reqwest::Client::builder().no_proxy().build()?)
}

/// reqwest alone, or behind reqwest-middleware (with whatever middleware).
pub(crate) trait Get {
    async fn fetch(&self, url: &str) -> Result<reqwest::Response, CallError>;
}

impl Get for reqwest::Client {
    async fn fetch(&self, url: &str) -> Result<reqwest::Response, CallError> {
        Ok(reqwest::Client::get(self, url).send().await?)
    }
}

impl Get for reqwest_middleware::ClientWithMiddleware {
    async fn fetch(&self, url: &str) -> Result<reqwest::Response, CallError> {
        Ok(reqwest_middleware::ClientWithMiddleware::get(self, url).send().await?)
    }
}

/// One `GET` whose retries, if any, are the client's: it must end in 200.
pub(crate) struct Call<C> {
    pub(crate) client: C,
    pub(crate) url: Url,
}

impl<C: Get> Caller for Call<C> {
    async fn call(&mut self, n: u64) -> Result<(), CallError> {
        let response = self.client.fetch(&self.url.of(n)).await?;
        read_ok(response).await
    }
}

async fn read_ok(response: reqwest::Response) -> Result<(), CallError> {
    let status = response.status();
    let body = response.bytes().await?;
    if status != StatusCode::OK || body.as_ref() != b"ok" {
        return Err(format!("answered {status}, {} bytes", body.len()).into());
    }
    Ok(())
}

/// The failing script retried by hand with plain reqwest: the 503 is read,
/// then the same URL asked again. What any retry of it costs at the least.
pub(crate) struct TwiceByHand {
    pub(crate) client: reqwest::Client,
    pub(crate) url: Url,
}

impl Caller for TwiceByHand {
    async fn call(&mut self, n: u64) -> Result<(), CallError> {
        let url = self.url.of(n);
        let first = self.client.get(&*url).send().await?;
        let status = first.status();
        first.bytes().await?;
        if status != StatusCode::SERVICE_UNAVAILABLE {
            return Err(format!("first attempt answered {status}, not 503").into());
        }
        read_ok(self.client.get(&*url).send().await?).await
    }
}

/// Plain reqwest inside one CLIENT span (bridged by tracing-opentelemetry),
/// with one counter add and one histogram record per call.
pub(crate) struct HandRolledCall {
    pub(crate) client: reqwest::Client,
    pub(crate) url: Url,
    pub(crate) server: SocketAddr,
    pub(crate) metrics: HandRolled,
}

impl Caller for HandRolledCall {
    async fn call(&mut self, n: u64) -> Result<(), CallError> {
        let span = tracing::info_span!(
            "GET",
            otel.kind = "client",
            http.request.method = "GET",
            server.address = %self.server.ip(),
            server.port = self.server.port(),
            http.response.status_code = tracing::field::Empty,
        );
        let started = Instant::now();
        let url = self.url.of(n);
        let response = self.client.get(&*url).send().instrument(span.clone()).await?;
        let status = response.status();
        span.record("http.response.status_code", status.as_u16());
        let outcome = read_ok(response).instrument(span).await;
        self.metrics.record(
            started.elapsed().as_secs_f64(),
            &[
                KeyValue::new("http.request.method", "GET"),
                KeyValue::new("server.address", "127.0.0.1"),
                KeyValue::new("http.response.status_code", i64::from(status.as_u16())),
            ],
        );
        outcome
    }
}
