//! The gRPC call: its plan (the method's policy and codes, the caller's
//! `grpc-timeout`), gRPC's call metrics, and the status the caller gets. Each
//! attempt's metadata, A6's transparent retry and the status an attempt reads
//! are [`super::attempt`]'s.

use super::attempt::GrpcAttempts;
use super::headers;
use super::methods::{Method, Methods};
use super::metrics::{CallMetrics, GrpcMetrics};
use super::statuses::GrpcStatuses;
use super::{CodeSet, GrpcRetry, status};
use crate::error::BoxError;
use crate::inner::AnswerBody;
use crate::protocol::{Answered, Call, End, Inputs, Planned, Protocol};
use crate::response::ResponseBody;
use crate::settings::{Kept, Resolved, Settings};
use http::Response;
use http::request::Parts;
use http_body::Body;
use retryscope::dependency::Dependency;
use retryscope::hedge::HedgePolicy;
use retryscope::{Policy, RetryError, StopReason};
use retryscope_http::__private::call::Drive;
use retryscope_http::__private::fallback::Chosen;
use retryscope_http::__private::{CallConfig, Judge};
use retryscope_http::{FallbackFailed, LastAnswer, RetryOptions};
use retryscope_otel::bounded_operation;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What only gRPC needs of one call: the method it calls, whether its
/// deadline goes on the wire, and gRPC's own metrics of it.
pub(crate) struct GrpcCall {
    method: Arc<Method>,
    /// The codes its policy retries (the method's, or `UNAVAILABLE` for a
    /// caller's own policy).
    codes: CodeSet,
    /// The layer's gRPC metrics (A66, A96) when it records them, until the
    /// call starts them (`start`).
    layer_metrics: Option<GrpcMetrics>,
    /// gRPC's own metrics of the call (A66, A96), once started.
    metrics: Option<CallMetrics>,
    /// Whether the call's deadline goes on the wire as `grpc-timeout`: only a
    /// deadline the caller set itself does. The policy's own deadline (a
    /// preset's 15 s) bounds the retries here and is nobody else's business —
    /// a server would otherwise end a long-lived stream at it.
    sends_deadline: bool,
    /// Which guard a budget's refusal came from ([`Refuser`]). Read only by
    /// a refusal's message; a byte beside `sends_deadline` rather than the
    /// name, so the call's future, moved many times, carries no more than
    /// before.
    refuser: Refuser,
}

/// Which of a dependency's guards a refusal for want of budget
/// (`BudgetExhausted`) came from, as its message names it.
#[derive(Debug, Clone, Copy)]
enum Refuser {
    /// The dependency's retry budget: one given in code or in the file, or
    /// none at all.
    Budget,
    /// A6's token bucket: the channel's config throttles and the file writes
    /// no budget of its own for the call.
    Bucket,
    /// Either: the config throttles and the layer has a budget of code's
    /// (or the file's, for the call), both asked.
    Both,
}

impl Refuser {
    fn name(self) -> &'static str {
        match self {
            Refuser::Budget => "retry budget",
            Refuser::Bucket => "retry throttling (token bucket)",
            Refuser::Both => "retry budget or retry throttling (token bucket)",
        }
    }
}

/// How a call of a gRPC layer (`grpc`, its configuration) is retried: its
/// method's policy and codes, or the caller's own policy, within the
/// caller's `grpc-timeout`; and what it resolved to from the layer's file.
pub(crate) fn plan(
    (grpc, beside_budget): (&GrpcRetry, bool),
    methods: &Methods,
    metrics: Option<&GrpcMetrics>,
    settings: &Settings,
    parts: &Parts,
    options: &RetryOptions,
) -> Planned<GrpcCall> {
    let path = parts.uri.path();
    // What the call takes from the layer's file: a channel's call (no
    // authority of its own: the layer's origin's) finds it with its method,
    // kept per configuration with the file's policy for it; another resolves
    // it now.
    let (method, file, from_file) =
        match (settings.client.file_generation(), parts.uri.authority(), &settings.origin_server) {
            (Some(generation), None, Some(_)) => {
                let (method, kept) = methods.get_with_file(grpc, path, generation, || {
                    let file = settings.file_call(&parts.uri, true);
                    Kept { policy: file_policy(file.0.as_ref(), &RetryOptions::default()), file }
                });
                let from_file = match options.policy_override() {
                    None => kept.policy,
                    Some(_) => file_policy(kept.file.0.as_ref(), options),
                };
                (method, Resolved::Kept(kept), from_file)
            }
            _ => {
                let file = settings.file_call(&parts.uri, true);
                let from_file = file_policy(file.0.as_ref(), options);
                (methods.get(grpc, path), Resolved::Now(file), from_file)
            }
        };
    let retry = method.retry;
    // The file's policy where it decides it, else the request's own, else
    // its method's; lazily, as a policy is a hundred-odd bytes and a
    // configured call would copy the two it does not run (issue 35's
    // whole-call cost). The call keeps its service config's retryable codes
    // either way.
    let policy = from_file
        .or_else(|| options.policy_override())
        .or_else(|| retry.as_ref().map(|m| m.policy))
        .unwrap_or_else(send_once);
    // A policy given for one call, or by the file for a method its service
    // config does not retry, retries what gRPC usually retries: the file's
    // `attempts = 5` would otherwise retry no status at all.
    let unlisted = match (options.policy_override(), from_file) {
        (None, None) => CodeSet::EMPTY,
        _ => CodeSet::UNAVAILABLE,
    };
    let codes = retry.as_ref().map_or(unlisted, |m| m.codes);
    // The caller's `grpc-timeout` is the deadline of the whole call, whatever
    // policy it runs: a file's 15 s does not lengthen a caller's 400 ms.
    let timeout = headers::timeout(&parts.headers);
    let policy = match timeout {
        Some(timeout) => within(policy, timeout),
        None => policy,
    };
    let layer_metrics = metrics.cloned();
    // The file is read only on a channel that throttles.
    let refuser = match grpc.is_throttled() {
        true if beside_budget => Refuser::Both,
        true if !file.parts().0.is_some_and(|config| config.settings().sets().budget) => Refuser::Bucket,
        _ => Refuser::Budget,
    };
    let sends_deadline = timeout.is_some();
    let protocol = GrpcCall { method, codes, layer_metrics, metrics: None, sends_deadline, refuser };
    Planned { call: Call { policy }, protocol, file }
}

/// The file's policy for a call with `options`, where the file decides it: a
/// dependency names the call, or its kill switch is on (a request's own
/// policy wins over the rest of the file).
fn file_policy(config: Option<&CallConfig>, options: &RetryOptions) -> Option<Policy> {
    config.filter(|c| c.settings().name().is_some() || !c.settings().enabled()).map(|c| c.policy(options))
}

/// One attempt and no wait, without a time limit of its own: as gRPC sends
/// a method no service config names.
fn send_once() -> Policy {
    Policy::builder().max_attempts(1).no_deadline().no_attempt_timeout().build().unwrap_or_default()
}

/// `policy` with its deadline shortened to `timeout` (never lengthened).
fn within(policy: Policy, timeout: Duration) -> Policy {
    let deadline = policy.deadline().map_or(timeout, |d| d.min(timeout));
    // A zero or over-long timeout makes no valid policy: keep the one we have.
    policy.to_builder().deadline(deadline).build().unwrap_or(policy)
}

impl GrpcCall {
    /// The method's `hedgingPolicy` within the call's `policy`, if it has one.
    fn hedging(&self, policy: &Policy) -> Option<HedgePolicy> {
        self.method.retry.and_then(|retry| retry.hedging).and_then(|hedging| hedging.policy(policy).ok())
    }

    /// The engine's result as a gRPC caller gets it (`grpc::stop`), with the
    /// call's metrics handed to the response, which ends them when its status
    /// reaches the caller (an error ends them now).
    #[inline(always)]
    fn finish<B: Body>(
        self,
        outcome: Result<Response<ResponseBody<B>>, RetryError<BoxError>>,
        stop: Option<(StopReason, u32)>,
        call: &Call,
        replayable: bool,
        started: Instant,
        guards: &Dependency,
    ) -> Result<Response<ResponseBody<B>>, BoxError> {
        let codes = self.codes;
        let ending = super::stop::Ending {
            replayable,
            deadline_at: call.policy.deadline().and_then(|deadline| started.checked_add(deadline)),
            codes,
            guard: guards.budget().map(|_| self.refuser.name()),
        };
        let mut result = super::stop::finish(outcome, stop, ending);
        if let Some(tail) = self.metrics.and_then(|m| m.outcome(&result))
            && let Ok(response) = &mut result
        {
            response.body_mut().follow(tail);
        }
        result
    }

    /// What the caller gets, as [`finish`](Self::finish) says — or, when the
    /// call gave up and has a fallback (`fallback`: the fallback chosen, the
    /// request's head, the time left), the fallback's answer read as gRPC
    /// ([`super::fallback`]), marked; and whether a fallback answered. gRPC's
    /// call metrics record the call as it ended before the fallback ran: the
    /// server's status. A fallback that fails ends the call with the status
    /// the caller would have got, both errors told ([`fallback_failed`]).
    #[allow(clippy::too_many_arguments, reason = "`finish`'s, and the fallback")]
    async fn answer_with<B>(
        self,
        outcome: Result<Response<ResponseBody<B>>, RetryError<BoxError>>,
        stop: Option<(StopReason, u32)>,
        call: &Call,
        replayable: bool,
        started: Instant,
        guards: &Dependency,
        fallback: Option<(Chosen<'_>, &Parts, Option<Duration>)>,
    ) -> (Result<Response<ResponseBody<B>>, BoxError>, bool)
    where
        B: Body,
        B::Data: From<bytes::Bytes>,
    {
        let result = self.finish(outcome, stop, call, replayable, started, guards);
        let Some((chosen, parts, remaining)) = fallback else { return (result, false) };
        let last = match &result {
            Ok(response) => LastAnswer::Response { status: response.status(), headers: response.headers() },
            Err(error) => LastAnswer::Error(&**error),
        };
        let request = (&parts.method, &parts.uri, None);
        match chosen.answer(guards.name(), request, last, remaining).await {
            Ok(response) => (Ok(super::fallback::answer(response)), true),
            Err(error) => (Err(Box::new(fallback_failed(|call| error.with_original(call), result))), false),
        }
    }
}

/// The status of a call whose fallback failed: the code and metadata of the
/// status the caller would have got without a fallback (a tonic client
/// decodes a status, never an opaque error, which it would make `UNKNOWN`),
/// its message saying that the fallback failed too and why, and as its
/// source the `FallbackFailed` whose chain holds the fallback's error, then
/// the call's own (`failed` joins the two, once the call's status is known).
fn fallback_failed<B: Body>(
    failed: impl FnOnce(BoxError) -> FallbackFailed,
    result: Result<Response<ResponseBody<B>>, BoxError>,
) -> tonic::Status {
    let original = match result {
        Err(error) => tonic::Status::from_error(error),
        // A Trailers-Only answer the layer passed on (`grpc-status` in its
        // headers), or an HTTP status gRPC maps; a committed call's status
        // would come in trailers no one read: not known.
        Ok(response) => match status::received(&response) {
            Some(received) => {
                let message =
                    response.headers().get("grpc-message").map(|m| String::from_utf8_lossy(m.as_bytes()));
                tonic::Status::new(tonic::Code::from(i32::from(received.code)), message.unwrap_or_default())
            }
            None => tonic::Status::unknown("the call's status was not received"),
        },
    };
    let failed = failed(Box::new(original.clone()));
    let message = match original.message() {
        "" => format!("{failed}: {}", failed.fallback_error()),
        said => format!("{said} ({failed}: {})", failed.fallback_error()),
    };
    let mut status = tonic::Status::with_metadata(original.code(), message, original.metadata().clone());
    status.set_source(Arc::new(failed));
    status
}

impl Protocol for GrpcCall {
    type Attempts = GrpcAttempts;
    type Metrics = CallMetrics;
    type Statuses = GrpcStatuses;
    const GRPC: bool = true;

    fn statuses(&self) -> GrpcStatuses {
        GrpcStatuses { codes: self.codes }
    }

    /// gRPC's: A6 lets a call the service config retries run again once
    /// sent; its statuses are judged by their codes.
    fn judge(&self, _: &Settings, inputs: &Inputs<'_>) -> Judge {
        Judge::grpc(inputs.replayable)
    }

    /// Hedged when the method's service config has a `hedgingPolicy` (loaded
    /// and checked with the service config; the deadline is the call's, its
    /// `grpc-timeout` included) — only with a body that can be sent again
    /// (every copy needs it), never when the request brings its own policy
    /// (it is retried under it instead), and never under the file's kill
    /// switch.
    fn drive(&self, call: &Call, inputs: Inputs<'_>) -> Drive {
        let Inputs { configured, options, replayable, .. } = inputs;
        let priority = configured.map_or(options.priority_class(), |c| c.priority(options));
        let enabled = configured.is_none_or(|c| c.settings().enabled());
        let hedging = self
            .hedging(&call.policy)
            .filter(|_| replayable && enabled && options.policy_override().is_none());
        match hedging {
            Some(policy) => Drive::hedge(policy, priority),
            None => Drive::retry(call.policy, priority),
        }
    }

    /// gRPC's own metrics of the call (A66, A96), started when the layer
    /// records them: they follow the call to the caller, and count what its
    /// attempts send.
    fn start(
        &mut self,
        _: &Settings,
        parts: &Parts,
        call: &Call,
        configured: Option<&CallConfig>,
    ) -> (GrpcAttempts, Option<CallMetrics>) {
        self.metrics = self.layer_metrics.take().map(|metrics| metrics.call(parts.uri.path(), &parts.uri));
        let deadline = call.policy.deadline().filter(|_| self.sends_deadline);
        // The file's kill switch means one request on the wire: A6's
        // transparent retry is a second one, so it stops it too.
        let transparent = configured.is_none_or(|c| c.settings().enabled());
        (GrpcAttempts::new(deadline, transparent, self.metrics.clone()), self.metrics.clone())
    }

    /// The caller's name for it, else the method.
    fn operation(&self, options: &RetryOptions) -> Option<&'static str> {
        Some(options.operation_name().map_or_else(|| self.method.operation(), bounded_operation))
    }

    // Inlined into the call's future with `finish` and `stop::finish`: out
    // of line, each handed the answer (over 200 bytes) on by a copy, some
    // 220 instructions a call in all (BENCHMARKS.md).
    #[inline(always)]
    fn answer<'a, ResB>(
        self,
        end: End<'a>,
        _: &'a Settings,
        chosen: Option<(Chosen<'a>, Option<Duration>)>,
        kept: Option<Arc<Parts>>,
        outcome: Result<Response<ResponseBody<ResB>>, RetryError<BoxError>>,
        stop: Option<(StopReason, u32)>,
    ) -> Answered<'a, (Result<Response<ResponseBody<ResB>>, BoxError>, bool)>
    where
        ResB: AnswerBody,
    {
        let End { call, replayable, started, guards, .. } = end;
        match (chosen, kept) {
            (Some((chosen, remaining)), Some(parts)) => Answered::Later(Box::pin(async move {
                let fallback = Some((chosen, &*parts, remaining));
                self.answer_with(outcome, stop, call, replayable, started, guards, fallback).await
            })),
            // Without a fallback to run, finished here: `answer_with` is a
            // future of its own, which a call that cannot use it should not
            // build and poll.
            _ => Answered::Now((self.finish(outcome, stop, call, replayable, started, guards), false)),
        }
    }
}
