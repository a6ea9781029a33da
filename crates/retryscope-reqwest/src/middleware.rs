//! The middleware: retries, classification, guards and telemetry per request.

use crate::options::RetryOptions;
use crate::release;
use crate::spans::{HttpAttemptSpan, Target};
use crate::transport;
use http::Extensions;
use opentelemetry::metrics::Meter;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use retryscope::classify::{Classify, HttpClassifier, Stage, has_idempotency_key, is_idempotent_method};
use retryscope::observe::StopRecorder;
use retryscope::outcome::Verdict;
use retryscope::{CircuitBreaker, ErrorType, Policy, RetryBudget, RetryError, Retryable, StopReason};
use retryscope_otel::{
    ATTEMPT_HEADER, DependencyGuards, EXHAUSTED_HEADER, Factory, Guards, OtelObserver, Upstream,
};
use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

/// Retries requests of an existing reqwest client, correctly and visibly.
///
/// Added with `reqwest_middleware::ClientBuilder::new(client).with(..)`; every
/// clone of the resulting client shares the middleware, and so its per-host
/// budgets and breakers.
///
/// - **What is retried**: statuses 408, 429, 500, 502, 503, 504 (configurable
///   through [`HttpClassifier`]) and transport failures (connect, reset,
///   timeout, incomplete response).
/// - **Only when safe**: idempotent methods, requests with an `Idempotency-Key`,
///   requests marked [`safe_to_retry`](RetryOptions::safe_to_retry), and — for any
///   method — failures to connect, where nothing reached the server. A request
///   whose body is a stream is sent once.
/// - **Server hints**: `Retry-After` and `RateLimit` from the response.
/// - **Guards**: a [`RetryBudget`] and a [`CircuitBreaker`] per dependency
///   (`host`, or `host:port` when the port is not the scheme's default), shared by
///   every clone of the client. At most
///   [`MAX_DEPENDENCIES`](retryscope_otel::MAX_DEPENDENCIES) dependencies are
///   told apart; further hosts share the guards and the label `_OTHER`.
/// - **Telemetry**: the metrics and spans of the [telemetry contract], with HTTP
///   client attempt spans, the budget and breaker gauges of every dependency,
///   and the W3C `traceparent` of each attempt on the wire. Build the middleware
///   *after* installing the OpenTelemetry providers (`retryscope_otel::init_otlp`
///   does), since its instruments bind to the providers global at that time. With
///   your own provider setup, also install a propagator —
///   `opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new())`
///   — or no `traceparent` goes out.
///
/// [telemetry contract]: https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md
///
/// When retries run out on a retryable *response* (a 503, say), the last response
/// is returned, as it would be without the middleware. Errors are returned as
/// they came when the engine judged them permanent; when it stopped for another
/// reason (attempts, deadline, budget, breaker, an over-long server hint) the
/// error is a `reqwest_middleware::Error::Middleware` holding a
/// [`RetryError`] that says why and keeps the last error as its source.
///
/// A failed response is not allowed to hold its connection through the backoff
/// wait that follows it: before the wait its body is read to the end in the
/// background (at most 64 KiB, within 1 s), which hands the connection back to
/// the pool for the retry and for other requests, or else dropped, which closes
/// the connection. Status, headers and URL are kept, so if the next attempt is
/// refused (the breaker opened, the deadline passed) the caller still gets the
/// response, without its body.
pub struct RetryMiddleware {
    policy: Policy,
    classifier: HttpClassifier,
    telemetry: Option<OtelObserver>,
    dependencies: DependencyGuards<RetryBudget>,
    layers: Layers,
}

/// How the middleware takes part in a call chain's retries.
#[derive(Debug, Clone)]
struct Layers {
    /// The header that tells the next hop which attempt it receives; `None`
    /// sends nothing.
    attempt_header: Option<HeaderName>,
    /// Retry only where no other layer does.
    one_layer: bool,
}

impl RetryMiddleware {
    /// Retries with `policy`, instrumented through the global OpenTelemetry
    /// providers (install them first), with a default [`RetryBudget`] and a
    /// default [`CircuitBreaker`] per dependency.
    pub fn new(policy: Policy) -> Self {
        Self::builder(policy).build()
    }

    /// Configures a middleware.
    pub fn builder(policy: Policy) -> RetryMiddlewareBuilder {
        RetryMiddlewareBuilder {
            policy,
            classifier: HttpClassifier::new(),
            telemetry: Telemetry::Global,
            budget: Some(Arc::new(RetryBudget::new)),
            breaker: Some(Arc::new(CircuitBreaker::new)),
            layers: Layers { attempt_header: Some(ATTEMPT_HEADER), one_layer: false },
        }
    }
}

/// Builds a [`RetryMiddleware`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct RetryMiddlewareBuilder {
    policy: Policy,
    classifier: HttpClassifier,
    telemetry: Telemetry,
    budget: Option<Factory<RetryBudget>>,
    breaker: Option<Factory<CircuitBreaker>>,
    layers: Layers,
}

impl RetryMiddlewareBuilder {
    /// Names the header that tells the server which attempt a retry is
    /// (default [`retry-attempt`](retryscope_otel::ATTEMPT_HEADER), sent from the
    /// second attempt on), e.g. `x-envoy-attempt-count` where Envoy-style
    /// servers read it.
    pub fn attempt_header(mut self, name: HeaderName) -> Self {
        self.layers.attempt_header = Some(name);
        self
    }

    /// Sends no attempt header.
    pub fn no_attempt_header(mut self) -> Self {
        self.layers.attempt_header = None;
        self
    }

    /// Retries only where no other layer of the call chain retries (off by
    /// default). Inside a request served under
    /// [`Upstream::scope`](retryscope_otel::Upstream::scope) (as
    /// `retryscope-tower`'s server layer does), a request that is itself a retry
    /// makes one attempt downstream; and a failed response that says the layer
    /// below already retried ([`retry-exhausted`](retryscope_otel::EXHAUSTED_HEADER))
    /// is not retried. Either is reported as throttled, reason `upstream_retry`.
    ///
    /// Use it in services in the middle of a chain: without it, four attempts
    /// at each of three layers make 64 calls at the bottom for one user request;
    /// with it, four.
    pub fn retry_at_one_layer(mut self) -> Self {
        self.layers.one_layer = true;
        self
    }

    /// Which statuses are retried.
    pub fn classifier(mut self, classifier: HttpClassifier) -> Self {
        self.classifier = classifier;
        self
    }

    /// Records metrics, and each dependency's budget and breaker gauges, with
    /// `meter` instead of the global meter provider's.
    pub fn meter(mut self, meter: &Meter) -> Self {
        self.telemetry = Telemetry::Meter(meter.clone());
        self
    }

    /// Gives each dependency a budget made by `make` (default: [`RetryBudget::new`]).
    pub fn budget_per_host(mut self, make: impl Fn() -> RetryBudget + Send + Sync + 'static) -> Self {
        self.budget = Some(Arc::new(make));
        self
    }

    /// Retries without a budget: only the policy bounds them.
    pub fn no_budget(mut self) -> Self {
        self.budget = None;
        self
    }

    /// Gives each dependency a circuit breaker made by `make` (default:
    /// [`CircuitBreaker::new`]: open at 50 % failures over at least 20 calls in
    /// 10 s, 5 s cool-down).
    pub fn breaker_per_host(mut self, make: impl Fn() -> CircuitBreaker + Send + Sync + 'static) -> Self {
        self.breaker = Some(Arc::new(make));
        self
    }

    /// Calls every dependency, however often it fails: no circuit breaker.
    pub fn no_breaker(mut self) -> Self {
        self.breaker = None;
        self
    }

    /// Records no telemetry at all.
    pub fn without_telemetry(mut self) -> Self {
        self.telemetry = Telemetry::Off;
        self
    }

    /// The middleware.
    pub fn build(self) -> RetryMiddleware {
        let meter = match self.telemetry {
            Telemetry::Global => Some(opentelemetry::global::meter_with_scope(retryscope_otel::scope())),
            Telemetry::Meter(meter) => Some(meter),
            Telemetry::Off => None,
        };
        let guards = DependencyGuards::builder().budget_factory(self.budget).breaker_factory(self.breaker);
        let guards = match &meter {
            Some(meter) => guards.meter(meter.clone()),
            None => guards,
        };
        RetryMiddleware {
            policy: self.policy,
            classifier: self.classifier,
            telemetry: meter.as_ref().map(OtelObserver::from_meter),
            dependencies: guards.build(),
            layers: self.layers,
        }
    }
}

/// Where the middleware's metrics go.
enum Telemetry {
    Global,
    Meter(Meter),
    Off,
}

impl fmt::Debug for RetryMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryMiddleware")
            .field("policy", &self.policy)
            .field("classifier", &self.classifier)
            .field("dependencies", &self.dependencies)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl Middleware for RetryMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let options = extensions.get::<RetryOptions>().cloned().unwrap_or_default();
        let target = Target::of(&request);
        let guards = self.dependencies.get(&target.dependency);
        let upstream = Upstream::current();
        let mut classifier = RequestClassifier::for_request(self.classifier, &request, &options);
        if self.layers.one_layer {
            classifier.one_layer(upstream.as_ref());
        }
        let replayable = classifier.replayable;
        let mut source = RequestSource::new(request);
        let stop = StopRecorder::default();
        let snapshot = extensions.clone();
        let telemetry =
            self.telemetry.clone().map(|o| o.with_attempt_spans(HttpAttemptSpan { target: &target }));

        let mut number = 0;
        let attempt_header = self.layers.attempt_header.as_ref();
        let attempt = || {
            number += 1;
            let request = source.next();
            let (next, mut extensions) = (next.clone(), snapshot.clone());
            let announce =
                attempt_header.filter(|_| number > 1).map(|name| (name.clone(), HeaderValue::from(number)));
            async move {
                let span = tracing::Span::current();
                let mut request =
                    request.ok_or_else(|| reqwest_middleware::Error::middleware(NotReplayable))?;
                if !replayable {
                    tracing::info!(parent: &span, "the request body is a stream: it is sent once and never retried");
                }
                retryscope_otel::inject_context(request.headers_mut());
                if let Some((name, value)) = announce {
                    request.headers_mut().insert(name, value);
                }
                let result = next.run(request, &mut extensions).await;
                if let Ok(response) = &result {
                    span.record("http.response.status_code", i64::from(response.status().as_u16()));
                }
                result
            }
        };
        let outcome = guarded(
            attempt
                .retry(options.policy.unwrap_or(self.policy))
                .with_classifier(&mut classifier)
                .observe((telemetry, stop.clone()))
                .dependency(guards.dependency()),
            &guards,
            options.operation.as_deref(),
        )
        .await;
        let stop = stop.stopped();
        if let (Some(upstream), Some((reason, attempts))) = (&upstream, stop) {
            // Tell the server we run in that retries below ran out, so that it
            // can tell its own caller not to retry.
            if attempts > 1 && reason != StopReason::Permanent {
                upstream.retries_exhausted(attempts);
            }
        }
        finish(outcome, stop, replayable)
    }
}

/// Attaches the dependency's guards and the operation name.
fn guarded<'a, Op, C, O, N>(
    retry: retryscope::Retry<'a, Op, C, O, N>,
    guards: &'a Guards<RetryBudget>,
    operation: Option<&'a str>,
) -> retryscope::Retry<'a, Op, C, O, N> {
    let retry = match guards.budget() {
        Some(budget) => retry.budget(budget),
        None => retry,
    };
    let retry = match guards.breaker() {
        Some(breaker) => retry.breaker(breaker),
        None => retry,
    };
    match operation {
        Some(operation) => retry.operation(operation),
        None => retry,
    }
}

/// Turns the engine's result into what reqwest-middleware callers expect.
fn finish(
    outcome: Result<Response, RetryError<reqwest_middleware::Error>>,
    stop: Option<(StopReason, u32)>,
    replayable: bool,
) -> reqwest_middleware::Result<Response> {
    let error = match outcome {
        // The server asked for a wait we will not make: say so rather than hand
        // back a 429 as if nothing had been decided.
        Ok(response) => {
            return match stop {
                Some((reason @ StopReason::HintTooLong { .. }, attempts)) => {
                    let status = ErrorType::Status(response.status().as_u16());
                    Err(gave_up(RetryError::new(reason, attempts, Some(status), None)))
                }
                _ => Ok(response),
            };
        }
        Err(error) => error,
    };
    let reason = error.reason();
    if !matches!(reason, StopReason::Permanent | StopReason::Unrepeatable) {
        return Err(gave_up(error));
    }
    // An error the engine chose not to retry passes through as it came: the
    // engine added nothing but that decision, which the telemetry records.
    let (attempts, error_type) = (error.attempts(), error.error_type());
    match error.into_last_error() {
        Some(last) if !replayable && reason == StopReason::Unrepeatable => {
            Err(reqwest_middleware::Error::middleware(NotRetried { source: last }))
        }
        Some(last) => Err(last),
        // A timeout on a request that may have reached the server.
        None => Err(gave_up(RetryError::new(reason, attempts, error_type, None))),
    }
}

fn gave_up(error: RetryError<reqwest_middleware::Error>) -> reqwest_middleware::Error {
    reqwest_middleware::Error::middleware(error)
}

/// Classifies each attempt of one request: statuses, transport failures, and
/// whether running the request again is safe.
struct RequestClassifier {
    http: HttpClassifier,
    /// Whether the request may run again after it reached the server.
    safe_after_sent: bool,
    /// Whether the body can be sent again at all.
    replayable: bool,
    /// Retries at one layer: every transient failure is retried elsewhere
    /// (the request served is itself a retry).
    retried_upstream: bool,
    /// Retries at one layer: a response saying the layer below retried is not
    /// retried again.
    honour_exhausted: bool,
}

impl RequestClassifier {
    fn for_request(http: HttpClassifier, request: &Request, options: &RetryOptions) -> Self {
        let safe_after_sent = is_idempotent_method(request.method())
            || has_idempotency_key(request.headers())
            || options.safe_to_retry;
        let replayable = is_replayable(request);
        Self { http, safe_after_sent, replayable, retried_upstream: false, honour_exhausted: false }
    }

    /// Retries only where no other layer does, serving `upstream`.
    fn one_layer(&mut self, upstream: Option<&Upstream>) {
        self.honour_exhausted = true;
        self.retried_upstream = upstream.is_some_and(|u| u.attempt().is_retry());
    }

    /// Turns a retryable verdict into an unrepeatable one when retrying could
    /// run the request twice, or could not resend it. The failure still counts
    /// against the host's breaker and budget.
    fn guard(&self, verdict: Verdict, stage: Stage) -> Verdict {
        match verdict {
            Verdict::Retryable { error, .. }
                if !self.replayable || (stage == Stage::Sent && !self.safe_after_sent) =>
            {
                Verdict::unrepeatable(error)
            }
            Verdict::Retryable { error, .. } if self.retried_upstream => Verdict::retried_elsewhere(error),
            verdict => verdict,
        }
    }
}

impl Classify<Response, reqwest_middleware::Error> for &mut RequestClassifier {
    fn classify(&mut self, result: &Result<Response, reqwest_middleware::Error>) -> Verdict {
        let (verdict, stage) = match result {
            Ok(response) => {
                let verdict =
                    self.http.classify_response(response.status(), response.headers(), SystemTime::now());
                match verdict {
                    Verdict::Retryable { error, .. }
                        if self.honour_exhausted && response.headers().contains_key(EXHAUSTED_HEADER) =>
                    {
                        (Verdict::retried_elsewhere(error), Stage::Sent)
                    }
                    verdict => (verdict, Stage::Sent),
                }
            }
            Err(error) => {
                let failure = transport::classify(error);
                (failure.verdict, failure.stage)
            }
        };
        self.guard(verdict, stage)
    }

    fn timeout(&mut self) -> Verdict {
        // The request was on the wire when the engine gave up on it.
        self.guard(Verdict::retryable(ErrorType::TIMEOUT), Stage::Sent)
    }

    fn before_wait(
        &mut self,
        kept: Result<Response, reqwest_middleware::Error>,
    ) -> Result<Response, reqwest_middleware::Error> {
        // An unread body would pin its connection for the whole wait.
        kept.map(release::release_body)
    }
}

/// Whether the request can be sent again: no body, or a body held in memory
/// (a stream is consumed by sending it).
fn is_replayable(request: &Request) -> bool {
    request.body().is_none_or(|body| body.as_bytes().is_some())
}

/// Hands out the request for each attempt: clones of a replayable request, or a
/// streaming request exactly once.
enum RequestSource {
    Replayable(Request),
    Once(Option<Request>),
}

impl RequestSource {
    fn new(request: Request) -> Self {
        if is_replayable(&request) { Self::Replayable(request) } else { Self::Once(Some(request)) }
    }

    fn next(&mut self) -> Option<Request> {
        match self {
            Self::Replayable(request) => request.try_clone(),
            Self::Once(request) => request.take(),
        }
    }
}

/// A request failed in a way that would have been retried, but its body is a
/// stream that cannot be sent again.
#[derive(Debug)]
pub struct NotRetried {
    source: reqwest_middleware::Error,
}

impl fmt::Display for NotRetried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not retried: the request body is a stream and cannot be sent again")
    }
}

impl StdError for NotRetried {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.source)
    }
}

/// The engine asked for a second attempt of a request that can only be sent once.
/// The classifier prevents this; the error exists so that a bug cannot turn into
/// a panic or a silently duplicated request.
#[derive(Debug)]
struct NotReplayable;

impl fmt::Display for NotReplayable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request body cannot be sent again")
    }
}

impl StdError for NotReplayable {}
