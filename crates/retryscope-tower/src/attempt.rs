//! The attempts of one request: the ready service first, a clone made ready
//! afresh for every retry, and the request rebuilt around its body, with what
//! only its protocol adds ([`Side`]).

use crate::error::{BoxError, NotReplayable};
use crate::grpc_call::{GrpcAnswer, GrpcAttempts};
use crate::http_call::{HttpAnswer, HttpAttempts};
use crate::replay::{ReplayBody, Source};
use crate::response::ResponseBody;
use crate::send::{ready, send};
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use retryscope::Pacer;
use std::future::Future;
use std::sync::Arc;
use tower_service::Service;
use tracing::Span;

/// Hands out the attempts of one request.
pub(crate) struct Attempts<S, B> {
    ready: Option<S>,
    template: S,
    /// The request's head, shared with a transparent retry.
    parts: Arc<Parts>,
    source: Source<B>,
    number: u32,
    /// The dependency's pacer, told what every response says about pace.
    pacer: Option<Pacer>,
    side: Side,
}

/// What only the call's protocol does to its attempts: their head, their
/// body, and what an attempt does with its answer.
pub(crate) enum Side {
    Http(HttpAttempts),
    Grpc(GrpcAttempts),
}

/// What one attempt does with its answer, as its protocol says.
pub(crate) enum Answer {
    Http(HttpAnswer),
    Grpc(GrpcAnswer),
}

impl<S, B> Attempts<S, B> {
    /// The attempts of a request whose first attempt `ready` serves.
    pub(crate) fn new(
        ready: S,
        parts: Arc<Parts>,
        source: Source<B>,
        pacer: Option<Pacer>,
        side: Side,
    ) -> Self
    where
        S: Clone,
    {
        let template = ready.clone();
        Self { ready: Some(ready), template, parts, source, number: 0, pacer, side }
    }
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
    pub(crate) fn next(
        &mut self,
    ) -> impl Future<Output = Result<Response<ResponseBody<ResB>>, BoxError>> + Send + use<S, B, ResB> {
        self.number += 1;
        let number = self.number;
        // Kept by the attempt for its transparent retry, which asks it afresh.
        // A retry's clone has its readiness awaited in the attempt.
        let mut service = match self.ready.take() {
            Some(ready) => ready,
            None => self.template.clone(),
        };
        let replayable = self.source.is_replayable();
        let mut parts = Parts::clone(&self.parts);
        let pacer = self.pacer.clone();
        let (body, answer) = match &mut self.side {
            Side::Http(http) => {
                let (body, answer) = http.attempt(&mut parts, number, &mut self.source, pacer);
                (body, Answer::Http(answer))
            }
            // Without `grpc` there is no value of `GrpcAttempts`, and the arm is
            // unreachable (see `without_grpc.rs`).
            #[allow(unreachable_code, reason = "unreachable only without `grpc`")]
            Side::Grpc(grpc) => {
                let (body, answer) = grpc.attempt(&mut parts, number, &self.parts, &mut self.source, pacer);
                (body, Answer::Grpc(answer))
            }
        };
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
            match answer {
                Answer::Http(http) => http.answer(sent?.map(ResponseBody::new), &span).await,
                Answer::Grpc(grpc) => grpc.answer(sent, &mut service, &span).await,
            }
        }
    }
}
