//! What only a protocol does to a call: HTTP's semantics
//! ([`HttpCall`](crate::http_call::HttpCall)) or gRPC's (`grpc::call`). The
//! call's recipe ([`crate::call::run`]) is written once over [`Protocol`];
//! a layer's protocol is fixed when it is built (a gRPC builder's layer makes
//! gRPC calls), and its service picks the type once per request — nothing
//! in a call branches on which protocol it speaks.

use crate::classify::Statuses;
use crate::error::BoxError;
use crate::inner::{AnswerBody, Inner};
use crate::replay::{ReplayBody, Source};
use crate::response::ResponseBody;
use crate::settings::{Resolved, Settings};
use http::Response;
use http::request::Parts;
use retryscope::dependency::Dependency;
use retryscope::observe::{Observer, OperationObserver};
use retryscope::{Policy, RetryError, StopReason};
use retryscope_http::__private::call::Drive;
use retryscope_http::__private::fallback::Chosen;
use retryscope_http::__private::idempotency::KeySource;
use retryscope_http::__private::{CallConfig, Judge};
use retryscope_http::RetryOptions;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tracing::Span;

/// A layer's protocol (the last type parameter of
/// [`RetryLayer`](crate::RetryLayer) and [`RetryService`](crate::RetryService)):
/// how its layer plans each call, which the protocol's [`Protocol`] then runs.
pub(crate) trait LayerProtocol: Clone + Send + Sync + 'static {
    /// One call of the protocol, once planned.
    type Call: Protocol;

    /// How the request `parts` (with its `options`) is retried by a layer
    /// with `settings`.
    fn plan(&self, settings: &Settings, parts: &Parts, options: &RetryOptions) -> Planned<Self::Call>;
}

/// How one request is retried: its policy (its semantics are its
/// protocol's type).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    pub(crate) policy: Policy,
}

/// A call as its protocol planned it: how it is retried, the protocol's own
/// part, and what it resolved to from a configured layer's file.
pub(crate) struct Planned<P> {
    pub(crate) call: Call,
    pub(crate) protocol: P,
    pub(crate) file: Resolved,
}

/// One call's protocol, once its plan is made (each protocol plans its own
/// calls: `HttpCall::plan`, `grpc::call::plan`): its key, how its attempts
/// run, what they carry, and the shape of what the caller gets.
pub(crate) trait Protocol: Sized + Send + 'static {
    /// What the protocol adds to each attempt.
    type Attempts: Attempts;
    /// The protocol's own metrics of the call, if it keeps any.
    type Metrics: Observer<Operation: OperationObserver<Attempt: Send> + Send> + Send + Sync + 'static;
    /// How it reads each attempt's result.
    type Statuses: Statuses;
    /// Whether its calls are gRPC calls, as the attempt spans say.
    const GRPC: bool;

    /// The statuses its attempts are read by.
    fn statuses(&self) -> Self::Statuses;

    /// Once per call, before any attempt: the request's idempotency key, if
    /// it gets one. None by default: gRPC's A6 retries what the service
    /// config opts in, and sends no key.
    fn key(&self, _: &Settings, _: Option<&CallConfig>, _: &mut Parts, _: bool) -> Option<KeySource> {
        None
    }

    /// How the call's attempts are judged, once its key (`inputs.key`) is
    /// known.
    fn judge(&self, settings: &Settings, inputs: &Inputs<'_>) -> Judge;

    /// Whether the call is retried or hedged, under which policy and priority.
    fn drive(&self, call: &Call, inputs: Inputs<'_>) -> Drive;

    /// What the attempts carry, and the protocol's metrics of the call (started now).
    fn start(
        &mut self,
        settings: &Settings,
        parts: &Parts,
        call: &Call,
        configured: Option<&CallConfig>,
    ) -> (Self::Attempts, Option<Self::Metrics>);

    /// The operation the call is reported as: the caller's name for it, else
    /// the protocol's, bounded (the label table keeps it for the process).
    fn operation(&self, options: &RetryOptions) -> Option<&'static str>;

    /// The caller's answer: the fallback's, if one was `chosen` (with the
    /// time left; `kept`: the request's head, kept for it), else the
    /// engine's outcome in the shape the protocol's callers expect; and
    /// whether a fallback served it. Known at once without a fallback.
    #[allow(clippy::too_many_arguments, reason = "the call's end, each part read once")]
    #[allow(clippy::type_complexity, reason = "the caller's answer, and whether a fallback served it")]
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
        ResB: AnswerBody;
}

/// What [`Protocol::drive`] reads of the call.
pub(crate) struct Inputs<'r> {
    pub(crate) configured: Option<&'r CallConfig>,
    pub(crate) guards: &'r Dependency,
    pub(crate) parts: &'r Parts,
    pub(crate) options: &'r RetryOptions,
    pub(crate) replayable: bool,
    /// The request's idempotency key, if it has one (`Protocol::key`).
    pub(crate) key: Option<KeySource>,
}

/// What a protocol adds to each attempt of a call.
pub(crate) trait Attempts: Send + 'static {
    /// What an attempt does with its answer.
    type Answer: Answer;

    /// The body of attempt `number`, its head completed in `parts`, and
    /// what it will do with its answer. `shared` is the request's head.
    fn attempt<B: ReplayBody>(
        &mut self,
        parts: &mut Parts,
        number: u32,
        shared: &Arc<Parts>,
        source: &mut Source<B>,
    ) -> (Option<B>, Self::Answer);
}

/// What one attempt does with its answer, as its protocol says.
pub(crate) trait Answer: Send + 'static {
    /// The attempt's result from what `service` sent back (`sent`), read on
    /// the attempt's `span`: at once, or — for an answer that needs more I/O —
    /// a future the attempt awaits. The attempt's handle on its span is
    /// handed over: what keeps the span open past the attempt (a gRPC
    /// response's trailers hook) keeps this one rather than a clone.
    fn answer<'a, S, B, ResB>(
        self,
        sent: Result<Response<ResB>, BoxError>,
        service: &'a mut S,
        span: Span,
    ) -> Answered<'a, Result<Response<ResponseBody<ResB>>, BoxError>>
    where
        S: Inner<B, ResB>,
        B: ReplayBody,
        ResB: AnswerBody;
}

/// An answer known at once, or still to come: an attempt's ([`Answer::answer`]:
/// a transparent retry, a body rule's read) or a call's
/// ([`Protocol::answer`]: a fallback's). Boxed when it is to come: its state
/// would otherwise take room in every attempt's or call's future, which is
/// moved many times, for answers few need.
pub(crate) enum Answered<'a, T> {
    Now(T),
    Later(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

/// What the call's end needs of the call.
pub(crate) struct End<'c> {
    #[cfg_attr(not(feature = "grpc"), expect(dead_code, reason = "gRPC's end reads it"))]
    pub(crate) call: &'c Call,
    pub(crate) replayable: bool,
    /// When the attempts began.
    #[cfg_attr(not(feature = "grpc"), expect(dead_code, reason = "gRPC's end reads it"))]
    pub(crate) started: tokio::time::Instant,
    pub(crate) guards: &'c Dependency,
    /// Whether the request carries an idempotency key (HTTP).
    pub(crate) key: Option<KeySource>,
}
