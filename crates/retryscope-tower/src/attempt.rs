//! The attempts of one request: the ready service first, a clone made ready
//! afresh for every retry, and the request rebuilt around its body, with what
//! only its protocol adds ([`protocol::Attempts`](crate::protocol::Attempts)).

use crate::error::{BoxError, NotReplayable};
use crate::inner::{AnswerBody, Inner};
use crate::protocol::{self, Answer, Answered};
use crate::replay::{ReplayBody, Source};
use crate::response::ResponseBody;
use crate::send::{ready, send};
use http::request::Parts;
use http::{HeaderMap, Request, Response};
use std::future::Future;
use std::sync::Arc;
use tower_service::Service;
use tracing::Span;

/// Hands out the attempts of one request; `P`: what its protocol adds.
pub(crate) struct Attempts<S, B, P> {
    /// The ready service and the request's own headers, for the first attempt.
    ready: Option<(S, HeaderMap)>,
    template: S,
    /// The request's head, shared with a transparent retry.
    parts: Arc<Parts>,
    source: Source<B>,
    number: u32,
    protocol: P,
}

impl<S, B, P> Attempts<S, B, P> {
    /// The attempts of a request whose first attempt `ready` serves with the
    /// request's own `headers` (`parts` has a copy of them).
    pub(crate) fn new(ready: S, parts: Arc<Parts>, headers: HeaderMap, source: Source<B>, protocol: P) -> Self
    where
        S: Clone,
    {
        let template = ready.clone();
        Self { ready: Some((ready, headers)), template, parts, source, number: 0, protocol }
    }
}

// `ResB` is named by the `Service` bound as well as by `Inner`: in a trait's
// parameters alone it would be unconstrained (E0207); `Response = ..` fixes it.
impl<S, B, ResB, P: protocol::Attempts> Attempts<S, B, P>
where
    S: Inner<B, ResB> + Service<Request<B>, Response = Response<ResB>>,
    B: ReplayBody,
    ResB: AnswerBody,
{
    pub(crate) fn next(
        &mut self,
    ) -> impl Future<Output = Result<Response<ResponseBody<ResB>>, BoxError>> + Send + use<S, B, ResB, P>
    {
        self.number += 1;
        let number = self.number;
        // Kept by the attempt for its transparent retry, which asks it afresh.
        // A retry's clone has its readiness awaited in the attempt.
        let (mut service, mut parts) = match self.ready.take() {
            Some((ready, headers)) => (ready, first_head(&self.parts, headers)),
            None => (self.template.clone(), Parts::clone(&self.parts)),
        };
        let replayable = self.source.is_replayable();
        let (body, answer) = self.protocol.attempt(&mut parts, number, &self.parts, &mut self.source);
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
            // Taken out before the await, which then holds the box alone,
            // not the whole `Answered` (224 bytes).
            let later = match answer.answer(sent, &mut service, span) {
                Answered::Now(result) => return result,
                Answered::Later(later) => later,
            };
            later.await
        }
    }
}

/// The first attempt's head: the request's, with its own `headers`. A copy
/// (`Parts::clone`) has no room left in its map, which the attempt's first
/// added header (`traceparent`, tonic's `user-agent`) then reallocated and
/// copied again; the request's own map has room. Some 130 instructions
/// fewer a gRPC call with the SDK (the reallocation, less the larger
/// `Attempts`).
fn first_head(shared: &Parts, headers: HeaderMap) -> Parts {
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.method = shared.method.clone();
    parts.uri = shared.uri.clone();
    parts.version = shared.version;
    parts.headers = headers;
    parts.extensions = shared.extensions.clone();
    parts
}
