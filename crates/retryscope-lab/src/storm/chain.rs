//! A call chain on loopback: services that each call the next one through the
//! retry middleware, down to the struggling server at the bottom.
//!
//! Every service counts what it receives itself — per slice, and by the attempt
//! number its caller put in `retry-attempt` — and records
//! `retryscope.server.requests` with [`IncomingRequests`], as a service in
//! production would. The services above the bottom run their handler under
//! [`Upstream::scope`], so that the middleware knows the request it serves, and
//! add `retry-exhausted` to an error when the calls below retried and gave up.

use crate::storm::server::{Behaviour, Counters, Server, accept_loop, respond};
use crate::storm::{StormError, error};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::HeaderValue;
use hyper::{HeaderMap, Request, Response, StatusCode};
use reqwest_middleware::ClientWithMiddleware;
use retryscope_otel::{EXHAUSTED_HEADER, IncomingAttempt, IncomingRequests, MAX_TRUSTED_ATTEMPT, Upstream};
use retryscope_reqwest::RetryOptions;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The most services a chain may have: with 4 attempts per layer, the bottom of
/// a chain of 4 already receives 64 calls per user request.
pub const MAX_SERVICES: usize = 4;

/// How a service calls the next one.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The client, carrying the retry middleware.
    pub client: ClientWithMiddleware,
    /// The `retryscope.operation` of its calls.
    pub operation: Cow<'static, str>,
}

/// How many requests a service received with each attempt number.
#[derive(Debug)]
pub struct AttemptsSeen {
    /// Index 0 counts unknown attempts; index `n` counts attempt `n`, up to
    /// [`MAX_TRUSTED_ATTEMPT`], beyond which nothing is believed.
    by_number: Vec<AtomicU64>,
    /// Counts per [`IncomingAttempt::BUCKETS`], in its order.
    by_bucket: [AtomicU64; IncomingAttempt::BUCKETS.len()],
}

impl Default for AttemptsSeen {
    fn default() -> Self {
        let slots = usize::try_from(MAX_TRUSTED_ATTEMPT).unwrap_or(100) + 1;
        Self { by_number: (0..slots).map(|_| AtomicU64::new(0)).collect(), by_bucket: Default::default() }
    }
}

impl AttemptsSeen {
    fn record(&self, attempt: IncomingAttempt) {
        let slot = attempt.number().and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
        if let Some(count) = self.by_number.get(slot) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        let bucket = IncomingAttempt::BUCKETS.iter().position(|&b| b == attempt.bucket());
        if let Some(count) = bucket.and_then(|i| self.by_bucket.get(i)) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Requests received per `retryscope.attempt` bucket (`1`, `2`, `3`, `4+`,
    /// `unknown`), as the service's `retryscope.server.requests` counts them;
    /// buckets nothing fell into are left out.
    pub fn by_bucket(&self) -> BTreeMap<&'static str, u64> {
        IncomingAttempt::BUCKETS
            .into_iter()
            .zip(&self.by_bucket)
            .map(|(bucket, count)| (bucket, count.load(Ordering::Relaxed)))
            .filter(|&(_, count)| count > 0)
            .collect()
    }

    /// Requests received as attempt `number` (1 = a first attempt).
    pub fn count(&self, number: u32) -> u64 {
        let slot = usize::try_from(number).ok().filter(|&n| n > 0);
        slot.and_then(|n| self.by_number.get(n)).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Requests whose attempt header said nothing believable.
    pub fn unknown(&self) -> u64 {
        self.by_number.first().map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Every request received.
    pub fn total(&self) -> u64 {
        self.by_number.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Requests received that their caller said were retries.
    pub fn retries(&self) -> u64 {
        self.total() - self.count(1) - self.unknown()
    }

    /// The highest attempt number received, if any request came.
    pub fn highest(&self) -> Option<u32> {
        (1..=MAX_TRUSTED_ATTEMPT).rev().find(|&n| self.count(n) > 0)
    }
}

/// One service of a chain, and what it saw.
pub struct Service {
    /// `service-1` for the top, up to `service-N` for the bottom; its route is
    /// `/` and the name.
    pub name: String,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Requests it received and answered 200, per slice.
    pub counters: Arc<Counters>,
    /// Requests it received, by attempt number.
    pub attempts: Arc<AttemptsSeen>,
    _running: Running,
}

impl Service {
    /// The URL its caller calls.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, route(&self.name))
    }
}

/// Keeps a service serving; dropping it stops accepting connections.
enum Running {
    Bottom(#[allow(dead_code, reason = "held for its Drop")] Server),
    Hop(JoinHandle<()>),
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Running::Hop(accept) = self {
            accept.abort();
        }
    }
}

/// A running chain, top first: `services[0]` is called by the users, the last
/// one is the struggling server.
pub struct Chain {
    /// The services, top first.
    pub services: Vec<Service>,
}

impl Chain {
    /// Starts `services` services (2 to [`MAX_SERVICES`]) on loopback, the bottom
    /// one behaving as `bottom`, each counting `slices` slices and recording
    /// incoming requests with `incoming`. Service *k* calls service *k* + 1
    /// through `caller(k)` (1-based).
    pub async fn start(
        services: usize,
        bottom: Behaviour,
        slices: usize,
        incoming: &IncomingRequests,
        mut caller: impl FnMut(usize) -> Result<Caller, StormError>,
    ) -> Result<Chain, StormError> {
        if !(2..=MAX_SERVICES).contains(&services) {
            return Err(StormError::new(format!("a chain has 2 to {MAX_SERVICES} services, not {services}")));
        }
        let mut chain = Vec::with_capacity(services);
        chain.push(start_bottom(format!("service-{services}"), bottom, slices, incoming).await?);
        for k in (1..services).rev() {
            let next = chain.last().map(Service::url).unwrap_or_default();
            let name = format!("service-{k}");
            let hop = Hop {
                route: route(&name),
                name,
                next,
                caller: caller(k)?,
                incoming: incoming.clone(),
                counters: Arc::new(Counters::new(slices)),
                attempts: Arc::default(),
                started: Instant::now(),
            };
            chain.push(start_hop(hop).await?);
        }
        chain.reverse();
        Ok(Chain { services: chain })
    }

    /// The URL the users call.
    pub fn url(&self) -> String {
        self.services.first().map(Service::url).unwrap_or_default()
    }
}

fn route(name: &str) -> String {
    format!("/{name}")
}

async fn start_bottom(
    name: String,
    behaviour: Behaviour,
    slices: usize,
    incoming: &IncomingRequests,
) -> Result<Service, StormError> {
    let attempts = Arc::new(AttemptsSeen::default());
    let (seen, incoming, path) = (Arc::clone(&attempts), incoming.clone(), route(&name));
    let observe = move |headers: &HeaderMap| seen.record(incoming.observe(headers, Some(&path)));
    let server = Server::start_observed(behaviour, slices, observe)
        .await
        .map_err(|e| error("starting the bottom service", e))?;
    Ok(Service {
        name,
        addr: server.addr,
        counters: Arc::clone(&server.counters),
        attempts,
        _running: Running::Bottom(server),
    })
}

/// A service above the bottom: it answers what its call to the next one got.
struct Hop {
    name: String,
    route: String,
    next: String,
    caller: Caller,
    incoming: IncomingRequests,
    counters: Arc<Counters>,
    attempts: Arc<AttemptsSeen>,
    started: Instant,
}

async fn start_hop(hop: Hop) -> Result<Service, StormError> {
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|e| error("starting a service", e))?;
    let addr = listener.local_addr().map_err(|e| error("starting a service", e))?;
    let (name, counters, attempts) = (hop.name.clone(), Arc::clone(&hop.counters), Arc::clone(&hop.attempts));
    let hop = Arc::new(hop);
    let accept = tokio::spawn(accept_loop(listener, move |request: Request<Incoming>| {
        let hop = Arc::clone(&hop);
        // Counted on arrival, like the bottom, so every service's slices line up.
        let slice = hop.counters.receive(hop.started.elapsed()).map(|(slice, _)| slice);
        let attempt = hop.incoming.observe(request.headers(), Some(&hop.route));
        hop.attempts.record(attempt);
        async move { hop.answer(slice, attempt).await }
    }));
    Ok(Service { name, addr, counters, attempts, _running: Running::Hop(accept) })
}

impl Hop {
    async fn answer(&self, slice: Option<usize>, attempt: IncomingAttempt) -> Response<Full<Bytes>> {
        let upstream = Upstream::new(attempt);
        let status = upstream.clone().scope(self.call_next()).await;
        let mut response = respond(status);
        if status == StatusCode::OK {
            if let Some(slice) = slice {
                self.counters.serve(slice);
            }
        } else if let Some(attempts) = upstream.exhausted_below() {
            // The calls below already retried and gave up: say so, so that a
            // caller retrying at one layer does not retry them all again.
            response.headers_mut().insert(EXHAUSTED_HEADER, HeaderValue::from(attempts));
        }
        response
    }

    async fn call_next(&self) -> StatusCode {
        let options = RetryOptions::new().operation(self.caller.operation.clone());
        match self.caller.client.get(&self.next).with_extension(options).send().await {
            Ok(response) => {
                let status = response.status();
                // Read to the end so the connection goes back to the pool.
                let _ = response.bytes().await;
                status
            }
            Err(_) => StatusCode::BAD_GATEWAY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attempt a request with `retry-attempt: value` (none for `None`) is.
    fn attempt(value: Option<&str>) -> IncomingAttempt {
        let mut headers = HeaderMap::new();
        if let Some(value) = value.and_then(|v| v.parse().ok()) {
            headers.insert(retryscope_otel::ATTEMPT_HEADER, value);
        }
        IncomingAttempt::from_headers(&headers)
    }

    #[test]
    fn attempts_are_counted_by_number_and_bucket_and_hostile_values_as_unknown() {
        let seen = AttemptsSeen::default();
        let values = ["2", "2", "3", "4", "7", "100", "-1", "99999999999", "garbage", ""];
        seen.record(attempt(None));
        for value in values {
            seen.record(attempt(Some(value)));
        }
        assert_eq!((seen.count(1), seen.count(2), seen.count(7), seen.count(100)), (1, 2, 1, 1));
        assert_eq!((seen.count(0), seen.count(101), seen.count(u32::MAX)), (0, 0, 0));
        assert_eq!(seen.unknown(), 4);
        assert_eq!((seen.total(), seen.retries(), seen.highest()), (11, 6, Some(100)));
        let buckets = seen.by_bucket();
        assert_eq!(buckets, BTreeMap::from([("1", 1), ("2", 2), ("3", 1), ("4+", 3), ("unknown", 4)]));
        assert_eq!(AttemptsSeen::default().highest(), None);
        assert!(AttemptsSeen::default().by_bucket().is_empty());
    }
}
