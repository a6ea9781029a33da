//! One logical request, from the caller's request to what the caller gets:
//! its plan, its attempts driven by the engine (retried, or hedged), and its
//! end. What only HTTP or gRPC does is theirs ([`crate::http_call`], and
//! `grpc::call` with the `grpc` feature).

use crate::attempt::{Attempts, Side};
use crate::budget::Budget;
use crate::classify::{AttemptClassifier, Layers, Mode};
use crate::error::BoxError;
use crate::grpc_call::{self, GrpcCall};
use crate::http_call::{self, HttpAttempts};
use crate::replay::{ReplayBody, Source};
use crate::response::ResponseBody;
use crate::settings::{Resolved, Settings};
use crate::spans::AttemptSpan;
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use retryscope::dependency::Guards;
use retryscope::observe::StopRecorder;
use retryscope::{Policy, RetryError, StopReason};
use retryscope_http::__private::CallConfig;
use retryscope_http::__private::call::{Drive, Ending};
use retryscope_http::__private::fallback::Chosen;
use retryscope_http::__private::idempotency::KeySource;
use retryscope_http::{AttemptLimits, RetryOptions};
use retryscope_otel::{OtelObserver, RetryLog, Upstream};
use std::sync::Arc;
use std::time::Duration;
use tower_service::Service;

/// How one request is retried: its policy and its semantics.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    pub(crate) policy: Policy,
    /// HTTP's semantics or gRPC's: the one place that says which.
    pub(crate) mode: Mode,
}

/// One logical request, from the caller's request to its response.
pub(crate) async fn run<S, B, ResB>(
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
    ResB::Data: Send + From<bytes::Bytes>,
    ResB::Error: Into<BoxError>,
{
    let (mut parts, body) = request.into_parts();
    let options = parts.extensions.get::<RetryOptions>().cloned().unwrap_or_default();
    let (mut call, mut grpc, file) = plan(&settings, &parts, &options);
    let (configured, guards) = file.parts();
    let source = Source::read(body, settings.replay_limit).await.map_err(Into::into)?;
    let replayable = source.is_replayable();
    // gRPC calls get no idempotency key: A6 retries what the service config opts in.
    let key = match grpc {
        Some(_) => None,
        None => http_call::keyed(&settings, configured, &mut parts, &mut call.mode, replayable),
    };
    let drive = drive(&settings, &call, grpc.as_ref(), configured, guards, &parts, &options, replayable);
    let ending = Ending::begin(settings.fallbacks.is_some(), drive.deadline());
    // Shared by the attempts and their spans from here on; kept for a fallback.
    let parts = Arc::new(parts);
    let kept = settings.fallbacks.as_ref().map(|_| Arc::clone(&parts));
    let layers = layers(&settings, ending.upstream());
    let classifier = AttemptClassifier { mode: call.mode, rule: settings.rule.clone(), replayable, layers };
    let stop = StopRecorder::default();
    // gRPC's own metrics (A66, A96) follow the call to the caller.
    let metrics = grpc.as_mut().and_then(|grpc| grpc.start_metrics(&settings, &parts));
    let observer = (
        ((observers(&settings, &call, &parts, key, configured, &ending), stop.clone()), metrics),
        AttemptLimits,
    );
    let side = match &grpc {
        Some(grpc) => Side::Grpc(grpc.attempts(&call)),
        None => Side::Http(HttpAttempts::new(&settings, configured)),
    };
    let operation = operation(&options, grpc.as_ref());
    let mut attempts = Attempts::new(ready, parts, source, guards.pacer().cloned(), side);
    let started = tokio::time::Instant::now();
    let outcome = drive.run(guards, move || attempts.next(), classifier, observer, operation).await;
    let stop = stop.stopped();
    let headers = outcome.as_ref().ok().map(Response::headers);
    let chosen = ending.after(settings.fallbacks.as_deref(), guards.dependency(), configured, stop, headers);
    let end = End { call: &call, replayable, started, guards, key };
    let (answer, served) = end.answer(&settings, grpc, chosen, kept, outcome, stop).await;
    ending.settle(served);
    answer
}

/// How `parts` is retried, for a gRPC call what only gRPC needs of it, and
/// what the call resolved to from a configured layer's file: the file's
/// settings for this call, from the snapshot in force now, and its
/// dependency's guards (a gRPC call's plan found them, and took the file's
/// policy already).
fn plan(settings: &Settings, parts: &Parts, options: &RetryOptions) -> (Call, Option<GrpcCall>, Resolved) {
    if let Some((policy, mode, mut grpc)) = grpc_call::plan(settings, parts, options) {
        let file = grpc.take_file().unwrap_or_else(|| Resolved::Now(settings.file_call(&parts.uri, false)));
        return (Call { policy, mode }, Some(grpc), file);
    }
    let (mut policy, mut mode) = http_call::plan(settings, parts, options);
    let file = settings.file_call(&parts.uri, false);
    if let (Some(c), Mode::Http { classifier, .. }) = (&file.0, &mut mode) {
        policy = c.policy(options);
        *classifier = c.classifier();
    }
    (Call { policy, mode }, None, Resolved::Now(file))
}

/// What the call's end needs of the call.
struct End<'c> {
    call: &'c Call,
    replayable: bool,
    started: tokio::time::Instant,
    guards: &'c Guards<Budget>,
    key: Option<KeySource>,
}

impl End<'_> {
    /// The caller's answer: the fallback's, if one was `chosen` (`kept`: the
    /// request's head, kept for it), else the engine's outcome in the shape
    /// the protocol's callers expect; and whether a fallback served it.
    async fn answer<ResB>(
        self,
        settings: &Settings,
        grpc: Option<GrpcCall>,
        chosen: Option<(Chosen<'_>, Option<Duration>)>,
        kept: Option<Arc<Parts>>,
        outcome: Result<Response<ResponseBody<ResB>>, RetryError<BoxError>>,
        stop: Option<(StopReason, u32)>,
    ) -> (Result<Response<ResponseBody<ResB>>, BoxError>, bool)
    where
        ResB: Body + Send + 'static,
        ResB::Data: Send + From<bytes::Bytes>,
        ResB::Error: Into<BoxError>,
    {
        let Self { call, replayable, started, guards, key } = self;
        match (grpc, chosen, kept) {
            (Some(grpc), Some((chosen, remaining)), Some(parts)) => {
                let fallback = Some((chosen, &*parts, remaining));
                grpc.answer(outcome, stop, call, replayable, started, guards, fallback).await
            }
            // Without a fallback to run, finished here: `answer` is a future
            // of its own, which a call that cannot use it should not build
            // and poll.
            (Some(grpc), _, _) => (grpc.finish(outcome, stop, call, replayable, started, guards), false),
            (None, Some((chosen, remaining)), Some(parts)) => {
                let key = key.and_then(|_| parts.headers.get(settings.idempotency.header_name()));
                let target = (&parts.method, &parts.uri, key);
                let dependency = guards.dependency();
                let answer =
                    http_call::answer_with(chosen, dependency, target, outcome, stop, replayable, remaining)
                        .await;
                let served = answer.is_ok();
                (answer, served)
            }
            (None, _, _) => (http_call::finish(outcome, stop, replayable), false),
        }
    }
}

/// The layer's telemetry, with this request's attempt spans and the
/// configuration it runs under, and the retry log.
fn observers(
    settings: &Settings,
    call: &Call,
    parts: &Arc<Parts>,
    key: Option<KeySource>,
    configured: Option<&CallConfig>,
    ending: &Ending,
) -> (Option<OtelObserver<AttemptSpan>>, Option<RetryLog>) {
    let telemetry = settings.telemetry.clone().map(|o| {
        o.with_attempt_spans(AttemptSpan {
            request: Arc::clone(parts),
            origin: settings.origin.clone(),
            grpc: call.mode.is_grpc(),
            idempotency_key: key,
            request_id_header: settings.request_id_header.clone(),
        })
        // Which configuration this call runs under, on each of its spans.
        .with_config_hash(configured.map(|c| Arc::clone(c.hash())))
        .with_outcome_slot(ending.outcome_slot())
    });
    // The log alone (telemetry off) has no attempt span to read the
    // request's id: it is handed the header's value.
    let retry_log = settings
        .retry_log
        .clone()
        .map(|log| log.with_request_id(parts.headers.get(&settings.request_id_header)));
    (telemetry, retry_log)
}

/// The operation the call is reported as: the caller's name for it, else a
/// gRPC call's method.
fn operation(options: &RetryOptions, grpc: Option<&GrpcCall>) -> Option<Arc<str>> {
    match options.operation_name() {
        Some(operation) => Some(retryscope::dependency::bounded_operation(operation)),
        None => grpc.map(GrpcCall::operation),
    }
}

/// Where this request's retries happen: with `retry_at_one_layer`, nowhere
/// below a caller that retries already.
fn layers(settings: &Settings, upstream: Option<&Upstream>) -> Layers {
    match settings.one_layer {
        true => Layers {
            retried_upstream: upstream.is_some_and(|u| u.attempt().is_retry()),
            honour_exhausted: true,
        },
        false => Layers::default(),
    }
}

/// How the request's attempts run. An HTTP call's drive is the shared
/// recipe's ([`Drive::http`]): the file's, else the layer's policy and the
/// dependency's own hedging policy (its percentile delay learns from that
/// server alone). A gRPC method is hedged when its service config has a
/// `hedgingPolicy` (loaded and checked with the service config; the deadline
/// is the call's, its `grpc-timeout` included) — only with a body that can
/// be sent again (every copy needs it), never when the request brings its
/// own policy (it is retried under it instead), and never under the file's
/// kill switch.
#[allow(clippy::too_many_arguments, reason = "the call's parts, each read once")]
fn drive(
    settings: &Settings,
    call: &Call,
    grpc: Option<&GrpcCall>,
    configured: Option<&CallConfig>,
    guards: &Guards<Budget>,
    parts: &Parts,
    options: &RetryOptions,
    replayable: bool,
) -> Drive {
    let Some(grpc) = grpc else {
        return Drive::http(settings.policy, configured, guards, options, &parts.method, replayable, None);
    };
    let priority = configured.map_or(options.priority_class(), |c| c.priority(options));
    let enabled = configured.is_none_or(|c| c.settings().enabled());
    let hedging =
        grpc.hedging(&call.policy).filter(|_| replayable && enabled && options.policy_override().is_none());
    match hedging {
        Some(policy) => Drive::hedge(policy, priority),
        None => Drive::retry(call.policy, priority),
    }
}
