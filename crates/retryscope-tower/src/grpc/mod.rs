//! gRPC semantics (gRFC A6): which calls are retried, on which statuses, how
//! the server's pushback and the call's deadline bound the waits, and retry
//! throttling.

pub(crate) mod attempt;
mod builder;
pub(crate) mod call;
pub(crate) mod code;
mod config;
pub mod fallback;
pub(crate) mod headers;
mod layer;
pub(crate) mod methods;
pub(crate) mod metrics;
pub(crate) mod reset;
pub(crate) mod status;
pub(crate) mod statuses;
pub(crate) mod stop;

pub use builder::{GrpcRetryLayerBuilder, origin_state};
pub use code::CodeSet;
pub use config::ServiceConfigError;
pub use layer::Grpc;
pub use stop::{
    NOT_RETRIED, NOT_RETRIED_BODY, NOT_RETRIED_CIRCUIT_OPEN, NOT_RETRIED_RATE_LIMITED,
    NOT_RETRIED_REJECTED_LOCALLY, NOT_RETRIED_THROTTLED,
};

use retryscope::SettingError;
use retryscope::budget::TokenBucketBuilder;
use retryscope::hedge::{HedgeDelay, HedgePolicy};
use retryscope::{Policy, TokenBucket};
use tonic::Code;

/// What a gRPC channel retries: a [`Policy`] and retryable status codes per
/// method, and optionally gRPC's retry throttling.
///
/// Build it from a gRPC service config ([`from_service_config`](Self::from_service_config)),
/// the JSON every gRPC implementation reads, or in code:
///
/// ```
/// use retryscope::Policy;
/// use retryscope_tower::grpc::GrpcRetry;
/// use tonic::Code;
///
/// let retry = GrpcRetry::new(Policy::interactive())
///     .retryable_codes([Code::Unavailable, Code::ResourceExhausted])
///     .throttling(10, 0.1)?;
/// # Ok::<(), retryscope::SettingError>(())
/// ```
///
/// Following A6, a gRPC call is retried whatever its method (gRPC has no
/// idempotent methods: the service config's author opted the method in).
///
/// **Deadlines.** `grpc-timeout` on the request (tonic's
/// `Request::set_timeout`) is the deadline of the whole call: every attempt
/// carries what is left of it. A policy's own deadline (a preset's 15 s, a
/// method config's `timeout`) bounds the retries locally — no attempt starts,
/// and no wait runs, past it — but is never sent as `grpc-timeout`: a call
/// without a deadline of its own gets none on the wire, so a long-lived stream
/// is not ended by the server at a deadline nobody set. Once the call's
/// deadline has passed the caller gets `DEADLINE_EXCEEDED`.
///
/// **Commit.** A call is *committed* — never retried again — at its response
/// headers, as A6 says: a response whose headers carry no `grpc-status` goes
/// to the caller at once, and nothing waits for a first message, so streams of
/// every kind start as they would without the layer. A Trailers-Only answer (the
/// status in the headers, nothing else) is what gets retried.
///
/// **Transparent retries.** A first attempt that the server never processed —
/// reset with `REFUSED_STREAM`, or left out by a graceful `GOAWAY` — is sent
/// once more at once, whatever the retry policy (also for methods without
/// one), without counting as an attempt; it needs a body that can be sent
/// again. Other resets are retried only as the status gRPC maps them to is
/// (`INTERNAL_ERROR` is `INTERNAL`, `CANCEL` is `CANCELLED`,
/// `ENHANCE_YOUR_CALM` is `RESOURCE_EXHAUSTED`…, as grpc-go maps them).
///
/// **The caller's status.** The layer's own stops reach a tonic client as a
/// `tonic::Status`: the deadline as `DEADLINE_EXCEEDED`; a retry refused by
/// the throttling, a budget or an open breaker, or impossible because the body
/// could not be sent again, as the last attempt's status (`UNAVAILABLE` when
/// none was received) with the reason added to its message and
/// [`NOT_RETRIED`] in its metadata; otherwise the last attempt's status,
/// unchanged.
///
/// **Hedging.** A method whose config has a `hedgingPolicy` is hedged, not
/// retried: its first copy goes at once, and each `hedgingDelay` without an
/// answer sends another, up to `maxAttempts` copies in all. The call commits
/// at the first response headers that are not a Trailers-Only non-fatal
/// status — an OK answer, the headers of a stream, or a fatal status — and the
/// other copies are cancelled (the server sees their HTTP/2 streams reset). A
/// Trailers-Only status in `nonFatalStatusCodes` sends the next copy at once;
/// a pushback (`grpc-retry-pushback-ms`) sends it after the server's delay,
/// and one that says not to retry sends no further copy (copies in flight go
/// on). When every copy has failed non-fatally the caller gets the last
/// status. Every copy carries `grpc-previous-rpc-attempts` (the copies sent
/// before it; absent on the first, as A6 says). Retry throttling applies: a
/// copy beyond the first is sent only while the server's token bucket is above
/// half, and a refused one is reported as a throttled retry is, with
/// [`NOT_RETRIED_THROTTLED`]. A body that cannot be sent again (streamed, or
/// over the replay limit) makes the call a single attempt, as A6's buffer
/// limit commits it; a call given its own policy (`RetryOptions::policy`) is
/// retried under it instead. Every copy asks the dependency's pacer, if the
/// layer has one, as a retry's attempt does.
///
/// Differences from A6 worth knowing: a failure where
/// nothing left the client (a refused connection) is retried within the
/// policy's attempts rather than outside them; a method config's `timeout`
/// bounds the call locally but is not sent as `grpc-timeout`; the layer gives
/// up before the deadline when the next wait cannot fit in what is left of it,
/// returning the last status rather than waiting for `DEADLINE_EXCEEDED`.
#[derive(Debug, Clone)]
pub struct GrpcRetry {
    methods: Vec<MethodRetry>,
    throttling: Option<TokenBucketBuilder>,
}

/// The retry settings of the methods one `methodConfig` entry names.
#[derive(Debug, Clone)]
struct MethodRetry {
    names: Vec<MethodName>,
    /// The retry policy; for a hedged method, one attempt per copy within the
    /// method's timeout.
    policy: Policy,
    /// The retryable codes, or for a hedged method the non-fatal ones.
    codes: CodeSet,
    /// A6 `hedgingPolicy`, when the method is hedged rather than retried.
    hedging: Option<Hedging>,
}

/// A method's A6 `hedgingPolicy`: how many copies, how far apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hedging {
    /// Copies in all, the first included (`maxAttempts`, at most 5).
    pub(crate) max_copies: u32,
    /// `hedgingDelay`: from one copy to the next, unless a non-fatal status
    /// sends the next one at once.
    pub(crate) delay: std::time::Duration,
}

impl Hedging {
    /// The engine's policy for a call whose retry policy is `within`: its
    /// deadline bounds the whole call and its attempt timeout each copy, as
    /// they bound a retried call's attempts.
    pub(crate) fn policy(self, within: &Policy) -> Result<HedgePolicy, SettingError> {
        let builder = HedgePolicy::builder().max_copies(self.max_copies).delay(HedgeDelay::Fixed(self.delay));
        let builder = match within.deadline() {
            Some(deadline) => builder.deadline(deadline),
            None => builder.no_deadline(),
        };
        let builder = match within.attempt_timeout() {
            Some(timeout) => builder.attempt_timeout(timeout),
            None => builder.no_attempt_timeout(),
        };
        builder.build()
    }
}

/// A `name` entry of a method config: every method of every service (both
/// `None`), of one service, or one method.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct MethodName {
    service: Option<String>,
    method: Option<String>,
}

impl MethodName {
    /// How specifically this name matches `service`/`method`: 3 exact, 2 the
    /// service, 1 the default; `None` if it does not match.
    fn rank(&self, service: &str, method: &str) -> Option<u8> {
        match (&self.service, &self.method) {
            (Some(s), Some(m)) => (s == service && m == method).then_some(3),
            (Some(s), None) => (s == service).then_some(2),
            (None, None) => Some(1),
            // A method without a service is invalid and refused when loading.
            (None, Some(_)) => None,
        }
    }
}

/// The settings one call runs with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallRetry {
    pub(crate) policy: Policy,
    pub(crate) codes: CodeSet,
    pub(crate) hedging: Option<Hedging>,
}

impl GrpcRetry {
    /// Every method retried under `policy` on `UNAVAILABLE`, without throttling.
    pub fn new(policy: Policy) -> Self {
        let all = MethodName { service: None, method: None };
        Self {
            methods: vec![MethodRetry {
                names: vec![all],
                policy,
                codes: CodeSet::UNAVAILABLE,
                hedging: None,
            }],
            throttling: None,
        }
    }

    /// Retries on `codes` instead of `UNAVAILABLE` (for every method configured
    /// so far).
    pub fn retryable_codes(mut self, codes: impl IntoIterator<Item = Code>) -> Self {
        let codes = CodeSet::of(codes);
        self.methods.iter_mut().for_each(|m| m.codes = codes);
        self
    }

    /// gRPC retry throttling (A6 `retryThrottling`): each server gets a
    /// [`TokenBucket`] of `max_tokens`, which failures drain by one and successes
    /// refill by `token_ratio`; retries stop while it holds half or less.
    ///
    /// # Errors
    ///
    /// When `max_tokens` is not within `1..=1000` or `token_ratio` is below
    /// 0.001 (the bucket keeps three decimals, as A6 says, truncating the rest:
    /// 0.5466 refills 0.546).
    pub fn throttling(mut self, max_tokens: u32, token_ratio: f64) -> Result<Self, SettingError> {
        let builder = TokenBucket::builder().max_tokens(max_tokens).token_ratio(token_ratio);
        builder.build()?;
        self.throttling = Some(builder);
        Ok(self)
    }

    /// Loads the `methodConfig[].retryPolicy` or `hedgingPolicy` (and `timeout`)
    /// and `retryThrottling` of a gRPC service config (the JSON form of
    /// `grpc.service_config.ServiceConfig`).
    ///
    /// Each retry policy becomes a [`Policy`]: `maxAttempts` (capped at 5, as gRPC
    /// does), `initialBackoff`, `maxBackoff` and `backoffMultiplier` (any number
    /// above 0) with A6's jitter, [`Jitter::Grpc`](retryscope::Jitter::Grpc):
    /// retry `n` waits `min(initialBackoff·multiplier^(n−1), maxBackoff) ·
    /// random(0.8, 1.2)`, and after a server pushback the next computed wait
    /// starts again at `initialBackoff`. The method config's `timeout` is the
    /// deadline. `retryableStatusCodes` are names in any case (`"unavailable"`)
    /// or numbers (`14`). Methods no entry names are not retried; a method
    /// config without `retryPolicy` only sets the deadline; one without `name`
    /// applies to no method and is skipped, as gRPC skips it.
    ///
    /// A `hedgingPolicy` hedges its methods (see **Hedging** on [`GrpcRetry`]):
    /// `maxAttempts` copies in all (2 or more, capped at 5), `hedgingDelay`
    /// apart (0 s when absent: every copy at once), `nonFatalStatusCodes` the
    /// statuses that let the next copy go at once. That list is optional, as
    /// gRPC's documentation and grpc-java take it (A6's schema calls it
    /// required): absent, every status but OK is fatal. A method config with
    /// both a `retryPolicy` and a `hedgingPolicy` is refused (A6: one or the
    /// other).
    ///
    /// What the layer cannot honour is refused, never ignored: `perAttemptRecvTimeout`, a
    /// fractional `maxTokens`, a `tokenRatio` below 0.001 (its three decimals
    /// are 0).
    ///
    /// ```
    /// use retryscope_tower::grpc::GrpcRetry;
    ///
    /// let retry = GrpcRetry::from_service_config(r#"{
    ///   "methodConfig": [{
    ///     "name": [{"service": "helloworld.Greeter"}],
    ///     "retryPolicy": {
    ///       "maxAttempts": 4,
    ///       "initialBackoff": "0.1s",
    ///       "maxBackoff": "1s",
    ///       "backoffMultiplier": 2,
    ///       "retryableStatusCodes": ["UNAVAILABLE"]
    ///     }
    ///   }],
    ///   "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
    /// }"#)?;
    /// let policy = retry.policy_for("/helloworld.Greeter/SayHello").expect("configured");
    /// assert_eq!(policy.max_attempts(), 4);
    /// assert!(retry.policy_for("/other.Service/Call").is_none());
    ///
    /// let bad = GrpcRetry::from_service_config(r#"{"methodConfig": [{"name": [{}],
    ///   "retryPolicy": {"maxAttempts": 1, "initialBackoff": "1s", "maxBackoff": "1s",
    ///   "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#).unwrap_err();
    /// assert_eq!(bad.field(), "methodConfig[0].retryPolicy.maxAttempts");
    /// # Ok::<(), retryscope_tower::grpc::ServiceConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ServiceConfigError`] naming the first field that is missing, of the wrong
    /// type or out of range, or the JSON syntax error.
    pub fn from_service_config(json: &str) -> Result<Self, ServiceConfigError> {
        config::parse(json)
    }

    /// The policy a call to `path` (`/package.Service/Method`) runs with, or
    /// `None` if no method config names it (it is then sent once).
    pub fn policy_for(&self, path: &str) -> Option<Policy> {
        self.for_path(path).map(|c| c.policy)
    }

    /// The retryable codes of a call to `path`, if any method config names it;
    /// for a hedged method, its non-fatal codes.
    pub fn codes_for(&self, path: &str) -> Option<CodeSet> {
        self.for_path(path).map(|c| c.codes)
    }

    /// The hedging policy of a call to `path` when its method config has a
    /// `hedgingPolicy`: `maxAttempts` copies, `hedgingDelay` apart, within the
    /// method's `timeout`. `None` for a method that is retried, or sent once.
    ///
    /// ```
    /// use retryscope_tower::grpc::GrpcRetry;
    /// use std::time::Duration;
    ///
    /// let retry = GrpcRetry::from_service_config(r#"{"methodConfig": [{
    ///   "name": [{"service": "helloworld.Greeter", "method": "SayHello"}],
    ///   "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "1s"}
    /// }]}"#)?;
    /// let hedge = retry.hedging_for("/helloworld.Greeter/SayHello").expect("hedged");
    /// assert_eq!(hedge.max_copies(), 3);
    /// assert!(retry.policy_for("/helloworld.Greeter/SayHello").is_some_and(|p| p.max_attempts() == 1));
    /// # Ok::<(), retryscope_tower::grpc::ServiceConfigError>(())
    /// ```
    pub fn hedging_for(&self, path: &str) -> Option<HedgePolicy> {
        let call = self.for_path(path)?;
        call.hedging.and_then(|h| h.policy(&call.policy).ok())
    }

    pub(crate) fn for_path(&self, path: &str) -> Option<CallRetry> {
        let (service, method) = split_path(path);
        self.methods
            .iter()
            .filter_map(|m| {
                m.names.iter().filter_map(|n| n.rank(service, method)).max().map(|rank| (rank, m))
            })
            // The most specific name wins; among equals, the first entry (gRPC
            // refuses duplicates, so this only orders our own `new` default).
            .fold(None, |best: Option<(u8, &MethodRetry)>, (rank, m)| match best {
                Some((r, _)) if r >= rank => best,
                _ => Some((rank, m)),
            })
            .map(|(_, m)| CallRetry { policy: m.policy, codes: m.codes, hedging: m.hedging })
    }

    /// A new, full bucket as the retry throttling configures it, if it does (the
    /// layer makes one per server).
    pub fn token_bucket(&self) -> Option<TokenBucket> {
        // Validated when configured, so `build` succeeds; the default bucket is
        // only a guard against a future change breaking that.
        self.throttling.map(|b| b.build().unwrap_or_default())
    }

    /// Whether retry throttling is configured.
    pub fn is_throttled(&self) -> bool {
        self.throttling.is_some()
    }
}

/// `/package.Service/Method` → (`package.Service`, `Method`). A path of another
/// shape matches only default entries.
fn split_path(path: &str) -> (&str, &str) {
    path.strip_prefix('/').and_then(|p| p.split_once('/')).unwrap_or(("", ""))
}

/// The metadata parsers, for the fuzz targets in the repository's `fuzz/`
/// directory; not part of the stable API.
#[doc(hidden)]
pub mod fuzzing {
    use super::headers::{self, Pushback};
    use http::HeaderMap;
    use std::time::Duration;

    /// `grpc-retry-pushback-ms`: `None` if absent, `Some(None)` for "do not
    /// retry", `Some(Some(wait))` otherwise.
    pub fn pushback(metadata: &HeaderMap) -> Option<Option<Duration>> {
        headers::pushback(metadata).map(|p| match p {
            Pushback::Wait(wait) | Pushback::AtLeast(wait) => Some(wait),
            Pushback::Stop => None,
        })
    }

    /// `grpc-timeout`, if present and well formed.
    pub fn timeout(metadata: &HeaderMap) -> Option<Duration> {
        headers::timeout(metadata)
    }
}
