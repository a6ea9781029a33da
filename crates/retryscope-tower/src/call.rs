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
use retryscope::hedge::{HedgePolicy, Hedgeable};
use retryscope::observe::StopRecorder;
use retryscope::{Policy, Retryable};
use retryscope_http::__private::idempotency::KeySource;
use retryscope_http::RetryOptions;
use retryscope_otel::{OtelObserver, OutcomeSlot, Upstream};
use std::sync::Arc;
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
    let (mut call, mut grpc) = plan(&settings, &parts, &options);
    // A configured layer: the file's settings for this call, from the
    // snapshot in force now, and its dependency's guards (a gRPC call's plan
    // found them, and took the file's policy already).
    let file = match grpc.as_mut().and_then(GrpcCall::take_file) {
        Some(found) => found,
        None => Resolved::Now(settings.file_call(&parts.uri, false)),
    };
    let (configured, guards) = file.parts();
    if let (Some(c), Mode::Http { classifier, .. }) = (configured, &mut call.mode) {
        call.policy = c.policy(&options);
        *classifier = c.classifier();
    }
    let source = Source::read(body, settings.replay_limit).await.map_err(Into::into)?;
    let replayable = source.is_replayable();
    // gRPC calls get no idempotency key: A6 retries what the service config opts in.
    let key = match grpc {
        Some(_) => None,
        None => http_call::keyed(&settings, configured, &mut parts, &mut call.mode, replayable),
    };
    let hedging = match configured {
        Some(c) if !c.settings().enabled() => None,
        Some(c) if grpc.is_none() => c
            .hedge(&options)
            .filter(|_| replayable && retryscope_http::__private::safety::may_hedge(&parts.method)),
        _ => hedging(guards, &call, grpc.as_ref(), &parts, &options, replayable),
    };
    // Shared by the attempts and their spans from here on.
    let parts = Arc::new(parts);
    // Kept only for a fallback: a client without one takes no clock reading.
    let fallback = settings.fallbacks.as_ref().map(|_| {
        let deadline = hedging.as_ref().map_or(call.policy.deadline(), HedgePolicy::deadline);
        (Arc::clone(&parts), tokio::time::Instant::now(), deadline)
    });
    let upstream = Upstream::current();
    let layers = layers(&settings, upstream.as_ref());
    let classifier = AttemptClassifier { mode: call.mode, rule: settings.rule.clone(), replayable, layers };
    // A layer with fallbacks holds the call's outcome back until it knows
    // whether one answered (`fallback`); others record it at once.
    let outcome_slot = settings.fallbacks.as_ref().map(|_| OutcomeSlot::new());
    let telemetry = telemetry(&settings, &call, &parts, key).map(|o| {
        // Which configuration this call runs under, on each of its spans.
        o.with_config_hash(configured.map(|c| Arc::clone(c.hash()))).with_outcome_slot(outcome_slot.clone())
    });
    let operation = operation(&options, grpc.as_ref());
    let priority = configured.map_or(options.priority_class(), |c| c.priority(&options));
    let stop = StopRecorder::default();
    // gRPC's own metrics (A66, A96) follow the call to the caller.
    let metrics = grpc.as_mut().and_then(|grpc| grpc.start_metrics(&settings, &parts));
    let side = match &grpc {
        Some(grpc) => Side::Grpc(grpc.attempts(&call)),
        None => Side::Http(HttpAttempts::new(&settings, configured)),
    };
    // The log alone (telemetry off) has no attempt span to read the
    // request's id: it is handed the header's value.
    let retry_log = settings
        .retry_log
        .clone()
        .map(|log| log.with_request_id(parts.headers.get(&settings.request_id_header)));
    let mut attempts = Attempts::new(ready, parts, source, guards.pacer().cloned(), side);
    // The attempt's limit reaches the client's `ConnectLimit`, if it has one.
    let observer = ((((telemetry, retry_log), stop.clone()), metrics), retryscope_http::AttemptLimits);
    let started = tokio::time::Instant::now();
    let outcome = match hedging {
        // Copies overlap: each is an attempt of its own (its body, its span,
        // its `grpc-previous-rpc-attempts`), and the first acceptable one wins.
        // Every copy is admitted as a retry's attempt is: the pacer before
        // each, the budget for every copy beyond the first.
        Some(policy) => {
            let hedge = (move || attempts.next())
                .hedge(policy)
                .priority(priority)
                .with_classifier(classifier)
                .observe(observer);
            guards.guard(hedge, operation).await
        }
        // Borrowed from the dependency's guards, which this call holds.
        None => {
            let retry = (move || attempts.next())
                .retry(call.policy)
                .priority(priority)
                .with_classifier(classifier)
                .observe(observer);
            guards.guard(retry, operation).await
        }
    };
    let stop = stop.stopped();
    if let Some(upstream) = &upstream {
        // So that the server this runs in tells its own caller not to retry.
        upstream.client_finished(stop, outcome.as_ref().ok().map(Response::headers));
    }
    let chosen = match (&settings.fallbacks, &fallback) {
        (Some(fallbacks), Some(_)) => fallbacks.choose(guards.dependency(), stop, configured),
        _ => None,
    };
    let (answer, served) = match (grpc, chosen, fallback) {
        // Without a fallback to run, finished here: `answer` is a future of
        // its own, which a call that cannot use it should not build and poll.
        (Some(grpc), None, _) => (grpc.finish(outcome, stop, &call, replayable, started, guards), false),
        (Some(grpc), chosen, fallback) => {
            let fallback = match (chosen, &fallback) {
                (Some(chosen), Some((parts, began, deadline))) => {
                    let remaining = retryscope_http::__private::fallback::remaining(*deadline, *began);
                    Some((chosen, &**parts, remaining))
                }
                _ => None,
            };
            grpc.answer(outcome, stop, &call, replayable, started, guards, fallback).await
        }
        (None, Some(chosen), Some((parts, started, deadline))) => {
            let remaining = retryscope_http::__private::fallback::remaining(deadline, started);
            let key = key.and_then(|_| parts.headers.get(settings.idempotency.header_name()));
            let target = (&parts.method, &parts.uri, key);
            let answer = http_call::answer_with(
                chosen,
                guards.dependency(),
                target,
                outcome,
                stop,
                replayable,
                remaining,
            )
            .await;
            let served = answer.is_ok();
            (answer, served)
        }
        (None, _, _) => (http_call::finish(outcome, stop, replayable), false),
    };
    if let Some(slot) = &outcome_slot {
        slot.settle(served);
    }
    answer
}

/// How `parts` is retried, and for a gRPC call what only gRPC needs of it.
fn plan(settings: &Settings, parts: &Parts, options: &RetryOptions) -> (Call, Option<GrpcCall>) {
    if let Some((policy, mode, grpc)) = grpc_call::plan(settings, parts, options) {
        return (Call { policy, mode }, Some(grpc));
    }
    let (policy, mode) = http_call::plan(settings, parts, options);
    (Call { policy, mode }, None)
}

/// The layer's telemetry, with this request's attempt spans.
fn telemetry(
    settings: &Settings,
    call: &Call,
    parts: &Arc<Parts>,
    key: Option<KeySource>,
) -> Option<OtelObserver<AttemptSpan>> {
    settings.telemetry.clone().map(|o| {
        o.with_attempt_spans(AttemptSpan {
            request: Arc::clone(parts),
            origin: settings.origin.clone(),
            grpc: call.mode.is_grpc(),
            idempotency_key: key,
            request_id_header: settings.request_id_header.clone(),
        })
    })
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

/// The hedging policy a request runs with, if it is hedged — decided here
/// and nowhere else: a gRPC method whose service config has a
/// `hedgingPolicy`, or — when the layer hedges — an HTTP request with an
/// idempotent method ([`may_hedge`](retryscope_http::__private::safety::may_hedge); a
/// keyed POST is retried, not hedged). Either only with a body that can be
/// sent again (every copy needs it), and never when the request brings its
/// own policy (it is retried under it instead). Other requests take the retry
/// path.
///
/// The layer's policy is the dependency's own copy of it (its guards'), so
/// that a percentile delay learns from that server's latencies alone; a gRPC
/// method's is built from its `hedgingPolicy`, whose delay is fixed.
fn hedging(
    guards: &Guards<Budget>,
    call: &Call,
    grpc: Option<&GrpcCall>,
    parts: &Parts,
    options: &RetryOptions,
    replayable: bool,
) -> Option<HedgePolicy> {
    if !replayable || options.policy_override().is_some() {
        return None;
    }
    match grpc {
        // Loaded and checked with the service config; the deadline is the
        // call's (its `grpc-timeout` included).
        Some(grpc) => grpc.hedging(&call.policy),
        None => {
            guards.hedge().cloned().filter(|_| retryscope_http::__private::safety::may_hedge(&parts.method))
        }
    }
}
