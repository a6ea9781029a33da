//! The gRPC side of a call when the crate is built without `grpc`: types
//! without values, so that the code both protocols share names gRPC's side
//! without a `cfg`, and the compiler proves it is never reached. Each item
//! stands for the one of the same name in `grpc/call.rs`.

use crate::budget::Budget;
use crate::call::Call;
use crate::classify::Mode;
use crate::error::BoxError;
use crate::replay::{ReplayBody, Source};
use crate::response::ResponseBody;
use crate::settings::Settings;
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use retryscope::dependency::Guards;
use retryscope::hedge::HedgePolicy;
use retryscope::observe::NoObserver;
use retryscope::{Pacer, Policy, RetryError, StopReason};
use retryscope_http::RetryOptions;
use std::sync::Arc;
use tokio::time::Instant;
use tower_service::Service;
use tracing::Span;

/// gRPC's call metrics: none.
pub(crate) type CallMetrics = NoObserver;

/// No call is a gRPC call.
pub(crate) enum GrpcCall {}

/// Without `grpc`, every call is an HTTP call.
pub(crate) fn plan(_: &Settings, _: &Parts, _: &RetryOptions) -> Option<(Policy, Mode, GrpcCall)> {
    None
}

impl GrpcCall {
    pub(crate) fn take_file(&mut self) -> Option<crate::settings::Resolved> {
        match *self {}
    }

    pub(crate) fn operation(&self) -> Arc<str> {
        match *self {}
    }

    pub(crate) fn hedging(&self, _: &Policy) -> Option<HedgePolicy> {
        match *self {}
    }

    pub(crate) fn start_metrics(&mut self, _: &Settings, _: &Parts) -> Option<CallMetrics> {
        match *self {}
    }

    pub(crate) fn attempts(&self, _: &Call) -> GrpcAttempts {
        match *self {}
    }

    pub(crate) fn finish<B: Body>(
        self,
        _: Result<Response<ResponseBody<B>>, RetryError<BoxError>>,
        _: Option<(StopReason, u32)>,
        _: &Call,
        _: bool,
        _: Instant,
        _: &Guards<Budget>,
    ) -> Result<Response<ResponseBody<B>>, BoxError> {
        match self {}
    }

    #[allow(clippy::too_many_arguments, reason = "as gRPC's")]
    pub(crate) async fn answer<B: Body>(
        self,
        _: Result<Response<ResponseBody<B>>, RetryError<BoxError>>,
        _: Option<(StopReason, u32)>,
        _: &Call,
        _: bool,
        _: Instant,
        _: &Guards<Budget>,
        _: Option<(retryscope_http::__private::fallback::Chosen<'_>, &Parts, Option<std::time::Duration>)>,
    ) -> (Result<Response<ResponseBody<B>>, BoxError>, bool) {
        match self {}
    }
}

/// No attempt is a gRPC attempt.
pub(crate) enum GrpcAttempts {}

impl GrpcAttempts {
    pub(crate) fn attempt<B: ReplayBody>(
        &mut self,
        _: &mut Parts,
        _: u32,
        _: &Arc<Parts>,
        _: &mut Source<B>,
        _: Option<Pacer>,
    ) -> (Option<B>, GrpcAnswer) {
        match *self {}
    }
}

/// No answer is a gRPC answer.
pub(crate) enum GrpcAnswer {}

impl GrpcAnswer {
    pub(crate) async fn answer<S, B, ResB>(
        self,
        _: Result<Response<ResB>, BoxError>,
        _: &mut S,
        _: &Span,
    ) -> Result<Response<ResponseBody<ResB>>, BoxError>
    where
        S: Service<Request<B>, Response = Response<ResB>>,
        S::Error: Into<BoxError>,
        B: ReplayBody,
        ResB: Body,
    {
        match self {}
    }
}
