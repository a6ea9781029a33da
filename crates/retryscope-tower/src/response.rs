//! The body of a response that came through the layer: the inner service's,
//! as it came, with what a body rule read ahead given back first, and (with
//! `grpc`) the hooks that follow a stream's status to the caller.

use crate::replay::grow;
use bytes::Buf;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use retryscope::Verdict;
use retryscope_http::__private::body_rule::{Judged, SharedBodyRule};
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

/// What follows a response to the caller for gRPC's call metrics (gRFC A66):
/// it counts the message bytes that pass by and ends the call with the
/// status in the trailers, or without one if the body ends first.
#[cfg(feature = "grpc")]
pub(crate) trait Tail: Send + Sync {
    /// Response bytes on their way to the caller.
    fn data(&mut self, data: &dyn Buf);
    /// The trailers reached the caller.
    fn trailers(self: Box<Self>, trailers: &HeaderMap);
    /// The body ended without trailers.
    fn ended(self: Box<Self>);
}

/// What to do with the trailers of a response that was handed to the caller
/// before they arrived (a gRPC stream's status, recorded on the attempt's span,
/// which the hook keeps open until then).
pub(crate) struct TrailersHook {
    pub(crate) span: tracing::Span,
    pub(crate) call: fn(&tracing::Span, &HeaderMap),
}

/// The body of a response that came through the layer: the inner service's
/// body, as it came. The layer reads ahead in it only for a body rule
/// ([`retry_on_body`](crate::prelude::WithHttpSettings::retry_on_body)) that selected
/// the response, and then gives back what it read before the rest; any other
/// response is handed over with its headers (with `grpc`, a stream is never
/// delayed to wait for its first message).
pub struct ResponseBody<B: Body> {
    // Boxed so the layer can release it from a response it keeps through a
    // backoff wait, whatever `B` is; `None` once released (see `release`).
    inner: Option<Pin<Box<B>>>,
    /// What a body rule read ahead, given back before the rest of `inner`,
    /// and its verdict, for the classifier. Boxed, as the rarer fields are:
    /// a response is moved from the attempt to the caller many times.
    judged: Option<Box<Judged<B::Data>>>,
    hook: Option<TrailersHook>,
    /// gRPC's call metrics, which end when the status reaches the caller.
    #[cfg(feature = "grpc")]
    tail: Option<Box<dyn Tail>>,
    /// What the response's gRPC headers said, once the attempt read them.
    #[cfg(feature = "grpc")]
    grpc_head: Option<crate::head::Head>,
}

// No field is ever pinned in place: the inner body is behind its own `Pin<Box>`.
impl<B: Body> Unpin for ResponseBody<B> {}

impl<B: Body> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseBody").field("released", &self.inner.is_none()).finish_non_exhaustive()
    }
}

impl<B: Body> ResponseBody<B> {
    pub(crate) fn new(inner: B) -> Self {
        Self {
            inner: Some(Box::pin(inner)),
            judged: None,
            hook: None,
            #[cfg(feature = "grpc")]
            tail: None,
            #[cfg(feature = "grpc")]
            grpc_head: None,
        }
    }

    /// A body that is all `data`, and no inner body: a fallback's answer.
    pub(crate) fn answered(data: B::Data) -> Self {
        Self::answered_frames(std::collections::VecDeque::from([Frame::data(data)]))
    }

    /// A body of these frames (data, then trailers), and no inner body: a
    /// fallback's answer to a gRPC call.
    pub(crate) fn answered_frames(read: std::collections::VecDeque<Frame<B::Data>>) -> Self {
        let mut body = Self::new_empty();
        body.judged = Some(Box::new(Judged { verdict: None, read }));
        body
    }

    fn new_empty() -> Self {
        Self {
            inner: None,
            judged: None,
            hook: None,
            #[cfg(feature = "grpc")]
            tail: None,
            #[cfg(feature = "grpc")]
            grpc_head: None,
        }
    }

    /// Takes the body away from the response, which then ends at once: what a
    /// failed response kept through a backoff wait gives up, so that its
    /// connection is not pinned for the wait.
    pub(crate) fn release(&mut self) -> Option<Pin<Box<B>>> {
        if let Some(judged) = &mut self.judged {
            judged.read.clear();
        }
        self.inner.take()
    }

    /// Reads ahead for `rule`, up to its limit, keeping what it read for the
    /// caller and its verdict for the classifier. An error while reading is
    /// the attempt's failure.
    pub(crate) async fn judge(
        &mut self,
        rule: &SharedBodyRule,
        status: http::StatusCode,
        headers: &HeaderMap,
    ) -> Result<(), B::Error> {
        let Some(inner) = self.inner.as_mut() else { return Ok(()) };
        let judged = rule.judge(status, headers, inner).await?;
        self.judged = (judged.verdict.is_some() || !judged.read.is_empty()).then(|| Box::new(judged));
        Ok(())
    }

    /// The body rule's verdict on this response, if it gave one.
    pub(crate) fn judged(&self) -> Option<Verdict> {
        self.judged.as_ref().and_then(|judged| judged.verdict)
    }

    /// Calls `hook` when the trailers pass by on their way to the caller.
    #[cfg(feature = "grpc")]
    pub(crate) fn on_trailers(&mut self, hook: TrailersHook) {
        self.hook = Some(hook);
    }

    /// What the response's gRPC headers said, if the attempt read them.
    #[cfg(feature = "grpc")]
    pub(crate) fn grpc_head(&self) -> Option<crate::head::Head> {
        self.grpc_head
    }

    /// Keeps what the response's gRPC headers said.
    #[cfg(feature = "grpc")]
    pub(crate) fn set_grpc_head(&mut self, head: crate::head::Head) {
        self.grpc_head = Some(head);
    }

    /// Follows the response to the caller for gRPC's call metrics: counts its
    /// message bytes and ends the call with its status.
    #[cfg(feature = "grpc")]
    pub(crate) fn follow(&mut self, tail: impl Tail + 'static) {
        self.tail = Some(Box::new(tail));
    }
}

#[cfg(feature = "grpc")]
impl<B: Body> ResponseBody<B> {
    /// Tells the call's metrics what passed by on the way to the caller: a
    /// frame, or the end of the body (`None`). An error ends nothing: the call
    /// ends as the caller drops it, or its metrics end it as cancelled when
    /// every handle is gone.
    fn follow_frame(&mut self, frame: Option<&Frame<B::Data>>) {
        let Some(tail) = self.tail.as_mut() else { return };
        match frame {
            Some(frame) => {
                if let Some(data) = frame.data_ref() {
                    tail.data(data);
                } else if let (Some(trailers), Some(tail)) = (frame.trailers_ref(), self.tail.take()) {
                    tail.trailers(trailers);
                }
            }
            None => {
                if let Some(tail) = self.tail.take() {
                    tail.ended();
                }
            }
        }
    }
}

impl<B: Body> Body for ResponseBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        // Every field is `Unpin` (the inner body is boxed).
        let this = &mut *self;
        let read = this.judged.as_mut().and_then(|judged| judged.read.pop_front());
        let next = match (read, this.inner.as_mut()) {
            (Some(read), _) => Poll::Ready(Some(Ok(read))),
            (None, Some(inner)) => inner.as_mut().poll_frame(cx),
            (None, None) => Poll::Ready(None),
        };
        if let Poll::Ready(Some(Ok(frame))) = &next
            && let Some(trailers) = frame.trailers_ref()
            && let Some(hook) = this.hook.take()
        {
            (hook.call)(&hook.span, trailers);
        }
        #[cfg(feature = "grpc")]
        match &next {
            Poll::Ready(Some(Ok(frame))) => this.follow_frame(Some(frame)),
            Poll::Ready(None) => this.follow_frame(None),
            Poll::Ready(Some(Err(_))) | Poll::Pending => {}
        }
        next
    }

    fn is_end_stream(&self) -> bool {
        self.judged.as_ref().is_none_or(|judged| judged.read.is_empty())
            && self.inner.as_ref().is_none_or(|inner| inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.inner.as_ref().map_or_else(|| SizeHint::with_exact(0), |inner| inner.size_hint());
        let read = self.judged.as_ref().map_or(0, |judged| {
            judged.read.iter().filter_map(Frame::data_ref).map(|data| data.remaining() as u64).sum()
        });
        grow(rest, read)
    }
}
