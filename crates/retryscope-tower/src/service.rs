//! The service: one logical request, its attempts, and what the caller gets.

#[cfg(feature = "grpc")]
use crate::body::Held;
use crate::body::{ReplayBody, ResponseBody, Source};
use crate::classify::{AttemptClassifier, Layers, Mode};
use crate::error::{BoxError, GaveUp, NotReplayable, NotRetried};
use crate::guard::Guard;
use crate::settings::Settings;
use crate::spans::AttemptSpan;
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use retryscope::hedge::{HedgePolicy, Hedgeable};
use retryscope::observe::StopRecorder;
use retryscope::{Pacer, Policy, RetryError, Retryable, StopReason, hints};
use retryscope_http::RetryOptions;
use retryscope_http::body_rule::SharedBodyRule;
use retryscope_http::idempotency::KeySource;
use retryscope_http::shape::{Shaped, shape};
use retryscope_otel::Guards;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tower_service::Service;
use tracing::Span;

/// A tower service whose requests are retried: made by [`RetryLayer`](crate::RetryLayer).
#[derive(Clone)]
pub struct RetryService<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> RetryService<S> {
    pub(crate) fn new(inner: S, settings: Arc<Settings>) -> Self {
        Self { inner, settings }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for RetryService<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryService").field("inner", &self.inner).finish_non_exhaustive()
    }
}

/// The future of a [`RetryService`] call. Dropping it cancels the running
/// attempt (or the wait before the next one); no attempt starts after.
pub struct ResponseFuture<T> {
    inner: Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>,
}

impl<T> Future for ResponseFuture<T> {
    type Output = Result<T, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<T> fmt::Debug for ResponseFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S, B, ResB> Service<Request<B>> for RetryService<S>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: ReplayBody,
    B::Error: Into<BoxError>,
    ResB: Body + Send + 'static,
    ResB::Data: Send,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = BoxError;
    type Future = ResponseFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The service made ready by `poll_ready` serves the first attempt; a clone
        // takes its place for the caller's next request (tower's usual dance).
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let settings = Arc::clone(&self.settings);
        ResponseFuture { inner: Box::pin(run(settings, ready, request)) }
    }
}

/// One logical request, from the caller's request to its response.
async fn run<S, B, ResB>(
    settings: Arc<Settings>,
    ready: S,
    request: Request<B>,
) -> Result<Response<ResponseBody<ResB>>, BoxError>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: ReplayBody,
    B::Error: Into<BoxError>,
    ResB: Body + Send + 'static,
    ResB::Data: Send,
    ResB::Error: Into<BoxError>,
{
    let (mut parts, body) = request.into_parts();
    let options = parts.extensions.get::<RetryOptions>().cloned().unwrap_or_default();
    let (mut call, method) = Call::plan(&settings, &parts, &options);
    let guards = settings.guards_for(&parts.uri);
    let source = Source::read(body, settings.replay_limit).await.map_err(Into::into)?;
    let replayable = source.is_replayable();
    // Once per call, before any attempt: every attempt clones these headers.
    // gRPC calls get none: A6 retries what the service config opts in.
    let key = match call.grpc {
        true => None,
        false => settings.idempotency.apply(&parts.method, &mut parts.headers, &parts.extensions, replayable),
    };
    call.keyed(key);
    // Shared by the attempts and their spans from here on.
    let parts = Arc::new(parts);
    let upstream = retryscope_otel::Upstream::current();
    let layers = match (&upstream, settings.one_layer) {
        (upstream, true) => Layers {
            retried_upstream: upstream.as_ref().is_some_and(|u| u.attempt().is_retry()),
            honour_exhausted: true,
        },
        (_, false) => Layers::default(),
    };
    let classifier = AttemptClassifier { mode: call.mode, rule: settings.rule.clone(), replayable, layers };
    let telemetry = settings.telemetry.clone().map(|o| {
        o.with_attempt_spans(AttemptSpan {
            request: Arc::clone(&parts),
            origin: settings.origin.clone(),
            grpc: call.grpc,
            idempotency_key: key,
        })
    });
    // A gRPC call is the method it calls, unless the caller named it.
    let operation = match options.operation_name() {
        Some(operation) => Some(retryscope_otel::bounded_operation(operation)),
        #[cfg(feature = "grpc")]
        None => method.map(|method| method.operation()),
        #[cfg(not(feature = "grpc"))]
        None => method.map(|never| match never {}),
    };
    let stop = StopRecorder::default();
    // gRPC's own metrics (A66, A96) follow the call to the caller.
    #[cfg(feature = "grpc")]
    let metrics =
        settings.grpc_metrics.as_ref().filter(|_| call.grpc).map(|m| m.call(parts.uri.path(), &parts.uri));
    #[cfg(feature = "grpc")]
    let observed = metrics.clone();
    #[cfg(not(feature = "grpc"))]
    let observed: Option<retryscope::observe::NoObserver> = None;

    let template = ready.clone();
    let mut attempts = Attempts {
        ready: Some(ready),
        template,
        parts,
        source,
        number: 0,
        call,
        attempt_header: settings.attempt_header.clone(),
        body_rule: settings.body_rule.clone(),
        pacer: guards.pacer().cloned(),
        #[cfg(feature = "grpc")]
        started: None,
        #[cfg(feature = "grpc")]
        metrics: metrics.clone(),
    };
    let observer = (((telemetry, settings.retry_log), stop.clone()), observed);
    let started = tokio::time::Instant::now();
    let outcome = match hedging(&guards, &call, replayable) {
        // Copies overlap: each is an attempt of its own (its body, its span,
        // its `grpc-previous-rpc-attempts`), and the first acceptable one wins.
        Some(policy) => {
            let hedge = (move || attempts.next()).hedge(policy).with_classifier(classifier).observe(observer);
            // Every copy is admitted as a retry's attempt is: the pacer
            // before each, the budget for every copy beyond the first.
            let hedge = guards.guard(hedge, operation);
            hedge.await
        }
        None => {
            let retry =
                (move || attempts.next()).retry(call.policy).with_classifier(classifier).observe(observer);
            // Borrowed from the dependency's guards, which this call holds.
            let retry = guards.guard(retry, operation);
            retry.await
        }
    };
    let stop = stop.stopped();
    if let Some(upstream) = &upstream {
        // So that the server this runs in tells its own caller not to retry.
        upstream.client_finished(stop, outcome.as_ref().ok().map(Response::headers));
    }
    #[cfg(feature = "grpc")]
    if let Mode::Grpc { codes } = call.mode {
        let ending = crate::grpc::stop::Ending {
            replayable,
            expired: call.policy.deadline().is_some_and(|deadline| started.elapsed() >= deadline),
            codes,
            guard: guards.budget().map(crate::guard::Guard::name),
        };
        return follow_metrics(crate::grpc::stop::finish(outcome, stop, ending), metrics);
    }
    let _ = started;
    finish(outcome, stop, replayable, call.grpc)
}

/// Hands the call's gRPC metrics to the response, which ends them when its
/// status reaches the caller; an error ends them now.
#[cfg(feature = "grpc")]
fn follow_metrics<B: Body>(
    mut result: Result<Response<ResponseBody<B>>, BoxError>,
    metrics: Option<crate::grpc::metrics::CallMetrics>,
) -> Result<Response<ResponseBody<B>>, BoxError> {
    if let Some(tail) = metrics.and_then(|m| m.outcome(&result))
        && let Ok(response) = &mut result
    {
        response.body_mut().follow(tail);
    }
    result
}

/// The hedging policy a request runs with, if it is hedged: a gRPC method
/// whose service config has a `hedgingPolicy`, or — when the layer hedges —
/// an HTTP request with an idempotent method
/// ([`may_hedge`](retryscope_http::safety::may_hedge); a keyed POST is retried,
/// not hedged). Either only with a body that can be sent again:
/// every copy needs it. Other requests take the retry path.
///
/// The layer's policy is the dependency's own copy of it (its guards'), so
/// that a percentile delay learns from that server's latencies alone; a gRPC
/// method's is built from its `hedgingPolicy`, whose delay is fixed.
fn hedging(guards: &Guards<Guard>, call: &Call, replayable: bool) -> Option<HedgePolicy> {
    if !replayable {
        return None;
    }
    match call.hedged? {
        Hedged::Layer => guards.hedge().cloned(),
        // Loaded and checked with the service config; the deadline is the
        // call's (its `grpc-timeout` included).
        #[cfg(feature = "grpc")]
        Hedged::Method(hedging) => hedging.policy(&call.policy).ok(),
    }
}

/// The gRPC method a call calls, as the layer knows it.
#[cfg(feature = "grpc")]
type Called = Arc<crate::grpc::methods::Method>;
/// Without `grpc`, no call calls a method.
#[cfg(not(feature = "grpc"))]
type Called = std::convert::Infallible;

/// Where a hedged request's hedging policy comes from.
#[derive(Debug, Clone, Copy)]
enum Hedged {
    /// The HTTP layer's `.hedge(..)`.
    Layer,
    /// The gRPC method's `hedgingPolicy`.
    #[cfg(feature = "grpc")]
    Method(crate::grpc::Hedging),
}

/// How one request is retried: its policy and semantics.
#[derive(Debug, Clone, Copy)]
struct Call {
    policy: Policy,
    mode: Mode,
    grpc: bool,
    /// Whether the request is hedged rather than retried (a body that cannot
    /// be sent again makes it retried after all: see [`hedging`]).
    hedged: Option<Hedged>,
    /// Whether the call's deadline goes on the wire as `grpc-timeout`: only a
    /// deadline the caller set itself does. The policy's own deadline (a
    /// preset's 15 s) bounds the retries here and is nobody else's business —
    /// a server would otherwise end a long-lived stream at it.
    #[cfg(feature = "grpc")]
    sends_deadline: bool,
}

impl Call {
    /// How `parts` is retried, and for a gRPC call the method it calls.
    fn plan(settings: &Settings, parts: &Parts, options: &RetryOptions) -> (Self, Option<Called>) {
        #[cfg(feature = "grpc")]
        if let Some(grpc) = &settings.grpc {
            let called = settings.methods.get(grpc, parts.uri.path());
            let method = called.retry;
            let policy =
                options.policy_override().or(method.as_ref().map(|m| m.policy)).unwrap_or_else(send_once);
            // A policy given for one call retries what gRPC usually retries.
            let unlisted = if options.policy_override().is_some() {
                crate::grpc::CodeSet::UNAVAILABLE
            } else {
                crate::grpc::CodeSet::EMPTY
            };
            let codes = method.as_ref().map_or(unlisted, |m| m.codes);
            // A policy given for one call retries it instead.
            let hedged = method
                .as_ref()
                .and_then(|m| m.hedging)
                .filter(|_| options.policy_override().is_none())
                .map(Hedged::Method);
            // The caller's `grpc-timeout` is the deadline of the whole call.
            let timeout = crate::grpc::headers::timeout(&parts.headers);
            let policy = match timeout {
                Some(timeout) => within(policy, timeout),
                None => policy,
            };
            let call = Self {
                policy,
                mode: Mode::Grpc { codes },
                grpc: true,
                hedged,
                sends_deadline: timeout.is_some(),
            };
            return (call, Some(called));
        }
        let safe_after_sent =
            retryscope_http::safety::safe_after_sent(&parts.method, &parts.headers, options);
        // Hedging only what may run twice at once; a policy given for one
        // request retries it instead.
        let hedged = (settings.hedge.is_some()
            && retryscope_http::safety::may_hedge(&parts.method)
            && options.policy_override().is_none())
        .then_some(Hedged::Layer);
        let call = Self {
            policy: options.policy_override().unwrap_or(settings.policy),
            mode: Mode::Http { classifier: settings.classifier, safe_after_sent },
            grpc: false,
            hedged,
            #[cfg(feature = "grpc")]
            sends_deadline: false,
        };
        (call, None)
    }
}

impl Call {
    /// An HTTP request with an idempotency key may run again once sent.
    fn keyed(&mut self, key: Option<KeySource>) {
        if let (Mode::Http { safe_after_sent, .. }, Some(_)) = (&mut self.mode, key) {
            *safe_after_sent = true;
        }
    }
}

/// One attempt and no wait.
#[cfg(feature = "grpc")]
fn send_once() -> Policy {
    Policy::builder().max_attempts(1).no_deadline().build().unwrap_or_default()
}

/// `policy` with its deadline shortened to `timeout` (never lengthened).
#[cfg(feature = "grpc")]
fn within(policy: Policy, timeout: std::time::Duration) -> Policy {
    let deadline = policy.deadline().map_or(timeout, |d| d.min(timeout));
    // A zero or over-long timeout makes no valid policy: keep the one we have.
    policy.to_builder().deadline(deadline).build().unwrap_or(policy)
}

/// Hands out the attempts of one request: the ready service first, a clone made
/// ready afresh for every retry, and the request rebuilt around its body.
struct Attempts<S, B> {
    ready: Option<S>,
    template: S,
    /// The request's head, shared with a transparent retry.
    parts: Arc<Parts>,
    source: Source<B>,
    number: u32,
    call: Call,
    /// The header that tells an HTTP server which attempt a retry is.
    attempt_header: Option<http::HeaderName>,
    /// The user's rule that reads selected bodies (HTTP only).
    body_rule: Option<SharedBodyRule>,
    /// The dependency's pacer, told what every response says about pace.
    pacer: Option<Pacer>,
    /// When the first attempt started: `grpc-timeout` counts from there.
    #[cfg(feature = "grpc")]
    started: Option<tokio::time::Instant>,
    /// gRPC's call metrics; each attempt's body counts what it sends. A
    /// transparent retry calls `CallMetrics::transparent_retry_started` before
    /// making its body.
    #[cfg(feature = "grpc")]
    metrics: Option<crate::grpc::metrics::CallMetrics>,
}

impl<S, B, ResB> Attempts<S, B>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: ReplayBody,
    ResB: Body + Send + 'static,
    ResB::Data: Send,
    ResB::Error: Into<BoxError>,
{
    fn next(
        &mut self,
    ) -> impl Future<Output = Result<Response<ResponseBody<ResB>>, BoxError>> + Send + use<S, B, ResB> {
        self.number += 1;
        let number = self.number;
        // Kept by the attempt for its transparent retry, which asks it afresh.
        let mut service = match self.ready.take() {
            Some(ready) => ready,
            None => self.ready_clone(),
        };
        #[cfg(feature = "grpc")]
        let body = self.source.next_metered(self.metrics.as_ref().map(|m| m.sent_meter()));
        #[cfg(not(feature = "grpc"))]
        let body = self.source.next();
        let replayable = self.source.is_replayable();
        let mut parts = Parts::clone(&self.parts);
        #[cfg(feature = "grpc")]
        if self.call.grpc {
            self.grpc_metadata(&mut parts, number);
        }
        if let Some(name) = self.attempt_header.as_ref().filter(|_| number > 1 && !self.call.grpc) {
            parts.headers.insert(name.clone(), http::HeaderValue::from(number));
        }
        let grpc = self.call.grpc;
        let pacer = self.pacer.clone();
        let body_rule = self.body_rule.clone().filter(|_| !grpc);
        // A6's transparent retry: a first attempt the server refused before
        // processing it is sent once more at once, whatever the retry policy,
        // and not counted as an attempt. It needs the body again; what it
        // needs is kept (the shared head, the body's bytes) and the request is
        // made only if the server refuses the first one.
        #[cfg(feature = "grpc")]
        let transparent = (grpc && number == 1).then(|| self.transparent()).flatten();
        #[cfg(not(feature = "grpc"))]
        let transparent: Option<std::convert::Infallible> = None;
        async move {
            // Polled inside the attempt's scope: this is the attempt span.
            let span = Span::current();
            let Some(body) = body else { return Err(NotReplayable.into()) };
            if !replayable && number == 1 {
                tracing::info!(
                    parent: &span,
                    "the request body is streamed or larger than the replay limit: it is sent once and never retried"
                );
            }
            let sent = match ready(&mut service).await {
                Ok(()) => send(&mut service, Request::from_parts(parts, body), &span).await,
                Err(error) => Err(error),
            };
            let response = match sent {
                Err(error) => match (&transparent, unprocessed(&error)) {
                    #[cfg(feature = "grpc")]
                    (Some(transparent), Some(why)) => {
                        tracing::info!(parent: &span, "transparent retry: {why}");
                        ready(&mut service).await?;
                        send(&mut service, transparent.request(), &span).await?
                    }
                    _ => return Err(error),
                },
                Ok(response) => response,
            };
            let response = response.map(ResponseBody::new);
            if grpc {
                #[cfg(feature = "grpc")]
                if let Some(pacer) = &pacer {
                    pacer.learn(&crate::grpc::headers::pace_signal(response.headers()));
                }
                return Ok(read_status(response, &span));
            }
            span.record("http.response.status_code", i64::from(response.status().as_u16()));
            if let Some(pacer) = &pacer {
                let now = std::time::SystemTime::now();
                pacer.learn(&hints::pace_signal(response.status().as_u16(), response.headers(), now));
            }
            match body_rule.filter(|rule| rule.wants_body(response.status(), response.headers())) {
                // Inside the attempt: its timeout bounds the read. Boxed: the
                // read's state would otherwise take room in every attempt's
                // future, which is moved many times, for a rule few responses
                // meet.
                Some(rule) => Box::pin(judge(response, rule)).await,
                None => Ok(response),
            }
        }
    }

    /// A clone of the service for a retry; readiness is awaited in the attempt.
    fn ready_clone(&self) -> S {
        self.template.clone()
    }

    /// What the first attempt's transparent retry needs, if its body can be
    /// sent again.
    #[cfg(feature = "grpc")]
    fn transparent(&self) -> Option<Transparent> {
        Some(Transparent {
            parts: Arc::clone(&self.parts),
            body: self.source.spare()?,
            metrics: self.metrics.clone(),
            // The call's deadline, if it goes on the wire: the transparent
            // retry carries what is left of it when it is sent.
            deadline: self.started.zip(self.call.policy.deadline().filter(|_| self.call.sends_deadline)),
        })
    }

    /// `grpc-previous-rpc-attempts` on every retry, and — when the caller set
    /// a deadline — `grpc-timeout` set to what is left of it.
    #[cfg(feature = "grpc")]
    fn grpc_metadata(&mut self, parts: &mut Parts, number: u32) {
        use crate::grpc::headers;
        let now = tokio::time::Instant::now();
        let started = *self.started.get_or_insert(now);
        if number > 1 {
            parts.headers.insert(headers::PREVIOUS_ATTEMPTS, headers::previous_attempts(number - 1));
        }
        if let Some(deadline) = self.call.policy.deadline().filter(|_| self.call.sends_deadline) {
            let remaining = deadline.saturating_sub(now.saturating_duration_since(started));
            parts.headers.insert(headers::TIMEOUT, headers::timeout_value(remaining));
        }
    }
}

/// Reads ahead in `response` for the body rule, which judges it.
async fn judge<ResB>(
    response: Response<ResponseBody<ResB>>,
    rule: SharedBodyRule,
) -> Result<Response<ResponseBody<ResB>>, BoxError>
where
    ResB: Body + Send + 'static,
    ResB::Error: Into<BoxError>,
{
    let (parts, mut body) = response.into_parts();
    body.judge(&rule, parts.status, &parts.headers).await.map_err(Into::into)?;
    Ok(Response::from_parts(parts, body))
}

/// A fresh readiness check before every send: a retry must not bypass the
/// inner service's backpressure (a buffer, a concurrency limit).
async fn ready<S, B>(service: &mut S) -> Result<(), BoxError>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
{
    poll_fn(|cx| service.poll_ready(cx)).await.map_err(Into::into)
}

/// One attempt on the wire, once the service is [`ready`]: the W3C context of
/// the attempt span (`span`, the current one), and the call. Not an `async
/// fn`: its future holds only the inner service's, not the request a second
/// time (it is moved many times with the attempt's).
fn send<S, B, ResB>(
    service: &mut S,
    mut request: Request<B>,
    span: &Span,
) -> impl Future<Output = Result<Response<ResB>, BoxError>> + use<S, B, ResB>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
{
    // A span no subscriber took has no context to propagate.
    if !span.is_disabled() {
        retryscope_otel::inject_span_context(span, request.headers_mut());
    }
    let call = service.call(request);
    async move { call.await.map_err(Into::into) }
}

/// What A6's transparent retry of a first attempt needs to make its request
/// if the server refuses the first one unprocessed: the request's head (shared
/// with the attempts), a copy of the body held in memory (its bytes are
/// shared), gRPC's call metrics, and the call's deadline if it goes on the
/// wire (the instant the call started and the deadline's length).
#[cfg(feature = "grpc")]
struct Transparent {
    parts: Arc<Parts>,
    body: Held,
    metrics: Option<crate::grpc::metrics::CallMetrics>,
    deadline: Option<(tokio::time::Instant, std::time::Duration)>,
}

#[cfg(feature = "grpc")]
impl Transparent {
    /// The request sent again: `grpc-timeout` set to what is left now of the
    /// call's deadline, and the call's metrics told that a transparent retry
    /// starts (A96), with the counter its body's meter adds to.
    fn request<B: ReplayBody>(&self) -> Request<B> {
        use crate::grpc::headers;
        let meter = self.metrics.as_ref().map(|metrics| {
            let (meter, counter) = crate::grpc::metrics::CallMetrics::transparent_meter();
            metrics.transparent_retry_started(counter);
            meter
        });
        let mut parts = Parts::clone(&self.parts);
        if let Some((started, deadline)) = self.deadline {
            let remaining = deadline.saturating_sub(started.elapsed());
            parts.headers.insert(headers::TIMEOUT, headers::timeout_value(remaining));
        }
        Request::from_parts(parts, self.body.replay().metered(meter))
    }
}

/// Whether a failed attempt never reached the server's application (gRPC
/// only: an HTTP request gets no transparent retry).
#[cfg(feature = "grpc")]
fn unprocessed(error: &BoxError) -> Option<&'static str> {
    crate::grpc::reset::unprocessed(error).map(crate::grpc::reset::Unprocessed::describe)
}

#[cfg(not(feature = "grpc"))]
fn unprocessed(_: &BoxError) -> Option<&'static str> {
    None
}

/// Records the status a gRPC response carries in its headers on the attempt
/// span; a response whose headers carry none is committed (A6) and goes to the
/// caller at once, its body unread, with the span handed to the body, which
/// records the status when the trailers arrive.
#[cfg(feature = "grpc")]
fn read_status<ResB: Body>(
    mut response: Response<ResponseBody<ResB>>,
    span: &Span,
) -> Response<ResponseBody<ResB>> {
    use crate::body::TrailersHook;
    use crate::grpc::status;
    match status::read(&mut response) {
        Some(received) => status::record_code(span, received.code),
        None => response
            .body_mut()
            .on_trailers(TrailersHook { span: span.clone(), call: status::record_trailers }),
    }
    response
}

#[cfg(not(feature = "grpc"))]
fn read_status<ResB: Body>(response: Response<ResponseBody<ResB>>, _: &Span) -> Response<ResponseBody<ResB>> {
    response
}

/// Turns the engine's result into what the caller gets: the shared decision
/// ([`shape`]) in tower's error types.
///
/// A response is returned as it came, also when retries ran out on it (a 503,
/// an UNAVAILABLE): it is the server's answer. Over HTTP, a response whose
/// server asked for a wait the layer will not make becomes a [`GaveUp`] error
/// that says so, with the status as its `error.type`. Errors the engine judged
/// permanent pass through as they came; a retryable failure of a request that
/// could not be sent again is wrapped in [`NotRetried`]; any other stop is a
/// [`GaveUp`] holding the last error.
fn finish<B>(
    outcome: Result<Response<B>, RetryError<BoxError>>,
    stop: Option<(StopReason, u32)>,
    replayable: bool,
    grpc: bool,
) -> Result<Response<B>, BoxError> {
    // gRPC's pushback is not an HTTP hint, and its statuses are not HTTP's.
    let status = |response: &Response<B>| (!grpc).then(|| response.status().as_u16());
    shape(outcome, stop, replayable, status).map_err(|shaped| match shaped {
        Shaped::GaveUp(error) => GaveUp::new(error).into(),
        Shaped::NotRetried(last) => NotRetried::new(last).into(),
        Shaped::AsItCame(last) => last,
    })
}
