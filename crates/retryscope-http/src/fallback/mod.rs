//! Fallbacks: a named answer per dependency, run when a call gives up.
//!
//! Registered by name on either integration's builder
//! (`.fallback("stale-cache", f)`), then chosen per dependency
//! (`.fallback_for("inventory.internal", "stale-cache")?`) or for every
//! dependency without one of its own (`.default_fallback("stale-cache")?`).
//! The names are what a configuration file selects a fallback by
//! ([`ClientSettings::fallback_names`](crate::settings::ClientSettings::fallback_names)).
//!
//! **When it runs** — exactly when the engine *gave up* on the call
//! ([`FallbackReason::for_stop`]): attempts exhausted, deadline, circuit
//! open, budget exhausted, rate limited, a server hint too long to wait,
//! rejected by the adaptive throttle, the concurrency limit full — or when
//! a dependency's kill switch is on ([`FallbackReason::KillSwitch`], set by
//! the configuration crate). Never on success, and never when the engine
//! stopped because the answer was *meant*: a permanent failure (any answer
//! the classifier does not retry — a 404, a 400, a 501 — and transport
//! errors it judges permanent), a request that could not safely run again
//! (`unrepeatable`: it may have taken effect, and an answer made up for it
//! would hide that), or retries left to another layer of the call chain
//! (`upstream_retry`: the layer that retries decides, and a fallback here
//! would hide the failure from it). Those reach the caller as they came.
//!
//! **What it gets**: a [`FallbackContext`] — the dependency, the reason,
//! the request's method and URI (never its body), and the last response's
//! head or the last error. **What it returns**: an `http::Response<Bytes>`
//! (each integration converts it to its own response type) or an error,
//! from a boxed future that is cut at the call's remaining deadline (the
//! policy's, with the caller's timeout; [`NO_DEADLINE_LIMIT`] when the
//! policy has none). A fallback that answers without waiting is never cut:
//! the future is polled once before its time is checked.
//!
//! The response carries a [`Fallback`] extension saying it is one and why.
//! A fallback that fails ends the call with [`FallbackFailed`], whose
//! `source()` chain holds the fallback's error, then the call's own.

use crate::settings::ClientSettings;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter};
use retryscope::StopReason;
use retryscope_otel::{names, stop_reason_str};
use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

mod error;
use error::FallbackTimedOut;
pub use error::{FallbackError, FallbackFailed};

/// Any error, boxed.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// What a fallback returns: a boxed future of the answer.
pub type FallbackFuture = Pin<Box<dyn Future<Output = Result<http::Response<Bytes>, BoxError>> + Send>>;

/// How long a fallback may run when the call's policy has no deadline: every
/// wait is bounded.
pub const NO_DEADLINE_LIMIT: Duration = Duration::from_secs(10);

/// The most dependencies one client gives a fallback of their own: a
/// configuration file cannot grow the map without bound.
pub const MAX_FALLBACKS: usize = 256;

/// Why a call's fallback ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FallbackReason {
    /// The engine gave up on the call for this reason.
    GaveUp(StopReason),
    /// The dependency's kill switch is on (the configuration crate's): the
    /// call made its first attempt only.
    KillSwitch,
}

impl FallbackReason {
    /// The reason a fallback runs for, when the engine stopped for `stop`;
    /// `None` when it must not run (success is never a stop): `Permanent`,
    /// `Unrepeatable` and `UpstreamRetry` (see [`Fallback`] for why).
    pub fn for_stop(stop: StopReason) -> Option<FallbackReason> {
        match stop {
            StopReason::Permanent | StopReason::Unrepeatable | StopReason::UpstreamRetry => None,
            other => Some(FallbackReason::GaveUp(other)),
        }
    }

    /// `retryscope.fallback.reason`: the stop reason's value
    /// (`attempts_exhausted`, `circuit_open`…) or `kill_switch`; bounded.
    pub fn as_str(self) -> &'static str {
        match self {
            FallbackReason::GaveUp(stop) => stop_reason_str(stop),
            FallbackReason::KillSwitch => names::FALLBACK_KILL_SWITCH,
        }
    }
}

impl fmt::Display for FallbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The response extension that marks an answer as a fallback's: read it
/// with `response.extensions().get::<Fallback>()` (reqwest and tower alike).
///
/// A client's fallback for a dependency runs exactly when the engine gave up
/// on a call to it ([`FallbackReason::for_stop`]): attempts exhausted, the
/// deadline, a server hint too long to wait, the budget, the breaker open, a
/// rate limit, the adaptive throttle or the concurrency limit — or when the
/// dependency's kill switch is on ([`FallbackReason::KillSwitch`]). Never on
/// a success, and never when the answer was meant: a permanent failure (any
/// status the classifier does not retry — a 404, a 400, a 501 — or a
/// transport error judged permanent), a request that could not safely run
/// again (`unrepeatable`: it may have taken effect), or retries left to
/// another layer (`upstream_retry`). Those reach the caller as they came.
#[derive(Debug, Clone)]
pub struct Fallback {
    name: Arc<str>,
    reason: FallbackReason,
}

impl Fallback {
    /// The name the fallback was registered under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Why it ran.
    pub fn reason(&self) -> FallbackReason {
        self.reason
    }
}

/// The last thing the call got before it gave up.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum LastAnswer<'a> {
    /// A response (its head: the body is not kept for a fallback).
    Response {
        /// Its status.
        status: StatusCode,
        /// Its headers.
        headers: &'a HeaderMap,
    },
    /// An error.
    Error(&'a (dyn StdError + Send + Sync + 'static)),
    /// Nothing: no attempt ran (the breaker was open, say) or it produced
    /// nothing to keep (a timeout).
    Nothing,
}

/// What a fallback is told about the call it answers for.
#[derive(Debug, Clone, Copy)]
pub struct FallbackContext<'a> {
    dependency: &'a str,
    reason: FallbackReason,
    method: &'a Method,
    uri: &'a Uri,
    last: LastAnswer<'a>,
    idempotency_key: Option<&'a HeaderValue>,
}

impl<'a> FallbackContext<'a> {
    /// What [`Chosen::answer`] tells a fallback.
    fn new(
        dependency: &'a str,
        reason: FallbackReason,
        method: &'a Method,
        uri: &'a Uri,
        last: LastAnswer<'a>,
    ) -> Self {
        Self { dependency, reason, method, uri, last, idempotency_key: None }
    }

    /// The key the call's attempts carried.
    fn with_idempotency_key(mut self, key: Option<&'a HeaderValue>) -> Self {
        self.idempotency_key = key;
        self
    }

    /// The dependency called, as the telemetry names it (`host`, or
    /// `host:port` off the scheme's default port).
    pub fn dependency(&self) -> &'a str {
        self.dependency
    }

    /// Why the fallback runs.
    pub fn reason(&self) -> FallbackReason {
        self.reason
    }

    /// The request's method.
    pub fn method(&self) -> &'a Method {
        self.method
    }

    /// The request's URI (the body is never kept for a fallback).
    pub fn uri(&self) -> &'a Uri {
        self.uri
    }

    /// The last response or error, if any.
    pub fn last(&self) -> LastAnswer<'a> {
        self.last
    }

    /// The idempotency key every attempt of the call carried (the caller's
    /// or a generated one), if it had one. A write that gave up may still
    /// have taken effect — an attempt cut by its timeout can complete on the
    /// server — so a fallback that queues the write for later sends it with
    /// this key: the server then runs it once, whichever copy arrives first.
    pub fn idempotency_key(&self) -> Option<&'a HeaderValue> {
        self.idempotency_key
    }
}

/// A fallback as the settings keep it.
type SharedFallback = Arc<dyn Fn(&FallbackContext<'_>) -> FallbackFuture + Send + Sync>;

/// A name given to `fallback_for` or `default_fallback` that no `fallback`
/// registered (or one dependency too many: [`MAX_FALLBACKS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFallback {
    name: String,
    known: Vec<String>,
    full: bool,
}

impl UnknownFallback {
    /// The name asked for.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The names registered at the time.
    pub fn known(&self) -> &[String] {
        &self.known
    }
}

impl fmt::Display for UnknownFallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.full {
            return write!(
                f,
                "fallback `{}` refused: at most {MAX_FALLBACKS} dependencies may have a fallback of their own",
                self.name
            );
        }
        write!(f, "no fallback named `{}` is registered (registered: ", self.name)?;
        match self.known.is_empty() {
            true => f.write_str("none; register it with `fallback` first)"),
            false => write!(f, "{})", self.known.join(", ")),
        }
    }
}

impl StdError for UnknownFallback {}

/// The fallbacks a builder registered and which dependency uses which.
#[derive(Clone, Default)]
pub struct FallbackSettings {
    by_name: Vec<(Arc<str>, SharedFallback)>,
    for_dependency: HashMap<Box<str>, usize>,
    default: Option<usize>,
}

impl fmt::Debug for FallbackSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackSettings")
            .field("names", &self.names().collect::<Vec<_>>())
            .field("for_dependency", &self.for_dependency.len())
            .field("default", &self.default.map(|i| &self.by_name[i].0))
            .finish()
    }
}

impl FallbackSettings {
    /// The registered names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.iter().map(|(name, _)| &**name)
    }

    /// Registers `fallback` as `name`, replacing one of the same name.
    /// Registrations are code, bounded by the program; what a configuration
    /// file can add (dependencies given a fallback) is capped by [`MAX_FALLBACKS`].
    pub fn register(&mut self, name: &str, fallback: SharedFallback) {
        match self.by_name.iter_mut().find(|(known, _)| &**known == name) {
            Some(slot) => slot.1 = fallback,
            None => self.by_name.push((Arc::from(name), fallback)),
        }
    }

    fn index(&self, name: &str) -> Result<usize, UnknownFallback> {
        self.by_name.iter().position(|(known, _)| &**known == name).ok_or_else(|| self.unknown(name, false))
    }

    fn unknown(&self, name: &str, full: bool) -> UnknownFallback {
        UnknownFallback { name: name.to_owned(), known: self.names().map(str::to_owned).collect(), full }
    }

    /// `dependency` uses the fallback registered as `name`.
    pub fn use_for(&mut self, dependency: &str, name: &str) -> Result<(), UnknownFallback> {
        let index = self.index(name)?;
        if self.for_dependency.len() >= MAX_FALLBACKS && !self.for_dependency.contains_key(dependency) {
            return Err(self.unknown(name, true));
        }
        self.for_dependency.insert(dependency.into(), index);
        Ok(())
    }

    /// Every dependency without a fallback of its own uses `name`.
    pub fn use_by_default(&mut self, name: &str) -> Result<(), UnknownFallback> {
        self.default = Some(self.index(name)?);
        Ok(())
    }

    /// What a built client keeps: `None` when no fallback is registered, so
    /// that a client without one pays nothing per call. A fallback registered
    /// but named for no dependency is kept: a configuration file may select
    /// it by name.
    pub fn build(self, meter: Option<&Meter>) -> Option<Arc<Fallbacks>> {
        if self.by_name.is_empty() {
            return None;
        }
        let counter = meter.map(|meter| {
            meter
                .u64_counter(names::FALLBACKS)
                .with_unit(names::UNIT_FALLBACK)
                .with_description("Calls whose fallback ran, by dependency and reason")
                .build()
        });
        Some(Arc::new(Fallbacks { settings: self, counter }))
    }
}

impl ClientSettings {
    /// The names of the fallbacks registered so far, in registration order:
    /// what a configuration file's `fallback = "name"` is checked against.
    pub(crate) fn fallback_names(&self) -> impl Iterator<Item = &str> {
        self.fallbacks.names()
    }
}

/// A built client's fallbacks.
pub struct Fallbacks {
    settings: FallbackSettings,
    counter: Option<Counter<u64>>,
}

impl fmt::Debug for Fallbacks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings.fmt(f)
    }
}

/// A fallback chosen for one call that gave up.
pub struct Chosen<'a> {
    name: &'a Arc<str>,
    fallback: &'a SharedFallback,
    reason: FallbackReason,
    counter: Option<&'a Counter<u64>>,
}

impl Fallbacks {
    /// The fallback `dependency`'s call runs, having stopped for `stop`;
    /// `None` on success, on a stop that must not run one, or without a
    /// fallback for it. Only asked once the engine stopped.
    ///
    /// A call of a configured client (`configured`) runs the fallback its
    /// file names for the dependency, if it names one, else the
    /// dependency's own from code; under the file's kill switch its reason
    /// is `kill_switch`.
    pub fn choose(
        &self,
        dependency: &str,
        stop: Option<(StopReason, u32)>,
        configured: Option<&crate::configured::CallConfig>,
    ) -> Option<Chosen<'_>> {
        let reason = FallbackReason::for_stop(stop?.0)?;
        let Some(configured) = configured else { return self.choose_for(dependency, reason) };
        let settings = configured.settings();
        let reason = if settings.enabled() { reason } else { FallbackReason::KillSwitch };
        match settings.fallback() {
            Some(named) => {
                let (name, fallback) = self.settings.by_name.iter().find(|(name, _)| &**name == named)?;
                Some(Chosen { name, fallback, reason, counter: self.counter.as_ref() })
            }
            None => self.choose_for(dependency, reason),
        }
    }

    /// The fallback `dependency` runs for `reason` (the kill switch's path).
    pub fn choose_for(&self, dependency: &str, reason: FallbackReason) -> Option<Chosen<'_>> {
        let index = self.settings.for_dependency.get(dependency).copied().or(self.settings.default)?;
        let (name, fallback) = self.settings.by_name.get(index)?;
        Some(Chosen { name, fallback, reason, counter: self.counter.as_ref() })
    }
}

impl Chosen<'_> {
    /// Why it runs.
    pub fn reason(&self) -> FallbackReason {
        self.reason
    }

    /// Answers a call to `dependency` that gave up: runs the fallback, told
    /// the request (its method, URI and the idempotency key its attempts
    /// carried, if any) and the `last` answer the call got, as `run` does.
    pub async fn answer(
        self,
        dependency: &str,
        (method, uri, key): (&Method, &Uri, Option<&HeaderValue>),
        last: LastAnswer<'_>,
        remaining: Option<Duration>,
    ) -> Result<http::Response<Bytes>, FallbackError> {
        let context =
            FallbackContext::new(dependency, self.reason, method, uri, last).with_idempotency_key(key);
        self.run(context, remaining).await
    }

    /// Runs the fallback for `context`, cut at `remaining` (the call's
    /// deadline left, if any), counts it and records its event on the
    /// current span. On success the response carries [`Fallback`]; on
    /// failure the fallback's error is returned, for [`FallbackFailed`].
    async fn run(
        self,
        context: FallbackContext<'_>,
        remaining: Option<Duration>,
    ) -> Result<http::Response<Bytes>, FallbackError> {
        let future = (self.fallback)(&context);
        let limit = remaining.unwrap_or(NO_DEADLINE_LIMIT);
        let result = match tokio::time::timeout(limit, future).await {
            Ok(result) => result,
            Err(_) => Err(Box::new(FallbackTimedOut(limit)) as BoxError),
        };
        let dependency = context.dependency();
        if let Some(counter) = self.counter {
            counter.add(
                1,
                &[
                    KeyValue::new(names::DEPENDENCY, dependency.to_owned()),
                    KeyValue::new(names::FALLBACK_REASON, self.reason.as_str()),
                ],
            );
        }
        let outcome = match result {
            Ok(_) => names::FALLBACK_SERVED,
            Err(_) => names::FALLBACK_FAILED,
        };
        tracing::event!(
            target: names::TARGET,
            tracing::Level::WARN,
            retryscope.dependency = dependency,
            retryscope.fallback.name = &**self.name,
            retryscope.fallback.reason = self.reason.as_str(),
            retryscope.fallback.result = outcome,
            message = names::FALLBACK_EVENT,
        );
        match result {
            Ok(mut response) => {
                response
                    .extensions_mut()
                    .insert(Fallback { name: Arc::clone(self.name), reason: self.reason });
                Ok(response)
            }
            Err(error) => Err(FallbackError { name: Arc::clone(self.name), reason: self.reason, error }),
        }
    }
}

/// What is left of a call's `deadline` (`None`: it has none), `started` at
/// its beginning: how long its fallback may run.
pub fn remaining(deadline: Option<Duration>, started: tokio::time::Instant) -> Option<Duration> {
    deadline.map(|deadline| deadline.saturating_sub(started.elapsed()))
}

/// A fallback as `WithClientSettings::fallback` registers it.
pub(crate) fn shared(
    f: impl Fn(&FallbackContext<'_>) -> FallbackFuture + Send + Sync + 'static,
) -> SharedFallback {
    Arc::new(f)
}
