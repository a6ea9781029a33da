//! The middleware: retries, classification, guards and telemetry per request.

use crate::attempt::Attempts;
use crate::builder::RetryMiddlewareBuilder;
use crate::classify::RequestClassifier;
use crate::read_ahead;
use crate::source::RequestSource;
use crate::target::HttpAttemptSpan;
use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use retryscope::dependency::Dependency;
use retryscope::observe::StopSlot;
use retryscope::{Policy, RetryError, StopReason};
use retryscope_http::__private::call::{Drive, Ending};
use retryscope_http::__private::fallback::Chosen;
use retryscope_http::__private::shape;
use retryscope_http::__private::{CallConfig, Client};
use retryscope_http::{ClientSettings, RetryOptions};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Retries requests of an existing reqwest client, correctly and visibly.
///
/// Added with `reqwest_middleware::ClientBuilder::new(client).with(..)`; every
/// clone of the resulting client shares the middleware, and so its per-host
/// budgets and breakers.
///
/// - **What is retried**: statuses 408, 429, 500, 502, 503, 504 (configurable
///   through [`HttpClassifier`](retryscope::classify::HttpClassifier)) and transport failures (connect, reset,
///   timeout, incomplete response).
/// - **Only when safe**: idempotent methods, requests with an `Idempotency-Key`,
///   requests marked [`idempotent`](RetryOptions::idempotent), and — for any
///   method — failures to connect, where nothing reached the server. A request
///   whose body is a stream is sent once.
/// - **Idempotency keys** (opt-in,
///   [`idempotency_keys`](crate::prelude::WithHttpSettings::idempotency_keys)): a POST
///   or PATCH without a key gets a fresh one, the same on every attempt, and
///   is retried like an idempotent request; per request,
///   [`KeyChoice`](crate::KeyChoice) supplies one or suppresses it.
/// - **Your own rule**: [`retry_rule`](crate::prelude::WithHttpSettings::retry_rule)
///   asks a [`ResponseRule`](crate::ResponseRule) about each
///   response's status and headers before the built-in statuses;
///   [`retry_on_body`](crate::prelude::WithHttpSettings::retry_on_body) asks a
///   [`BodyRule`](crate::BodyRule) about the bodies of
///   the responses it selects, read ahead up to a limit, before either.
///   Request safety still applies to their verdicts.
/// - **Server hints**: `Retry-After` and `RateLimit` from the response, for
///   the call that got it; and a [`Pacer`](retryscope::Pacer) per dependency,
///   so that a 429's or 503's `Retry-After`, and the quota that `RateLimit` or
///   `X-RateLimit-*` headers report on any response, hold back every call to
///   that dependency ([`no_pacer`](crate::prelude::WithClientSettings::no_pacer) to keep
///   hints per call).
/// - **Guards**: a [`RetryBudget`](retryscope::RetryBudget) and a [`CircuitBreaker`](retryscope::CircuitBreaker) per dependency
///   (`host`, or `host:port` when the port is not the scheme's default), shared by
///   every clone of the client; the breaker counts no 429, since a rate limit
///   is not an outage. At most
///   [`MAX_DEPENDENCIES`](retryscope::dependency::MAX_DEPENDENCIES) dependencies are
///   told apart in telemetry; further hosts share the label `_OTHER` but not
///   the guards: each keeps its own, the 1,000 used last
///   ([`Dependencies`](retryscope::dependency::Dependencies)).
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
/// **Hedging.** With [`hedge`](crate::prelude::WithHttpSettings::hedge), a request that
/// may run twice at once (an idempotent method, an `Idempotency-Key`, or
/// marked [`idempotent`](RetryOptions::idempotent)) and whose body is not
/// a stream is hedged instead of retried: further copies after the policy's
/// delay, the first acceptable answer wins, and the other copies are dropped,
/// which closes their HTTP/1.1 connection (or resets their HTTP/2 stream).
/// Every copy beyond the first is charged to the dependency's budget, and
/// every copy asks the dependency's pacer. A hedged request's own timeout is
/// the whole call's deadline, as for a retried one (the hedging policy's
/// deadline brought forward to it).
///
/// **Time limits.** A request's own timeout (`RequestBuilder::timeout`) is the
/// deadline of the whole call, attempts and waits together: the policy's
/// deadline is brought forward to it ([`Policy::with_deadline_within`]), each
/// attempt is cut to what is left, and a wait that cannot fit ends the call with
/// the last answer. The client's `connect_timeout` and `read_timeout` stay
/// yours: they bound each attempt's connection and reads, inside that cut, and
/// the middleware does not change them. A connect that hangs spends the whole
/// attempt unless the client is built with [`ConnectLimit`](crate::ConnectLimit)
/// (`reqwest::Client::builder().connector_layer(ConnectLimit::new())`), which
/// ends each attempt's connect at a third of the attempt's time limit. A client-wide `Client::timeout` is
/// applied by reqwest to each attempt and is invisible to the middleware; set
/// the total on the request, or on the policy's deadline.
///
/// **Your own rule.** A server that marks a 200 whose body is an error with a
/// header (here `x-retry: please`) is retried on that header, and no body is
/// read; one that says so only in the body (`{"status":"try again"}`) is
/// retried by a body rule, which reads the JSON 200s it selects, up to 4 KiB
/// here, and hands the caller the whole body whatever it decides
/// ([what that costs](retryscope_http::BodyRule)):
///
/// ```no_run
/// use http::StatusCode;
/// use retryscope::{ErrorType, Policy, Verdict};
/// use retryscope_reqwest::{BodyLimit, RetryMiddleware, body_rule_fn, rule_fn};
/// use retryscope_reqwest::prelude::*;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let marked = rule_fn(|status, headers| {
///     let asked = headers.get("x-retry").is_some_and(|v| v == "please");
///     (status == StatusCode::OK && asked).then_some(Verdict::retryable(ErrorType::Kind("x_retry")))
/// });
/// let try_again = body_rule_fn(
///     |status, headers| status == StatusCode::OK && headers.get("content-type").is_some_and(|v| v == "application/json"),
///     |_, _, body| body.windows(9).any(|w| w == b"try again").then_some(Verdict::retryable(ErrorType::Kind("try_again"))),
/// );
/// let middleware = RetryMiddleware::builder(Policy::interactive())
///     .retry_rule(marked)
///     .retry_on_body(BodyLimit::new(4 * 1024)?, try_again)
///     .build();
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new()).with(middleware).build();
/// let body = client.get("http://127.0.0.1:8080/report").send().await?.text().await?;
/// # let _ = body;
/// # Ok(()) }
/// ```
///
/// A failed response is not allowed to hold its connection through the backoff
/// wait that follows it: before the wait its body is read to the end in the
/// background (at most 64 KiB, within 1 s), which hands the connection back to
/// the pool for the retry and for other requests, or else dropped, which closes
/// the connection. Status, headers and URL are kept, so if the next attempt is
/// refused (the breaker opened, the deadline passed) the caller still gets the
/// response, without its body.
pub struct RetryMiddleware {
    pub(crate) policy: Policy,
    /// What the builder's shared settings made: rules, guards, telemetry,
    /// idempotency keys, fallbacks, a configuration file.
    pub(crate) client: Client,
}

impl RetryMiddleware {
    /// Retries with `policy`, instrumented through the global OpenTelemetry
    /// providers (install them first), with a default [`RetryBudget`](retryscope::RetryBudget) and a
    /// default [`CircuitBreaker`](retryscope::CircuitBreaker) per dependency.
    pub fn new(policy: Policy) -> Self {
        Self::builder(policy).build()
    }

    /// Configures a middleware.
    pub fn builder(policy: Policy) -> RetryMiddlewareBuilder {
        RetryMiddlewareBuilder {
            policy,
            settings: ClientSettings::default(),
            telemetry: std::marker::PhantomData,
        }
    }

    /// The hedging delay `dependency` (a host, `host:port` off the scheme's
    /// port, as the spans name it) has learned from its own latencies, as of
    /// now: `None` without a [percentile delay](retryscope::hedge::HedgeDelay::percentile)
    /// or before the first request to it. For tests and dashboards.
    pub fn hedge_delay(&self, dependency: &str) -> Option<std::time::Duration> {
        // The clock the engine times the copies with: tokio's.
        self.client.guards.hedge_delay(dependency, tokio::time::Instant::now().into_std())
    }
}

impl fmt::Debug for RetryMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryMiddleware")
            .field("policy", &self.policy)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

// What `#[async_trait]` would write, but for how the future gets into its box:
// `Box::pin(future)` makes the future on the stack and then copies the whole
// of it into the box; a box allocated first is written in place.
impl Middleware for RetryMiddleware {
    fn handle<'s, 'e, 'n, 'f>(
        &'s self,
        request: Request,
        extensions: &'e mut Extensions,
        next: Next<'n>,
    ) -> Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'f>>
    where
        's: 'f,
        'e: 'f,
        'n: 'f,
        Self: 'f,
    {
        let future = Box::write(Box::new_uninit(), self.call(request, extensions, next));
        Box::into_pin(future)
    }
}

impl RetryMiddleware {
    /// One call: the recipe every integration runs (`Drive`), with reqwest's
    /// request, attempts, spans and answer.
    async fn call(
        &self,
        mut request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let method = request.method().clone();
        let replayable = crate::classify::is_replayable(&request);
        let options = extensions.get::<RetryOptions>().cloned().unwrap_or_default();
        let (configured, guards) = self.resolve(request.url());
        let (configured, options) = (configured.as_ref(), &options);
        // Once per call, before any attempt: every attempt clones these headers.
        let headers = request.headers_mut();
        let key =
            self.client.idempotency.apply_configured(configured, &method, headers, extensions, replayable);
        let timeout = request.timeout().copied();
        let drive = Drive::http(&self.policy, configured, &guards, options, &method, replayable, timeout);
        let ending = Ending::begin(self.client.fallbacks.is_some(), drive.deadline());
        let head = (&method, request.headers());
        let mut judge = self.client.judge(configured, head, options, replayable, key);
        self.client.at_one_layer(&mut judge, &ending);
        let mut classifier = RequestClassifier { judge };
        let source = RequestSource::new(request);
        let stop = StopSlot::default();
        let request_id_header = &self.client.request_id_header;
        let key_generated = key.map(|key| key.generated());
        let spans = HttpAttemptSpan { source: &source, key_generated, request_id_header };
        let (telemetry, log) = self.client.observers(spans, configured, &ending, source.headers());
        let mut attempts = Attempts {
            source: &source,
            next,
            extensions,
            attempt_header: self.client.attempt_header.as_ref(),
            body_rule: self.client.body_rule(configured),
            replayable,
            number: 0,
        };
        // The attempt's limit reaches the client's `ConnectLimit`, if it has one.
        // Nested to the right, in the order they are told: the engine's pairs
        // hand each operation up by value, nesting level by nesting level, and
        // the telemetry's (the largest) is then moved once.
        let observer = (telemetry, (log, (&stop, retryscope_http::AttemptLimits)));
        let operation = options.operation_name();
        let outcome = drive.run(&guards, move || attempts.next(), &mut classifier, observer, operation).await;
        let stop = stop.stopped();
        let headers = outcome.as_ref().ok().map(Response::headers);
        let fallbacks = self.client.fallbacks.as_deref();
        let Some((chosen, remaining)) = ending.after(fallbacks, guards.name(), configured, stop, headers)
        else {
            ending.settle(false);
            return finish(outcome, stop, replayable);
        };
        let key = key.and_then(|_| source.headers().get(self.client.idempotency.header_name()));
        let (target, dependency) = ((&source, key), guards.name());
        let answer = answer_with(chosen, dependency, target, outcome, (stop, replayable), remaining).await;
        ending.settle(answer.is_ok());
        answer
    }

    /// A configured client's settings for a call to `url`, from the snapshot
    /// in force now, and its dependency's guards in the file; else the
    /// builder's per-host guards. (`Url::port` is `None` for the scheme's
    /// default port; the file matches either.)
    fn resolve(&self, url: &reqwest::Url) -> (Option<CallConfig>, Arc<Dependency>) {
        let host = url.host_str().unwrap_or_default();
        // The scheme's port matters only to a URL that writes none.
        let default_port = url.port().map_or(url.port_or_known_default(), |_| None);
        let code = || self.client.guards.for_server(host, url.port(), None);
        self.client.resolve((host, url.port(), default_port), url.path(), false, code)
    }
}

/// A reqwest-middleware call's answer and error types, for the end every
/// integration shares ([`shape`]).
struct Reqwest;

impl shape::Answers for Reqwest {
    type Response = Response;
    type Error = reqwest_middleware::Error;

    fn head(response: &Response) -> (http::StatusCode, &http::HeaderMap) {
        (response.status(), response.headers())
    }

    fn error(error: &reqwest_middleware::Error) -> &(dyn std::error::Error + Send + Sync + 'static) {
        error
    }

    fn gave_up(error: RetryError<reqwest_middleware::Error>) -> reqwest_middleware::Error {
        reqwest_middleware::Error::middleware(error)
    }

    fn not_retried(error: retryscope_http::NotRetried) -> reqwest_middleware::Error {
        reqwest_middleware::Error::middleware(error)
    }

    fn answered(response: http::Response<hyper::body::Bytes>) -> Response {
        Response::from(response)
    }

    fn fallback_failed(error: retryscope_http::FallbackFailed) -> reqwest_middleware::Error {
        reqwest_middleware::Error::middleware(error)
    }
}

/// Answers a call that gave up with its fallback ([`shape::answer_with`]),
/// told the request and the idempotency key its attempts carried.
async fn answer_with(
    chosen: Chosen<'_>,
    dependency: &str,
    (source, key): (&RequestSource, Option<&http::HeaderValue>),
    outcome: Result<Response, RetryError<reqwest_middleware::Error>>,
    end: (Option<(StopReason, u32)>, bool),
    remaining: Option<std::time::Duration>,
) -> reqwest_middleware::Result<Response> {
    let (method, url) = source.target();
    // Only on this path: a client's calls never parse their URL twice.
    let uri = url.as_str().parse::<http::Uri>().unwrap_or_default();
    shape::answer_with::<Reqwest>(chosen, dependency, (method, &uri, key), remaining, outcome, end).await
}

/// Turns the engine's result into what reqwest-middleware callers expect: the
/// shared decision ([`shape::Answers::finish`]), the body rule's mark taken
/// off the response.
fn finish(
    outcome: Result<Response, RetryError<reqwest_middleware::Error>>,
    stop: Option<(StopReason, u32)>,
    replayable: bool,
) -> reqwest_middleware::Result<Response> {
    <Reqwest as shape::Answers>::finish(outcome.map(read_ahead::take_judged), stop, replayable)
}
