//! What a response says about pace, and what the pacer did with a call.

use crate::verdict::{DelaySource, Hint};
use std::fmt;
use std::time::Duration;

/// A quota a server reported: `remaining` requests until it resets, `reset`
/// from now (the `r` and `t` of draft-ietf-httpapi-ratelimit-headers, or a
/// vendor's `X-RateLimit-Remaining` / `X-RateLimit-Reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Requests left in the current window.
    pub remaining: u64,
    /// Time until the window resets.
    pub reset: Duration,
    /// The quota policy the window belongs to, when the server said
    /// (`RateLimit-Policy`): the rate to keep to beyond this window.
    pub policy: Option<QuotaPolicy>,
}

/// A quota policy: `quota` requests per `window` (the `q` and `w` of
/// `RateLimit-Policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaPolicy {
    /// Requests allowed per window.
    pub quota: u64,
    /// The window's length.
    pub window: Duration,
}

impl QuotaPolicy {
    /// `quota` requests per `window` (users write the two public fields).
    #[cfg(any(test, feature = "http"))] // the quota headers' reader
    pub(crate) const fn new(quota: u64, window: Duration) -> Self {
        Self { quota, window }
    }

    /// The gap between sends that keeps to this policy; `None` for a policy
    /// that allows nothing or has no window (then it says nothing of a rate).
    pub(crate) fn interval(self) -> Option<Duration> {
        let quota = u32::try_from(self.quota).ok().filter(|q| *q > 0)?;
        (!self.window.is_zero()).then(|| self.window / quota)
    }
}

impl Quota {
    /// A quota of `remaining` requests over the next `reset` (users write
    /// the public fields).
    #[cfg(any(test, feature = "http"))] // the quota headers' reader
    pub(crate) const fn new(remaining: u64, reset: Duration) -> Self {
        Self { remaining, reset, policy: None }
    }

    /// The same quota, part of `policy` (users set the public field).
    #[cfg(any(test, feature = "http"))] // the quota headers' reader
    pub(crate) const fn with_policy(mut self, policy: QuotaPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Whether this quota allows fewer requests per second than `other`: the
    /// more restrictive of two quotas is the one a client must honour. An
    /// exhausted quota is the most restrictive of all; between two exhausted
    /// ones, the later reset.
    #[cfg(any(test, feature = "http"))] // the quota headers' reader
    pub(crate) fn is_stricter_than(&self, other: &Quota) -> bool {
        match (self.remaining, other.remaining) {
            (0, 0) => self.reset > other.reset,
            (0, _) => true,
            (_, 0) => false,
            // reset / remaining > other.reset / other.remaining, without
            // division; saturating, since a header may claim any number (both
            // sides saturate only far beyond `MAX_PACE`, where the pacer
            // ignores a quota anyway).
            (r, o) => {
                self.reset.as_nanos().saturating_mul(u128::from(o))
                    > other.reset.as_nanos().saturating_mul(u128::from(r))
            }
        }
    }
}

/// What one response told the client about how fast to call its dependency,
/// for [`Pacer::learn`](super::Pacer::learn). Every field is a hint: an empty
/// signal changes nothing.
///
/// Plain data, like [`Quota`]: name the fields that say something and take the
/// rest from [`none`](Self::none),
/// `PaceSignal { throttled: true, ..PaceSignal::none() }`. With the `http`
/// feature, [`hints::pace_signal`](crate::hints::pace_signal) reads one from a
/// response's status and headers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PaceSignal {
    /// No call may be sent before this wait has passed: a `Retry-After` on a
    /// 429 or 503, gRPC pushback on `RESOURCE_EXHAUSTED` or `UNAVAILABLE`,
    /// an exhausted quota's reset.
    pub not_before: Option<Hint>,
    /// The quota the server reported, on any response.
    pub quota: Option<Quota>,
    /// The answer was a throttling one (429, `RESOURCE_EXHAUSTED`): what the
    /// adaptive limiter backs off on.
    pub throttled: bool,
}

impl PaceSignal {
    /// A signal that says nothing.
    pub const fn none() -> Self {
        Self { not_before: None, quota: None, throttled: false }
    }
}

/// Why the pacer held a call back (`retryscope.pace.source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HoldSource {
    /// A `Retry-After` on a 429 or 503, for the whole dependency.
    RetryAfter,
    /// `RateLimit` or vendor quota headers: the remaining quota spread until
    /// the reset, or an exhausted one waited out.
    RateLimit,
    /// gRPC pushback on `RESOURCE_EXHAUSTED` or `UNAVAILABLE`.
    GrpcPushback,
    /// The adaptive send-rate limiter.
    Adaptive,
    /// A gate another replica of the fleet learned, shared through a
    /// [`PaceShare`](super::PaceShare).
    Fleet,
}

impl HoldSource {
    /// Every source, in the order above: what dashboards may see.
    pub const ALL: [HoldSource; 5] = [
        HoldSource::RetryAfter,
        HoldSource::RateLimit,
        HoldSource::GrpcPushback,
        HoldSource::Adaptive,
        HoldSource::Fleet,
    ];

    /// The attribute value used in telemetry: `retry_after`, `rate_limit`,
    /// `grpc_pushback`, `adaptive` or `fleet`.
    pub const fn as_str(self) -> &'static str {
        match self {
            HoldSource::RetryAfter => "retry_after",
            HoldSource::RateLimit => "rate_limit",
            HoldSource::GrpcPushback => "grpc_pushback",
            HoldSource::Adaptive => "adaptive",
            HoldSource::Fleet => "fleet",
        }
    }

    /// The source of a dependency-wide wait that came from `hint`.
    pub(crate) const fn of(hint: Hint) -> Self {
        match hint.source {
            DelaySource::RateLimit => HoldSource::RateLimit,
            DelaySource::GrpcPushback => HoldSource::GrpcPushback,
            DelaySource::RetryAfter | DelaySource::Policy => HoldSource::RetryAfter,
        }
    }
}

impl fmt::Display for HoldSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The pacer held a call back before one of its attempts was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The attempt that waits, from 1.
    pub attempt: u32,
    /// How long it waits before it is sent.
    pub wait: Duration,
    /// Why.
    pub source: HoldSource,
}
