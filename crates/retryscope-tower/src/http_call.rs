//! The HTTP call: its plan (policy, statuses, whether it may run again once
//! sent), its idempotency key, what each attempt adds to the request, what an
//! attempt does with its response (the status, the pacer, the body rule), and
//! what the caller gets.

use crate::classify::HttpStatuses;
use crate::error::{BoxError, GaveUp};
use crate::inner::{AnswerBody, Inner};
use crate::protocol::{Answer, Answered, Attempts, Call, End, Inputs, LayerProtocol, Planned, Protocol};
use crate::replay::{ReplayBody, Source};
use crate::response::ResponseBody;
use crate::settings::{Resolved, Settings};
use http::request::Parts;
use http::{HeaderMap, HeaderName, Response, StatusCode};
use http_body::Body;
use retryscope::observe::NoObserver;
use retryscope::{RetryError, StopReason};
use retryscope_http::__private::body_rule::SharedBodyRule;
use retryscope_http::__private::call::Drive;
use retryscope_http::__private::fallback::Chosen;
use retryscope_http::__private::idempotency::KeySource;
use retryscope_http::__private::shape::{self, Answers};
use retryscope_http::__private::{CallConfig, Judge};
use retryscope_http::RetryOptions;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;
use tracing::Span;

/// Once per call, before any attempt (every attempt clones these headers):
/// the request's idempotency key, if the layer gives it one (an HTTP request
/// with a key may run again once sent: see [`Judge::for_request`]).
fn keyed(
    settings: &Settings,
    configured: Option<&CallConfig>,
    parts: &mut Parts,
    replayable: bool,
) -> Option<KeySource> {
    settings.client.idempotency.apply_configured(
        configured,
        &parts.method,
        &mut parts.headers,
        &parts.extensions,
        replayable,
    )
}

/// What an HTTP request's attempts add: the attempt header, and the body rule.
pub(crate) struct HttpAttempts {
    /// The header that tells an HTTP server which attempt a retry is.
    attempt_header: Option<HeaderName>,
    /// The user's rule that reads selected bodies.
    body_rule: Option<SharedBodyRule>,
}

impl HttpAttempts {
    /// `configured`: a configured layer's call, whose file may select a
    /// body rule registered by name.
    pub(crate) fn new(settings: &Settings, configured: Option<&CallConfig>) -> Self {
        let body_rule = settings.client.body_rule(configured).cloned();
        Self { attempt_header: settings.client.attempt_header.clone(), body_rule }
    }
}

/// What an HTTP attempt does with its response.
pub(crate) struct HttpAnswer {
    body_rule: Option<SharedBodyRule>,
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

/// A tower HTTP call's answer and error types, for the end every
/// integration shares ([`shape`]).
///
/// A response is returned as it came, also when retries ran out on it (a
/// 503): it is the server's answer. A response whose server asked for a wait
/// the layer will not make becomes a [`GaveUp`] error that says so, with the
/// status as its `error.type`. Errors the engine judged permanent pass through
/// as they came; a retryable failure of a request that could not be sent
/// again is wrapped in [`NotRetried`]; any other stop is a [`GaveUp`] holding
/// the last error. (A gRPC caller gets a status instead: `grpc::stop`.)
///
/// [`NotRetried`]: retryscope_http::NotRetried
pub(crate) struct Tower<B>(PhantomData<B>);

impl<B> shape::Answers for Tower<B>
where
    B: Body,
    B::Data: From<bytes::Bytes>,
{
    type Response = Response<ResponseBody<B>>;
    type Error = BoxError;

    fn head(response: &Self::Response) -> (StatusCode, &HeaderMap) {
        (response.status(), response.headers())
    }

    fn error(error: &BoxError) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &**error
    }

    fn gave_up(error: RetryError<BoxError>) -> BoxError {
        GaveUp::new(error).into()
    }

    fn not_retried(error: retryscope_http::NotRetried) -> BoxError {
        error.into()
    }

    fn answered(response: Response<bytes::Bytes>) -> Self::Response {
        let (parts, body) = response.into_parts();
        Response::from_parts(parts, ResponseBody::answered(body.into()))
    }

    fn fallback_failed(error: retryscope_http::FallbackFailed) -> BoxError {
        error.into()
    }
}

/// The protocol of a layer that retries HTTP requests (the default of
/// [`RetryLayer`](crate::RetryLayer) and [`RetryService`](crate::RetryService)):
/// HTTP's semantics, its statuses and rules.
#[derive(Debug, Clone, Copy, Default)]
pub struct Http;

impl LayerProtocol for Http {
    type Call = HttpCall;

    #[inline]
    fn plan(&self, settings: &Settings, parts: &Parts, options: &RetryOptions) -> Planned<HttpCall> {
        HttpCall::plan(settings, parts, options)
    }
}

/// An HTTP call: HTTP's semantics, and the statuses it retries.
pub(crate) struct HttpCall;

impl HttpCall {
    /// The layer's policy (unless the request brings its own) and statuses,
    /// or a configured layer's file's.
    pub(crate) fn plan(settings: &Settings, parts: &Parts, options: &RetryOptions) -> Planned<HttpCall> {
        let file = settings.file_call(&parts.uri, false);
        let policy = match &file.0 {
            Some(c) => c.policy(options),
            None => options.policy_override().unwrap_or(settings.policy),
        };
        let call = Call { policy };
        Planned { call, protocol: HttpCall, file: Resolved::Now(file) }
    }
}

impl Protocol for HttpCall {
    type Attempts = HttpAttempts;
    type Metrics = NoObserver;
    type Statuses = HttpStatuses;
    const GRPC: bool = false;

    fn statuses(&self) -> HttpStatuses {
        HttpStatuses
    }

    fn key(
        &self,
        settings: &Settings,
        configured: Option<&CallConfig>,
        parts: &mut Parts,
        replayable: bool,
    ) -> Option<KeySource> {
        keyed(settings, configured, parts, replayable)
    }

    /// HTTP's: the call's statuses (the file's classifier for a configured
    /// call), the layer's rule, and whether its method or key lets it run
    /// again once sent.
    fn judge(&self, settings: &Settings, inputs: &Inputs<'_>) -> Judge {
        let head = (&inputs.parts.method, &inputs.parts.headers);
        settings.client.judge(inputs.configured, head, inputs.options, inputs.replayable, inputs.key)
    }

    /// The shared recipe's ([`Drive::http`]): the file's, else the layer's
    /// policy and the dependency's own hedging policy (its percentile delay
    /// learns from that server alone).
    fn drive(&self, call: &Call, inputs: Inputs<'_>) -> Drive {
        let Inputs { configured, guards, parts, options, replayable, .. } = inputs;
        Drive::http(&call.policy, configured, guards, options, &parts.method, replayable, None)
    }

    fn start(
        &mut self,
        settings: &Settings,
        _: &Parts,
        _: &Call,
        configured: Option<&CallConfig>,
    ) -> (HttpAttempts, Option<NoObserver>) {
        (HttpAttempts::new(settings, configured), None)
    }

    fn operation(&self, options: &RetryOptions) -> Option<&'static str> {
        options.operation_name().map(retryscope_otel::bounded_operation)
    }

    fn answer<'a, ResB>(
        self,
        end: End<'a>,
        settings: &'a Settings,
        chosen: Option<(Chosen<'a>, Option<Duration>)>,
        kept: Option<Arc<Parts>>,
        outcome: Result<Response<ResponseBody<ResB>>, RetryError<BoxError>>,
        stop: Option<(StopReason, u32)>,
    ) -> Answered<'a, (Result<Response<ResponseBody<ResB>>, BoxError>, bool)>
    where
        ResB: AnswerBody,
    {
        let (Some((chosen, remaining)), Some(parts)) = (chosen, kept) else {
            return Answered::Now((Tower::<ResB>::finish(outcome, stop, end.replayable), false));
        };
        Answered::Later(Box::pin(async move {
            // The fallback is told the idempotency key the attempts carried.
            let key = end.key.and_then(|_| parts.headers.get(settings.client.idempotency.header_name()));
            let target = (&parts.method, &parts.uri, key);
            let (dependency, end) = (end.guards.name(), (stop, end.replayable));
            let answer =
                shape::answer_with::<Tower<ResB>>(chosen, dependency, target, remaining, outcome, end).await;
            let served = answer.is_ok();
            (answer, served)
        }))
    }
}

impl Attempts for HttpAttempts {
    type Answer = HttpAnswer;

    /// The body of attempt `number`, its head completed in `parts`, and what
    /// it will do with its response.
    fn attempt<B: ReplayBody>(
        &mut self,
        parts: &mut Parts,
        number: u32,
        _: &Arc<Parts>,
        source: &mut Source<B>,
    ) -> (Option<B>, HttpAnswer) {
        let body = source.next();
        if let Some(name) = self.attempt_header.as_ref().filter(|_| number > 1) {
            parts.headers.insert(name.clone(), http::HeaderValue::from(number));
        }
        (body, HttpAnswer { body_rule: self.body_rule.clone() })
    }
}

impl Answer for HttpAnswer {
    /// Records the status on the attempt span, tells the pacer what the
    /// response says about pace, and lets the body rule read what it selects.
    fn answer<'a, S, B, ResB>(
        self,
        sent: Result<Response<ResB>, BoxError>,
        _: &'a mut S,
        span: Span,
    ) -> Answered<'a, Result<Response<ResponseBody<ResB>>, BoxError>>
    where
        S: Inner<B, ResB>,
        B: ReplayBody,
        ResB: AnswerBody,
    {
        let response = match sent {
            Ok(response) => response.map(ResponseBody::new),
            Err(error) => return Answered::Now(Err(error)),
        };
        span.record("http.response.status_code", i64::from(response.status().as_u16()));
        match self.body_rule.filter(|rule| rule.wants_body(response.status(), response.headers())) {
            // Inside the attempt: its timeout bounds the read. Boxed (as
            // `Answered` says): a rule few responses meet.
            Some(rule) => Answered::Later(Box::pin(judge(response, rule))),
            None => Answered::Now(Ok(response)),
        }
    }
}
