//! One gRPC attempt: the metadata it carries (`grpc-previous-rpc-attempts`,
//! what is left of the caller's `grpc-timeout`), A6's transparent retry of a
//! first attempt the server refused unprocessed, and the status its answer
//! reads.

use super::headers;
use super::metrics::CallMetrics;
use super::{reset, status};
use crate::error::BoxError;
use crate::inner::{AnswerBody, Inner};
use crate::protocol::{Answer, Answered, Attempts};
use crate::replay::{Held, ReplayBody, Source};
use crate::response::{ResponseBody, TrailersHook};
use crate::send::{ready, send};
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Span;

/// What a gRPC call's attempts carry besides the request.
pub(crate) struct GrpcAttempts {
    /// When the first attempt started, with a deadline on the wire:
    /// `grpc-timeout` counts from there.
    started: Option<Instant>,
    /// The call's deadline, if it goes on the wire.
    deadline: Option<Duration>,
    /// gRPC's call metrics; each attempt's body counts what it sends. A
    /// transparent retry calls `CallMetrics::transparent_retry_started` before
    /// making its body.
    metrics: Option<CallMetrics>,
    /// Whether a first attempt the server refused unprocessed is sent again
    /// (A6's transparent retry): not under the file's kill switch.
    transparent: bool,
}

impl GrpcAttempts {
    /// A call's attempts: `deadline` is the call's, if it goes on the wire;
    /// `transparent`, whether a refused first attempt is sent again;
    /// `metrics`, gRPC's call metrics, if the layer records them.
    pub(super) fn new(deadline: Option<Duration>, transparent: bool, metrics: Option<CallMetrics>) -> Self {
        Self { started: None, deadline, metrics, transparent }
    }

    /// `grpc-previous-rpc-attempts` on every retry, and — when the caller set
    /// a deadline — `grpc-timeout` set to what is left of it.
    fn metadata(&mut self, parts: &mut Parts, number: u32) {
        if number > 1 {
            parts.headers.insert(headers::PREVIOUS_ATTEMPTS, headers::previous_attempts(number - 1));
        }
        // The clock is read for a deadline on the wire only: `started` is
        // read with it alone (here and by the transparent retry).
        if let Some(deadline) = self.deadline {
            let now = Instant::now();
            let started = *self.started.get_or_insert(now);
            let remaining = deadline.saturating_sub(now.saturating_duration_since(started));
            parts.headers.insert(headers::TIMEOUT, headers::timeout_value(remaining));
        }
    }

    /// What the first attempt's transparent retry needs, if its body can be
    /// sent again.
    fn transparent<B: ReplayBody>(&self, shared: &Arc<Parts>, source: &Source<B>) -> Option<Transparent> {
        Some(Transparent {
            parts: Arc::clone(shared),
            body: source.spare()?,
            metrics: self.metrics.clone(),
            // The call's deadline, if it goes on the wire: the transparent
            // retry carries what is left of it when it is sent.
            deadline: self.started.zip(self.deadline),
        })
    }
}

/// What a gRPC attempt does with its answer.
pub(crate) struct GrpcAnswer {
    transparent: Option<Transparent>,
}

/// What A6's transparent retry of a first attempt needs to make its request
/// if the server refuses the first one unprocessed: the request's head (shared
/// with the attempts), a copy of the body held in memory (its bytes are
/// shared), gRPC's call metrics, and the call's deadline if it goes on the
/// wire (the instant the call started and the deadline's length).
struct Transparent {
    parts: Arc<Parts>,
    body: Held,
    metrics: Option<CallMetrics>,
    deadline: Option<(Instant, Duration)>,
}

impl Transparent {
    /// The request sent again: `grpc-timeout` set to what is left now of the
    /// call's deadline, and the call's metrics told that a transparent retry
    /// starts (A96), with the counter its body's meter adds to.
    fn request<B: ReplayBody>(&self) -> Request<B> {
        let meter = self.metrics.as_ref().map(|metrics| {
            let (meter, counter) = CallMetrics::transparent_meter();
            metrics.transparent_retry_started(counter);
            meter
        });
        let mut parts = Parts::clone(&self.parts);
        if let Some((started, deadline)) = self.deadline {
            let remaining = deadline.saturating_sub(started.elapsed());
            parts.headers.insert(headers::TIMEOUT, headers::timeout_value(remaining));
        }
        Request::from_parts(parts, self.body.replay().metered(meter))
    }
}

/// Whether a failed attempt never reached the server's application.
fn unprocessed(error: &BoxError) -> Option<&'static str> {
    reset::unprocessed(error).map(reset::Unprocessed::describe)
}

/// Records the status a gRPC response carries in its headers on the attempt
/// span; a response whose headers carry none is committed (A6) and goes to the
/// caller at once, its body unread, with the span handed to the body, which
/// records the status when the trailers arrive. The attempt's handle on the
/// span is the body's: a clone would cost a reference count through the
/// subscriber's layers, and its drop another.
fn read_status<ResB: Body>(
    mut response: Response<ResponseBody<ResB>>,
    span: Span,
) -> Response<ResponseBody<ResB>> {
    match status::read(&mut response) {
        Some(received) => status::record_code(&span, received.code),
        None => response.body_mut().on_trailers(TrailersHook { span, call: status::record_trailers }),
    }
    response
}

impl Attempts for GrpcAttempts {
    type Answer = GrpcAnswer;

    /// The body of attempt `number`, its metadata added to `parts`, and what it
    /// will do with its answer. `shared` is the request's head, which a
    /// transparent retry of the first attempt is made from.
    fn attempt<B: ReplayBody>(
        &mut self,
        parts: &mut Parts,
        number: u32,
        shared: &Arc<Parts>,
        source: &mut Source<B>,
    ) -> (Option<B>, GrpcAnswer) {
        let body = source.next_metered(self.metrics.as_ref().map(CallMetrics::sent_meter));
        self.metadata(parts, number);
        // A6's transparent retry: a first attempt the server refused before
        // processing it is sent once more at once, whatever the retry policy,
        // and not counted as an attempt. It needs the body again; what it
        // needs is kept (the shared head, the body's bytes) and the request is
        // made only if the server refuses the first one.
        let transparent =
            (number == 1 && self.transparent).then(|| self.transparent(shared, source)).flatten();
        (body, GrpcAnswer { transparent })
    }
}

impl Answer for GrpcAnswer {
    /// A refused first attempt sent again at once (its transparent retry);
    /// the server's pace told to the pacer; the status in the headers
    /// recorded, or the span handed to the body for the trailers'.
    fn answer<'a, S, B, ResB>(
        self,
        sent: Result<Response<ResB>, BoxError>,
        service: &'a mut S,
        span: Span,
    ) -> Answered<'a, Result<Response<ResponseBody<ResB>>, BoxError>>
    where
        S: Inner<B, ResB>,
        B: ReplayBody,
        ResB: AnswerBody,
    {
        let response = match sent {
            Ok(response) => response,
            Err(error) => match (self.transparent, unprocessed(&error)) {
                (Some(transparent), Some(why)) => {
                    tracing::info!(parent: &span, "transparent retry: {why}");
                    return Answered::Later(Box::pin(async move {
                        ready(service).await?;
                        let response = send(service, transparent.request(), &span).await?;
                        Ok(read_status(response.map(ResponseBody::new), span))
                    }));
                }
                _ => return Answered::Now(Err(error)),
            },
        };
        Answered::Now(Ok(read_status(response.map(ResponseBody::new), span)))
    }
}
