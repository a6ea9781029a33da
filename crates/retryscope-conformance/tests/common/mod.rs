//! What every conformance test names: the two integrations, a client of either
//! built from one [`Setup`], the [`Call`] it sends, and what the caller got
//! ([`Response`] or [`Failure`], or in short an [`Answer`]), in terms both can
//! be compared on.
#![allow(dead_code, reason = "each test binary uses its own part of this module")]

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use retryscope::hedge::HedgePolicy;
use retryscope::overload::{AdaptiveThrottle, ConcurrencyLimiter};
use retryscope::{CircuitBreaker, ErrorType, Pacer, Policy, RetryError, StopReason};
use retryscope_reqwest::RetryMiddleware;
use retryscope_reqwest::fault::FaultMiddleware;
use retryscope_reqwest::prelude::*;
use retryscope_test_support::telemetry::Telemetry;
use retryscope_tower::fault::{FaultLayer, FaultService, Faults};
use retryscope_tower::{
    BodyLimit, BodyRule, BoxError, Fallback, FallbackContext, FallbackFuture, ResponseRule, RetryLayer,
    RetryService,
};
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::StreamExt as _;
use tower::{Service, ServiceBuilder, ServiceExt};

/// The two integrations under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Integration {
    Reqwest,
    Tower,
}

pub(crate) const BOTH: [Integration; 2] = [Integration::Reqwest, Integration::Tower];

/// A client's settings, the same for either integration: each is the
/// builder setter of the same name, and whatever is not set keeps the
/// builder's default.
#[must_use = "a setup makes no client until `Integration::client` is called"]
pub(crate) struct Setup {
    policy: Policy,
    /// `None`: the builder's `no_telemetry()`.
    meter: Option<opentelemetry::metrics::Meter>,
    operation_spans: bool,
    rule: Option<Arc<dyn ResponseRule>>,
    body_rule: Option<(BodyLimit, Arc<dyn BodyRule>)>,
    /// Registered by name, for a configuration file to select.
    named_body_rules: Vec<(&'static str, BodyLimit, Arc<dyn BodyRule>)>,
    idempotency_keys: bool,
    idempotency_key_header: Option<HeaderName>,
    request_id_header: Option<HeaderName>,
    budget: Option<Box<dyn Fn() -> Arc<dyn retryscope::budget::Budget> + Send + Sync>>,
    no_budget: bool,
    breaker: Option<Box<dyn Fn() -> CircuitBreaker + Send + Sync>>,
    no_breaker: bool,
    pacer: Option<fn() -> Pacer>,
    no_pacer: bool,
    adaptive_throttle: Option<fn() -> AdaptiveThrottle>,
    concurrency_limit: Option<Arc<dyn Fn() -> ConcurrencyLimiter + Send + Sync>>,
    /// `guard_per_dependency`: each dependency's `Guard`.
    guard: Option<Arc<dyn Fn() -> retryscope::guard::SharedGuard + Send + Sync>>,
    hedge: Option<HedgePolicy>,
    retry_at_one_layer: bool,
    /// Injected below the retries (`FaultMiddleware`, `FaultLayer`); every
    /// client has the layer, disabled faults when none are set, so that
    /// every conformance test also shows that disabled faults change nothing.
    faults: Option<Faults>,
    /// Registered in order, then `fallback_for`, then `default_fallback`.
    fallbacks: Vec<(&'static str, SharedFallback)>,
    fallback_for: Vec<(String, &'static str)>,
    default_fallback: Option<&'static str>,
    config: Option<retryscope_config::ConfigHandle>,
    /// Fleet pacing (issue 38): each dependency's pacer shared through this.
    pace_share: Option<Arc<dyn retryscope::pace::PaceShare>>,
    /// Fleet budgets (issue 38): each dependency's budget floor divided
    /// through this.
    budget_share: Option<Arc<dyn retryscope::budget::BudgetShare>>,
}

/// A fallback as a test registers it on either builder.
type SharedFallback = Arc<dyn Fn(&FallbackContext<'_>) -> FallbackFuture + Send + Sync>;

impl Setup {
    /// `policy`, default guards, no telemetry.
    pub(crate) fn new(policy: Policy) -> Setup {
        Setup {
            policy,
            meter: None,
            operation_spans: false,
            rule: None,
            body_rule: None,
            named_body_rules: Vec::new(),
            idempotency_keys: false,
            idempotency_key_header: None,
            request_id_header: None,
            budget: None,
            no_budget: false,
            breaker: None,
            no_breaker: false,
            pacer: None,
            no_pacer: false,
            adaptive_throttle: None,
            concurrency_limit: None,
            guard: None,
            hedge: None,
            retry_at_one_layer: false,
            faults: None,
            fallbacks: Vec::new(),
            fallback_for: Vec::new(),
            default_fallback: None,
            config: None,
            pace_share: None,
            budget_share: None,
        }
    }

    /// Each dependency's pacer shared with a fleet through `share` (issue 38).
    pub(crate) fn pace_shared(mut self, share: Arc<dyn retryscope::pace::PaceShare>) -> Setup {
        self.pace_share = Some(share);
        self
    }

    /// Each dependency's budget floor divided among a fleet through `share`
    /// (issue 38).
    pub(crate) fn budget_shared(mut self, share: Arc<dyn retryscope::budget::BudgetShare>) -> Setup {
        self.budget_share = Some(share);
        self
    }

    /// Spans and metrics into `telemetry`.
    pub(crate) fn meter(mut self, telemetry: &Telemetry) -> Setup {
        self.meter = Some(telemetry.meter.clone());
        self
    }

    pub(crate) fn operation_spans(mut self) -> Setup {
        self.operation_spans = true;
        self
    }

    pub(crate) fn retry_rule(mut self, rule: impl ResponseRule) -> Setup {
        self.rule = Some(Arc::new(rule));
        self
    }

    pub(crate) fn retry_on_body(mut self, limit: BodyLimit, rule: impl BodyRule) -> Setup {
        self.body_rule = Some((limit, Arc::new(rule)));
        self
    }

    /// A body rule registered as `name`, that a configuration file selects.
    pub(crate) fn body_rule(mut self, name: &'static str, limit: BodyLimit, rule: impl BodyRule) -> Setup {
        self.named_body_rules.push((name, limit, Arc::new(rule)));
        self
    }

    pub(crate) fn idempotency_keys(mut self) -> Setup {
        self.idempotency_keys = true;
        self
    }

    pub(crate) fn idempotency_key_header(mut self, name: HeaderName) -> Setup {
        self.idempotency_key_header = Some(name);
        self
    }

    pub(crate) fn request_id_header(mut self, name: HeaderName) -> Setup {
        self.request_id_header = Some(name);
        self
    }

    pub(crate) fn budget_per_dependency<B: retryscope::budget::Budget + 'static>(
        mut self,
        make: impl Fn() -> B + Send + Sync + 'static,
    ) -> Setup {
        self.budget = Some(Box::new(move || Arc::new(make())));
        self
    }

    pub(crate) fn no_budget(mut self) -> Setup {
        self.no_budget = true;
        self
    }

    pub(crate) fn breaker_per_dependency(
        mut self,
        make: impl Fn() -> CircuitBreaker + Send + Sync + 'static,
    ) -> Setup {
        self.breaker = Some(Box::new(make));
        self
    }

    pub(crate) fn no_breaker(mut self) -> Setup {
        self.no_breaker = true;
        self
    }

    pub(crate) fn pacer_per_dependency(mut self, make: fn() -> Pacer) -> Setup {
        self.pacer = Some(make);
        self
    }

    pub(crate) fn no_pacer(mut self) -> Setup {
        self.no_pacer = true;
        self
    }

    pub(crate) fn adaptive_throttle_per_dependency(mut self, make: fn() -> AdaptiveThrottle) -> Setup {
        self.adaptive_throttle = Some(make);
        self
    }

    pub(crate) fn concurrency_limit_per_dependency(
        mut self,
        make: impl Fn() -> ConcurrencyLimiter + Send + Sync + 'static,
    ) -> Setup {
        self.concurrency_limit = Some(Arc::new(make));
        self
    }

    pub(crate) fn guard_per_dependency<G: retryscope::guard::Guard<Permit = ()> + 'static>(
        mut self,
        make: impl Fn() -> G + Send + Sync + 'static,
    ) -> Setup {
        self.guard = Some(Arc::new(move || Arc::new(make())));
        self
    }

    pub(crate) fn hedge(mut self, policy: HedgePolicy) -> Setup {
        self.hedge = Some(policy);
        self
    }

    pub(crate) fn retry_at_one_layer(mut self) -> Setup {
        self.retry_at_one_layer = true;
        self
    }

    pub(crate) fn fallback(
        mut self,
        name: &'static str,
        fallback: impl Fn(&FallbackContext<'_>) -> FallbackFuture + Send + Sync + 'static,
    ) -> Setup {
        self.fallbacks.push((name, Arc::new(fallback)));
        self
    }

    pub(crate) fn fallback_for(mut self, dependency: impl Into<String>, name: &'static str) -> Setup {
        self.fallback_for.push((dependency.into(), name));
        self
    }

    pub(crate) fn default_fallback(mut self, name: &'static str) -> Setup {
        self.default_fallback = Some(name);
        self
    }

    /// Injects `faults` below the retries.
    /// Per-dependency settings from a retryscope-config handle.
    pub(crate) fn config(mut self, handle: retryscope_config::ConfigHandle) -> Setup {
        self.config = Some(handle);
        self
    }

    pub(crate) fn faults(mut self, faults: Faults) -> Setup {
        self.faults = Some(faults);
        self
    }
}

/// Calls on one builder, whichever integration's it is, the setters `Setup`
/// names: the two builders share their setters' names, not a trait.
macro_rules! configure {
    ($builder:path, $setup:expr) => {{
        let setup: Setup = $setup;
        let mut builder = $builder(setup.policy);
        if let Some(rule) = setup.rule {
            builder = builder.retry_rule(move |status, headers: &HeaderMap| rule.verdict(status, headers));
        }
        if let Some((limit, rule)) = setup.body_rule {
            let wants = Arc::clone(&rule);
            builder = builder.retry_on_body(
                limit,
                retryscope_tower::body_rule_fn(
                    move |status, headers| wants.wants_body(status, headers),
                    move |status, headers, body| rule.verdict(status, headers, body),
                ),
            );
        }
        for (name, limit, rule) in setup.named_body_rules {
            let wants = Arc::clone(&rule);
            builder = builder.body_rule(
                name,
                limit,
                retryscope_tower::body_rule_fn(
                    move |status, headers| wants.wants_body(status, headers),
                    move |status, headers, body| rule.verdict(status, headers, body),
                ),
            );
        }
        if setup.idempotency_keys {
            builder = builder.idempotency_keys();
        }
        if let Some(name) = setup.idempotency_key_header {
            builder = builder.idempotency_key_header(name);
        }
        if let Some(name) = setup.request_id_header {
            builder = builder.request_id_header(name);
        }
        if let Some(make) = setup.budget {
            builder = builder.budget_per_dependency(move || make());
        }
        if setup.no_budget {
            builder = builder.no_budget();
        }
        if let Some(make) = setup.breaker {
            builder = builder.breaker_per_dependency(move || make());
        }
        if setup.no_breaker {
            builder = builder.no_breaker();
        }
        if let Some(make) = setup.pacer {
            builder = builder.pacer_per_dependency(make);
        }
        if setup.no_pacer {
            builder = builder.no_pacer();
        }
        if let Some(share) = setup.pace_share {
            builder = builder.pace_shared(share);
        }
        if let Some(share) = setup.budget_share {
            builder = builder.budget_shared(share).expect("a budget to share");
        }
        if let Some(make) = setup.adaptive_throttle {
            builder = builder.adaptive_throttle_per_dependency(make);
        }
        if let Some(make) = setup.concurrency_limit {
            builder = builder.concurrency_limit_per_dependency(move || make());
        }
        if let Some(make) = setup.guard {
            builder = builder.guard_per_dependency(move || make());
        }
        if let Some(policy) = setup.hedge {
            builder = builder.hedge(policy);
        }
        if setup.retry_at_one_layer {
            builder = builder.retry_at_one_layer();
        }
        for (name, fallback) in setup.fallbacks {
            builder = builder.fallback(name, move |context: &FallbackContext<'_>| fallback(context));
        }
        for (dependency, name) in setup.fallback_for {
            builder = builder.fallback_for(&dependency, name).expect("a registered fallback");
        }
        if let Some(name) = setup.default_fallback {
            builder = builder.default_fallback(name).expect("a registered fallback");
        }
        if let Some(handle) = setup.config {
            builder = builder.config(handle);
        }
        match setup.meter {
            Some(meter) => {
                let builder = builder.meter(&meter);
                if setup.operation_spans { builder.operation_spans() } else { builder }.build()
            }
            None => builder.no_telemetry().build(),
        }
    }};
}

/// The request body type of the tower client: one concrete error type, as a
/// `dyn` one would make the futures of spawned calls lifetime-generic, which
/// `tokio::spawn` refuses.
type TowerBody = BoxBody<Bytes, std::io::Error>;

/// One client of either integration. Cloned, it shares its guards, as the
/// callers of one service do.
#[derive(Clone)]
pub(crate) enum Client {
    Reqwest(reqwest_middleware::ClientWithMiddleware),
    Tower(Box<RetryService<FaultService<HyperClient<HttpConnector, TowerBody>>>>),
}

impl Integration {
    /// A client of this integration with `setup`: reqwest-middleware over a
    /// `reqwest::Client`, or the tower layer over a hyper-util client.
    pub(crate) fn client(self, setup: Setup) -> Client {
        match self {
            Integration::Reqwest => {
                let faults = setup.faults.clone().unwrap_or_else(|| Faults::builder().build());
                let middleware = configure!(RetryMiddleware::builder, setup);
                let inner = reqwest::Client::builder().no_proxy().build().expect("reqwest client");
                let client = reqwest_middleware::ClientBuilder::new(inner).with(middleware);
                Client::Reqwest(client.with(FaultMiddleware::new(faults)).build())
            }
            Integration::Tower => {
                let faults = setup.faults.clone().unwrap_or_else(|| Faults::builder().build());
                let layer = configure!(RetryLayer::builder, setup);
                let inner = HyperClient::builder(TokioExecutor::new()).build_http::<TowerBody>();
                let service =
                    ServiceBuilder::new().layer(layer).layer(FaultLayer::new(faults)).service(inner);
                Client::Tower(Box::new(service))
            }
        }
    }
}

/// A request's body.
#[derive(Debug, Clone)]
enum Body {
    Empty,
    Full(Bytes),
    /// Chunks that are still being produced when the request starts.
    Stream(Vec<Bytes>),
}

/// One request, as a caller of either integration makes it.
#[derive(Debug)]
pub(crate) struct Call {
    method: Method,
    url: String,
    headers: HeaderMap,
    extensions: http::Extensions,
    body: Body,
    /// reqwest's `RequestBuilder::timeout`: the caller's own limit on the call.
    timeout: Option<Duration>,
}

impl Call {
    pub(crate) fn new(method: Method, url: impl Into<String>) -> Call {
        Call {
            method,
            url: url.into(),
            headers: HeaderMap::new(),
            extensions: http::Extensions::new(),
            body: Body::Empty,
            timeout: None,
        }
    }

    pub(crate) fn get(url: impl Into<String>) -> Call {
        Call::new(Method::GET, url)
    }

    pub(crate) fn post(url: impl Into<String>) -> Call {
        Call::new(Method::POST, url)
    }

    pub(crate) fn put(url: impl Into<String>) -> Call {
        Call::new(Method::PUT, url)
    }

    pub(crate) fn header(mut self, name: &'static str, value: impl AsRef<str>) -> Call {
        let value = HeaderValue::from_str(value.as_ref()).expect("a valid header value");
        self.headers.insert(HeaderName::from_static(name), value);
        self
    }

    /// A request extension (`RetryOptions`, `KeyChoice`), as
    /// reqwest-middleware's `with_extension` and `http::Request`'s
    /// `extensions_mut` carry it.
    pub(crate) fn extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Call {
        self.extensions.insert(value);
        self
    }

    /// The caller's own timeout, as reqwest's `RequestBuilder::timeout`
    /// sets it. An `http::Request` has no such field: a tower caller gives
    /// its call a deadline with `RetryOptions::policy` instead, so the tower
    /// client panics rather than silently dropping it.
    pub(crate) fn timeout(mut self, timeout: Duration) -> Call {
        self.timeout = Some(timeout);
        self
    }

    pub(crate) fn body(mut self, body: impl Into<Bytes>) -> Call {
        self.body = Body::Full(body.into());
        self
    }

    /// A streamed body: `chunks`, sent a few milliseconds after the request
    /// starts. Neither integration can send it again: reqwest never replays a
    /// stream, and tower replays only what is there at once.
    pub(crate) fn streamed(mut self, chunks: &[&'static str]) -> Call {
        self.body = Body::Stream(chunks.iter().map(|c| Bytes::from_static(c.as_bytes())).collect());
        self
    }
}

/// The channel a streamed body is read from, fed by a task of its own.
fn feed(chunks: Vec<Bytes>) -> tokio_stream::wrappers::ReceiverStream<Result<Bytes, std::io::Error>> {
    let (sender, receiver) = tokio::sync::mpsc::channel(chunks.len().max(1));
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(5)).await;
        for chunk in chunks {
            if sender.send(Ok(chunk)).await.is_err() {
                break;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}

/// A response, its body still to be read.
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    /// The URL reqwest says it answers; an `http::Response` carries none.
    pub(crate) url: Option<String>,
    /// Set when the answer is a fallback's.
    pub(crate) fallback: Option<Fallback>,
    body: ResponseBody,
}

enum ResponseBody {
    Reqwest(reqwest::Response),
    Tower(UnsyncBoxBody<Bytes, BoxError>),
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response").field("status", &self.status).field("headers", &self.headers).finish()
    }
}

impl Response {
    /// The whole body.
    pub(crate) async fn bytes(self) -> Bytes {
        match self.body {
            ResponseBody::Reqwest(response) => response.bytes().await.expect("the body"),
            ResponseBody::Tower(body) => body.collect().await.expect("the body").to_bytes(),
        }
    }

    /// The whole body, as text.
    pub(crate) async fn text(self) -> String {
        String::from_utf8(self.bytes().await.to_vec()).expect("a UTF-8 body")
    }

    /// The whole body, or the error its read ended with (its chain, outermost first).
    pub(crate) async fn read(self) -> Result<Bytes, Vec<String>> {
        match self.body {
            ResponseBody::Reqwest(response) => response.bytes().await.map_err(|e| chain(&e)),
            ResponseBody::Tower(body) => body.collect().await.map(|b| b.to_bytes()).map_err(|e| chain(&*e)),
        }
    }

    /// The next chunk of the body as it arrives (`None` at its end), failing
    /// the test after 10 s instead of hanging it.
    pub(crate) async fn chunk(&mut self) -> Option<Bytes> {
        let next = async {
            match &mut self.body {
                ResponseBody::Reqwest(response) => response.chunk().await.expect("a chunk"),
                ResponseBody::Tower(body) => loop {
                    match body.frame().await {
                        None => break None,
                        Some(frame) => match frame.expect("a frame").into_data() {
                            Ok(data) => break Some(data),
                            Err(_trailers) => {}
                        },
                    }
                },
            }
        };
        tokio::time::timeout(Duration::from_secs(10), next).await.expect("the next chunk hung")
    }
}

/// How the integration stopped retrying, when it gave up: reqwest's
/// `RetryError`, tower's `GaveUp`.
#[derive(Debug)]
pub(crate) struct Stopped {
    pub(crate) reason: StopReason,
    pub(crate) attempts: u32,
    pub(crate) error_type: Option<ErrorType>,
    /// The last attempt's error, as it prints.
    pub(crate) last_error: Option<String>,
    /// Whether that error is a failure to connect (reqwest's and hyper-util's `is_connect`).
    pub(crate) last_error_is_connect: bool,
}

/// What a caller got instead of a response.
#[derive(Debug)]
pub(crate) struct Failure {
    /// Set when the integration gave up.
    pub(crate) stopped: Option<Stopped>,
    /// Whether the error is the integration's `NotRetried`.
    pub(crate) not_retried: bool,
    /// Set when the call gave up and its fallback failed too: why it ran.
    pub(crate) fallback_failed: Option<retryscope_tower::FallbackReason>,
    /// The error and its sources, outermost first, as anyhow's `{:#}` and
    /// eyre print them.
    pub(crate) chain: Vec<String>,
}

/// Every error of the chain, outermost first.
fn chain(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    std::iter::successors(Some(error), |&e| e.source()).map(ToString::to_string).collect()
}

impl Failure {
    fn of_reqwest(error: &reqwest_middleware::Error) -> Failure {
        let (stopped, not_retried) = match error {
            reqwest_middleware::Error::Middleware(inner) => {
                let stopped =
                    inner.downcast_ref::<RetryError<reqwest_middleware::Error>>().map(|e| Stopped {
                        reason: e.reason(),
                        attempts: e.attempts(),
                        error_type: e.error_type(),
                        last_error: e.last_error().map(ToString::to_string),
                        last_error_is_connect: e
                            .last_error()
                            .is_some_and(reqwest_middleware::Error::is_connect),
                    });
                (stopped, inner.downcast_ref::<retryscope_reqwest::NotRetried>().is_some())
            }
            reqwest_middleware::Error::Reqwest(_) => (None, false),
        };
        let fallback_failed = match error {
            reqwest_middleware::Error::Middleware(inner) => {
                inner.downcast_ref::<retryscope_reqwest::FallbackFailed>().map(|e| e.reason())
            }
            reqwest_middleware::Error::Reqwest(_) => None,
        };
        Failure { stopped, not_retried, fallback_failed, chain: chain(error) }
    }

    fn of_tower(error: &BoxError) -> Failure {
        let stopped = error.downcast_ref::<retryscope_tower::GaveUp>().map(|e| Stopped {
            reason: e.reason(),
            attempts: e.attempts(),
            error_type: e.error_type(),
            last_error: e.last_error().map(ToString::to_string),
            last_error_is_connect: e.last_error().is_some_and(|last| {
                last.downcast_ref::<hyper_util::client::legacy::Error>().is_some_and(|e| e.is_connect())
            }),
        });
        let not_retried = error.downcast_ref::<retryscope_tower::NotRetried>().is_some();
        let fallback_failed = error.downcast_ref::<retryscope_tower::FallbackFailed>().map(|e| e.reason());
        Failure { stopped, not_retried, fallback_failed, chain: chain(&**error) }
    }
}

impl Client {
    /// Sends `call` and returns what the caller got.
    pub(crate) async fn send(&self, call: Call) -> Result<Response, Failure> {
        match self {
            Client::Reqwest(client) => {
                let mut request = client.request(call.method, &call.url).headers(call.headers);
                request.extensions().extend(call.extensions);
                if let Some(timeout) = call.timeout {
                    request = request.timeout(timeout);
                }
                let request = match call.body {
                    Body::Empty => request,
                    Body::Full(bytes) => request.body(bytes),
                    Body::Stream(chunks) => request.body(reqwest::Body::wrap_stream(feed(chunks))),
                };
                match request.send().await {
                    Ok(response) => Ok(Response {
                        status: response.status().as_u16(),
                        headers: response.headers().clone(),
                        url: Some(response.url().to_string()),
                        fallback: response.extensions().get::<Fallback>().cloned(),
                        body: ResponseBody::Reqwest(response),
                    }),
                    Err(error) => Err(Failure::of_reqwest(&error)),
                }
            }
            Client::Tower(service) => {
                assert!(
                    call.timeout.is_none(),
                    "a tower request has no timeout of its own: use RetryOptions"
                );
                let body = match call.body {
                    Body::Empty => BoxBody::new(Full::default().map_err(|never| match never {})),
                    Body::Full(bytes) => BoxBody::new(Full::new(bytes).map_err(|never| match never {})),
                    Body::Stream(chunks) => BoxBody::new(StreamBody::new(
                        feed(chunks).map(|chunk| chunk.map(http_body::Frame::data)),
                    )),
                };
                let mut request = http::Request::builder()
                    .method(call.method)
                    .uri(&call.url)
                    .body(body)
                    .expect("a valid request");
                *request.headers_mut() = call.headers;
                request.extensions_mut().extend(call.extensions);
                let mut service = (**service).clone();
                match async { service.ready().await?.call(request).await }.await {
                    Ok(response) => {
                        let (parts, body) = response.into_parts();
                        Ok(Response {
                            status: parts.status.as_u16(),
                            headers: parts.headers,
                            url: None,
                            fallback: parts.extensions.get::<Fallback>().cloned(),
                            body: ResponseBody::Tower(body.map_err(Into::into).boxed_unsync()),
                        })
                    }
                    Err(error) => Err(Failure::of_tower(&error)),
                }
            }
        }
    }

    /// Sends `call` and returns what the caller got, in short.
    pub(crate) async fn answer(&self, call: Call) -> Answer {
        Answer::of(self.send(call).await)
    }

    /// A GET of `url`, in short.
    pub(crate) async fn get(&self, url: &str) -> Answer {
        self.answer(Call::get(url)).await
    }
}

/// What a caller got, in short.
#[derive(Debug, PartialEq)]
pub(crate) enum Answer {
    Status(u16),
    GaveUp(StopReason, Option<ErrorType>),
    Other(String),
}

impl Answer {
    /// What a reqwest-middleware caller got.
    pub(crate) fn of_reqwest(result: reqwest_middleware::Result<reqwest::Response>) -> Answer {
        match result {
            Ok(response) => Answer::Status(response.status().as_u16()),
            Err(error) => Answer::of(Err(Failure::of_reqwest(&error))),
        }
    }

    /// What a tower caller got.
    pub(crate) fn of_tower<B>(result: Result<http::Response<B>, BoxError>) -> Answer {
        match result {
            Ok(response) => Answer::Status(response.status().as_u16()),
            Err(error) => Answer::of(Err(Failure::of_tower(&error))),
        }
    }

    pub(crate) fn of(result: Result<Response, Failure>) -> Answer {
        match result {
            Ok(response) => Answer::Status(response.status),
            Err(Failure { stopped: Some(stopped), .. }) => Answer::GaveUp(stopped.reason, stopped.error_type),
            Err(failure) => Answer::Other(failure.chain.first().cloned().unwrap_or_default()),
        }
    }
}

/// The builder's own policy of a configured client's tests: five quick
/// attempts, which the files replace (a configured call must not use it).
pub(crate) fn code_policy() -> Policy {
    Policy::builder()
        .max_attempts(5)
        .jitter(retryscope::Jitter::None)
        .base_delay(std::time::Duration::from_millis(1))
        .build()
        .expect("valid")
}
