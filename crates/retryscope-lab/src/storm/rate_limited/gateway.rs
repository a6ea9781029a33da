//! The rate-limited service: an HTTP server on loopback with a quota, as an
//! API gateway enforces one.
//!
//! **Fixed windows.** Time since the server's start is cut into windows of
//! `window` whole seconds; the first `quota` requests of each window are
//! answered 200, the rest 429, until the next window starts afresh. Fixed
//! windows, not a token bucket, because that is what the quota headers
//! describe: draft-ietf-httpapi-ratelimit-headers reports `r` requests left
//! until a reset `t` seconds away, and a fixed window has exactly one such
//! reset (a token bucket refills continuously and has none). Envoy's and
//! many gateways' per-second limits work the same way.
//!
//! Every answer carries the quota, as the draft's fields:
//!
//! - within the quota: `200`, `RateLimit: "default";r=<left>;t=<reset>` and
//!   `RateLimit-Policy: "default";q=<quota>;w=<window>`;
//! - beyond it: `429`, the same two fields with `r=0`, and
//!   `Retry-After: <reset>`.
//!
//! `<reset>` is the time until the window ends in whole seconds, rounded up,
//! at least 1: the draft's `t` and RFC 9110's delay-seconds are integers, and
//! rounding down would tell a client to come back before the reset (0 would
//! even mean "now"). With 1-s windows it is therefore always 1.
//!
//! For comparison, [`QuotaHeaders::Vendor`] reports the same quota the way
//! some vendors do, with the reset to the millisecond:
//! `X-RateLimit-Limit: <quota>`, `X-RateLimit-Remaining: <left>` and
//! `X-RateLimit-Reset: <seconds to reset, 3 decimals>` instead of the
//! draft's fields (`Retry-After` on a 429 stays an integer, as RFC 9110 has
//! it).
//!
//! There is no service time and no queue: an answer is instant, so the
//! server's goodput is exactly the 200s it gave, and how many of them the
//! quota allowed is the only limit.

use crate::storm::server::{Counters, Serving};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderName, HeaderValue, RETRY_AFTER};
use hyper::{Request, Response, StatusCode};
use retryscope_otel::IncomingRequests;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

// The quota headers the gateway sends, as the engine's `hints` reads them.
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The quota the gateway enforces: `requests` per fixed window of `window`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Requests answered 200 per window.
    pub requests: u32,
    /// The window, in whole seconds (at least 1).
    pub window_s: u32,
}

impl Quota {
    /// The quota as a rate, in requests per second.
    pub fn per_second(&self) -> f64 {
        f64::from(self.requests) / f64::from(self.window_s.max(1))
    }

    fn window(&self) -> Duration {
        Duration::from_secs(u64::from(self.window_s.max(1)))
    }
}

/// How the gateway reports its quota (`--quota-headers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QuotaHeaders {
    /// `RateLimit` and `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers):
    /// the reset in whole seconds.
    Draft,
    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset`, the reset as a delay
    /// in seconds to the millisecond.
    Vendor,
}

/// The window in force and what it has used so far.
#[derive(Debug, Default)]
struct Window {
    index: u64,
    used: u32,
}

/// What the gateway decided for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Within the quota.
    pub(crate) allowed: bool,
    /// Requests left in the window after this one.
    pub(crate) left: u32,
    /// Until the window resets.
    pub(crate) to_reset: Duration,
}

impl Decision {
    /// Whole seconds until the window resets, rounded up, at least 1.
    pub(crate) fn reset_s(&self) -> u64 {
        (self.to_reset.as_secs() + u64::from(self.to_reset.subsec_nanos() > 0)).max(1)
    }
}

/// The quota's bookkeeping, on explicit time for the unit tests.
#[derive(Debug)]
pub(crate) struct Limiter {
    quota: Quota,
    window: Mutex<Window>,
}

impl Limiter {
    pub(crate) fn new(quota: Quota) -> Self {
        Self { quota, window: Mutex::new(Window::default()) }
    }

    /// Decides for a request arriving `elapsed` after the server's start.
    pub(crate) fn decide(&self, elapsed: Duration) -> Decision {
        let window = self.quota.window();
        let index = u64::try_from(elapsed.as_nanos() / window.as_nanos()).unwrap_or(u64::MAX);
        let ends = window.saturating_mul(u32::try_from(index.saturating_add(1)).unwrap_or(u32::MAX));
        let to_reset = ends.saturating_sub(elapsed);
        let mut current = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        if current.index != index {
            *current = Window { index, used: 0 };
        }
        let allowed = current.used < self.quota.requests;
        if allowed {
            current.used += 1;
        }
        Decision { allowed, left: self.quota.requests - current.used, to_reset }
    }
}

/// A running gateway; dropping it stops it.
pub struct Gateway {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Requests received, and answered 200, per slice of their arrival.
    pub counters: Arc<Counters>,
    /// On its own thread, as the storm server is.
    _serving: Serving,
}

impl Gateway {
    /// Starts a gateway enforcing `quota` on an ephemeral loopback port,
    /// reporting it with `headers`, counting `slices` slices, recording
    /// incoming attempts with `incoming` (route `/work`).
    pub async fn start(
        quota: Quota,
        headers: QuotaHeaders,
        slices: usize,
        incoming: IncomingRequests,
    ) -> std::io::Result<Gateway> {
        let counters = Arc::new(Counters::new(slices));
        let state = Arc::new(State {
            limiter: Limiter::new(quota),
            report: Report::new(quota, headers),
            started: Instant::now(),
            counters: Arc::clone(&counters),
            incoming,
        });
        let (addr, serving) = Serving::start("storm-gateway", move |request: Request<Incoming>| {
            let response = state.answer(&request);
            async move { response }
        })?;
        Ok(Gateway { addr, counters, _serving: serving })
    }
}

struct State {
    limiter: Limiter,
    report: Report,
    started: Instant,
    counters: Arc<Counters>,
    incoming: IncomingRequests,
}

impl State {
    fn answer(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        self.incoming.observe(request.headers(), Some("/work"));
        let elapsed = self.started.elapsed();
        let slice = self.counters.receive(elapsed).map(|(slice, _)| slice);
        let decision = self.limiter.decide(elapsed);
        if let (true, Some(slice)) = (decision.allowed, slice) {
            self.counters.serve(slice);
        }
        self.report.respond(decision)
    }
}

/// How the answers report the quota.
struct Report {
    headers: QuotaHeaders,
    /// `RateLimit-Policy: "default";q=<quota>;w=<window>`, or
    /// `X-RateLimit-Limit: <quota>`: the same on every answer.
    policy: HeaderValue,
}

/// `X-RateLimit-Limit`.
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");

impl Report {
    fn new(quota: Quota, headers: QuotaHeaders) -> Self {
        let policy = match headers {
            QuotaHeaders::Draft => format!("\"default\";q={};w={}", quota.requests, quota.window_s),
            QuotaHeaders::Vendor => quota.requests.to_string(),
        };
        // Digits, quotes and ASCII only: always a valid field value.
        let policy =
            HeaderValue::try_from(policy).unwrap_or_else(|_| HeaderValue::from_static("\"default\""));
        Self { headers, policy }
    }

    /// The answer to a request the gateway decided on.
    fn respond(&self, decision: Decision) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(Bytes::from_static(b"")));
        let headers = response.headers_mut();
        match self.headers {
            QuotaHeaders::Draft => {
                let limit = format!("\"default\";r={};t={}", decision.left, decision.reset_s());
                if let Ok(limit) = HeaderValue::try_from(limit) {
                    headers.insert(RATELIMIT, limit);
                }
                headers.insert(RATELIMIT_POLICY, self.policy.clone());
            }
            QuotaHeaders::Vendor => {
                headers.insert(X_RATELIMIT_LIMIT, self.policy.clone());
                headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(decision.left));
                // The engine reads a reset of 0 as "no quota": a millisecond at least.
                let reset = format!("{:.3}", decision.to_reset.as_secs_f64().max(0.001));
                if let Ok(reset) = HeaderValue::try_from(reset) {
                    headers.insert(X_RATELIMIT_RESET, reset);
                }
            }
        }
        if !decision.allowed {
            headers.insert(RETRY_AFTER, HeaderValue::from(decision.reset_s()));
            *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn each_fixed_window_allows_the_quota_then_refuses_until_the_next_one() {
        let limiter = Limiter::new(Quota { requests: 3, window_s: 1 });
        let first: Vec<_> = (0..4).map(|_| limiter.decide(secs(0.25))).collect();
        assert_eq!(first.iter().map(|d| d.allowed).collect::<Vec<_>>(), [true, true, true, false]);
        assert_eq!(first.iter().map(|d| d.left).collect::<Vec<_>>(), [2, 1, 0, 0]);
        assert!(first.iter().all(|d| d.reset_s() == 1), "0.75 s to the reset rounds up to 1: {first:?}");
        let next = limiter.decide(secs(1.0));
        assert_eq!(next, Decision { allowed: true, left: 2, to_reset: secs(1.0) });
    }

    #[test]
    fn the_reset_is_whole_seconds_rounded_up_and_never_zero() {
        let limiter = Limiter::new(Quota { requests: 100, window_s: 10 });
        assert_eq!(limiter.decide(secs(0.0)).reset_s(), 10);
        assert_eq!(limiter.decide(secs(0.5)).reset_s(), 10);
        assert_eq!(limiter.decide(secs(8.9)).reset_s(), 2);
        assert_eq!(limiter.decide(secs(9.999)).reset_s(), 1);
        assert_eq!(limiter.decide(secs(10.0)).reset_s(), 10, "a new window");
        let at_the_edge = Decision { allowed: true, left: 1, to_reset: Duration::ZERO };
        assert_eq!(at_the_edge.reset_s(), 1);
    }

    #[test]
    fn the_answers_carry_the_draft_fields_and_a_429_its_retry_after() {
        let report = Report::new(Quota { requests: 200, window_s: 1 }, QuotaHeaders::Draft);
        let ok = report.respond(Decision { allowed: true, left: 17, to_reset: secs(0.4) });
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()[RATELIMIT], r#""default";r=17;t=1"#);
        assert_eq!(ok.headers()[RATELIMIT_POLICY], r#""default";q=200;w=1"#);
        assert!(ok.headers().get(RETRY_AFTER).is_none());
        let refused = report.respond(Decision { allowed: false, left: 0, to_reset: secs(0.4) });
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()[RATELIMIT], r#""default";r=0;t=1"#);
        assert_eq!(refused.headers()[RETRY_AFTER], "1");
        // What the engine reads from them: the quota of the draft, and the gate.
        let now = std::time::SystemTime::now();
        let signal = retryscope::hints::pace_signal(429, refused.headers(), now);
        assert!(signal.throttled && signal.not_before.is_some(), "{signal:?}");
        let quota = retryscope::hints::quota(ok.headers(), now);
        let policy = retryscope::pace::QuotaPolicy { quota: 200, window: Duration::from_secs(1) };
        let expected = retryscope::pace::Quota {
            policy: Some(policy),
            ..retryscope::pace::Quota { remaining: 17, reset: Duration::from_secs(1), policy: None }
        };
        assert_eq!(quota, Some(expected));
    }

    #[test]
    fn the_vendor_fields_carry_the_reset_to_the_millisecond() {
        let report = Report::new(Quota { requests: 200, window_s: 1 }, QuotaHeaders::Vendor);
        let ok = report.respond(Decision { allowed: true, left: 17, to_reset: secs(0.4) });
        assert_eq!(ok.headers()[X_RATELIMIT_LIMIT], "200");
        assert_eq!(ok.headers()[X_RATELIMIT_REMAINING], "17");
        assert_eq!(ok.headers()[X_RATELIMIT_RESET], "0.400");
        assert!(ok.headers().get(RATELIMIT).is_none());
        let quota = retryscope::hints::quota(ok.headers(), std::time::SystemTime::now());
        assert_eq!(
            quota,
            Some(retryscope::pace::Quota { remaining: 17, reset: Duration::from_millis(400), policy: None })
        );
        let refused = report.respond(Decision { allowed: false, left: 0, to_reset: secs(0.4) });
        assert_eq!(refused.headers()[RETRY_AFTER], "1");
    }
}
