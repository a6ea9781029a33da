//! Request bodies that can be sent again.
//!
//! `http::Request` is not `Clone`, and a body is a stream consumed by sending
//! it: to retry, the layer keeps a copy. It keeps one only while the body is
//! small (the limit, 256 KiB by default, is what gRPC implementations buffer per
//! call) and already there: a body that would make the caller wait — a client
//! stream still being produced — or that outgrows the limit is sent once, as it
//! comes, and never retried.

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use std::collections::VecDeque;
use std::fmt;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The default replay limit: 256 KiB, as gRPC implementations buffer per call.
pub const DEFAULT_REPLAY_LIMIT: usize = 256 * 1024;

/// A request body type the layer can rebuild for every attempt.
///
/// The layer reads the caller's body into memory (up to its limit) and hands the
/// inner service a body of the *same type* on every attempt, made from a
/// [`Replay`]. Implemented for the body types of tonic channels (feature `grpc`)
/// and of hyper-util clients (`Full<Bytes>`, `BoxBody`, `UnsyncBoxBody`).
pub trait ReplayBody: Body<Data = Bytes> + Send + Sized + 'static {
    /// Makes a body of this type that sends what `replay` holds.
    fn from_replay(replay: Replay<Self>) -> Self;
}

impl<E: 'static> ReplayBody for http_body_util::combinators::BoxBody<Bytes, E> {
    fn from_replay(replay: Replay<Self>) -> Self {
        Self::new(replay)
    }
}

impl<E: 'static> ReplayBody for http_body_util::combinators::UnsyncBoxBody<Bytes, E> {
    fn from_replay(replay: Replay<Self>) -> Self {
        Self::new(replay)
    }
}

/// A `Full` body is in memory already: a replay is the same bytes again. (A
/// `Full` body over the limit is still sent once, for the same reason as any
/// other: the limit bounds what the layer holds.)
impl ReplayBody for http_body_util::Full<Bytes> {
    fn from_replay(replay: Replay<Self>) -> Self {
        let (prefix, rest) = match replay.kind {
            Kind::Buffered { data, .. } => return Self::new(data),
            Kind::Streaming { prefix, rest, .. } => (prefix, rest),
        };
        let mut bytes = BytesMut::new();
        prefix.iter().for_each(|chunk| bytes.extend_from_slice(chunk));
        if let Some(mut rest) = rest {
            // A `Full` yields its one frame at once, never `Pending`: the noop
            // waker is never needed.
            let mut cx = Context::from_waker(std::task::Waker::noop());
            while let Poll::Ready(Some(Ok(frame))) = rest.as_mut().poll_frame(&mut cx) {
                if let Some(data) = frame.data_ref() {
                    bytes.extend_from_slice(data);
                }
            }
        }
        Self::new(bytes.freeze())
    }
}

#[cfg(feature = "grpc")]
impl ReplayBody for tonic::body::Body {
    fn from_replay(replay: Replay<Self>) -> Self {
        Self::new(replay)
    }
}

/// The body of one attempt: the buffered bytes again, or — once only — what was
/// read ahead followed by the rest of the caller's stream.
pub struct Replay<B> {
    kind: Kind<B>,
    /// Counts the request message bytes this attempt sends (gRPC metrics).
    #[cfg(feature = "grpc")]
    sent: Option<crate::framing::MessageMeter>,
}

// Trailers are boxed: a request seldom has any, and the bodies are moved with
// every attempt.
enum Kind<B> {
    /// `exact`: whether the caller's body knew its length (see [`Held`]).
    Buffered {
        data: Bytes,
        trailers: Option<Box<HeaderMap>>,
        exact: bool,
    },
    Streaming {
        prefix: VecDeque<Bytes>,
        trailers: Option<Box<HeaderMap>>,
        rest: Option<Pin<Box<B>>>,
    },
}

impl<B> fmt::Debug for Replay<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Buffered { data, .. } => f.debug_struct("Replay").field("buffered", &data.len()).finish(),
            Kind::Streaming { prefix, .. } => {
                f.debug_struct("Replay").field("streaming_prefix", &prefix.len()).finish_non_exhaustive()
            }
        }
    }
}

impl<B: ReplayBody> Replay<B> {
    /// The body of type `B` that sends this, with `sent` counting the message
    /// bytes it sends.
    #[cfg(feature = "grpc")]
    pub(crate) fn metered(self, sent: Option<crate::framing::MessageMeter>) -> B {
        B::from_replay(Replay { sent, ..self })
    }
}

impl<B: Body<Data = Bytes>> Replay<B> {
    fn next_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match &mut self.kind {
            Kind::Buffered { data, trailers, .. } => {
                if !data.is_empty() {
                    return Poll::Ready(Some(Ok(Frame::data(std::mem::take(data)))));
                }
                Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(*t))))
            }
            Kind::Streaming { prefix, trailers, rest } => {
                if let Some(chunk) = prefix.pop_front() {
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                if let Some(t) = trailers.take() {
                    return Poll::Ready(Some(Ok(Frame::trailers(*t))));
                }
                match rest {
                    Some(body) => body.as_mut().poll_frame(cx),
                    None => Poll::Ready(None),
                }
            }
        }
    }
}

impl<B: Body<Data = Bytes>> Body for Replay<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        // `Replay` holds no pinned field (the stream is boxed), so it is `Unpin`.
        let next = self.next_frame(cx);
        #[cfg(feature = "grpc")]
        if let (Poll::Ready(Some(Ok(frame))), Some(sent)) = (&next, self.sent.as_mut())
            && let Some(data) = frame.data_ref()
        {
            sent.count(data);
        }
        next
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Buffered { data, trailers, .. } => data.is_empty() && trailers.is_none(),
            Kind::Streaming { prefix, trailers, rest } => {
                prefix.is_empty() && trailers.is_none() && rest.as_ref().is_none_or(|b| b.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Buffered { data, exact: true, .. } => SizeHint::with_exact(data.len() as u64),
            // At least what is left, as no more than the caller's body said.
            Kind::Buffered { data, exact: false, .. } => {
                let mut hint = SizeHint::new();
                hint.set_lower(data.len() as u64);
                hint
            }
            Kind::Streaming { prefix, rest, .. } => {
                let read: u64 = prefix.iter().map(|c| c.len() as u64).sum();
                let hint = rest.as_ref().map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint());
                grow(hint, read)
            }
        }
    }
}

/// The caller's body, read ahead: every attempt gets its bytes again, or the
/// first attempt gets the stream.
pub(crate) enum Source<B> {
    /// Held in memory: any number of attempts.
    Replayable(Held),
    /// Sent once: `None` after the first attempt took it.
    Once(Option<Replay<B>>),
}

impl<B: ReplayBody> Source<B> {
    /// Reads `body` while it is there at once and fits `limit`.
    ///
    /// Reading stops at the first frame that is not ready yet (a stream the caller
    /// is still producing: waiting for it could deadlock a client that waits for
    /// the server's first response before sending more) and at the first frame
    /// that crosses `limit`. Either way the body is sent once: what was read
    /// ahead, then the rest of the stream.
    ///
    /// # Errors
    ///
    /// The body's own error, if reading it failed before anything was sent.
    pub(crate) async fn read(body: B, limit: usize) -> Result<Self, B::Error> {
        let exact = body.size_hint().exact().is_some();
        if body.is_end_stream() {
            return Ok(Self::Replayable(Held { data: Bytes::new(), trailers: None, exact }));
        }
        let mut body = Box::pin(body);
        if body.size_hint().lower() > limit as u64 {
            return Ok(Self::once(VecDeque::new(), None, Some(body)));
        }
        let mut chunks = ReadAhead::default();
        let mut trailers: Option<Box<HeaderMap>> = None;
        loop {
            let next = poll_fn(|cx| Poll::Ready(body.as_mut().poll_frame(cx))).await;
            let frame = match next {
                Poll::Pending => return Ok(Self::once(chunks.into_prefix(), trailers, Some(body))),
                Poll::Ready(None) => break,
                Poll::Ready(Some(frame)) => frame?,
            };
            match frame.into_data() {
                Ok(data) => {
                    chunks.push(data);
                    if chunks.len > limit {
                        return Ok(Self::once(chunks.into_prefix(), trailers, Some(body)));
                    }
                }
                Err(frame) => {
                    if let Ok(more) = frame.into_trailers() {
                        match &mut trailers {
                            Some(t) => t.extend(more),
                            None => trailers = Some(Box::new(more)),
                        }
                    }
                }
            }
            if body.is_end_stream() {
                break;
            }
        }
        Ok(Self::Replayable(Held { data: chunks.into_bytes(), trailers, exact }))
    }

    fn once(prefix: VecDeque<Bytes>, trailers: Option<Box<HeaderMap>>, rest: Option<Pin<Box<B>>>) -> Self {
        Self::Once(Some(Replay {
            kind: Kind::Streaming { prefix, trailers, rest },
            #[cfg(feature = "grpc")]
            sent: None,
        }))
    }

    /// Whether every attempt can get the body.
    pub(crate) fn is_replayable(&self) -> bool {
        matches!(self, Self::Replayable { .. })
    }

    /// The body of the next attempt, or `None` if it was sent already.
    pub(crate) fn next(&mut self) -> Option<B> {
        self.next_replay().map(B::from_replay)
    }

    fn next_replay(&mut self) -> Option<Replay<B>> {
        match self {
            Self::Replayable(held) => Some(held.replay()),
            Self::Once(replay) => replay.take(),
        }
    }

    /// [`next`](Self::next), with `sent` counting the message bytes it sends.
    #[cfg(feature = "grpc")]
    pub(crate) fn next_metered(&mut self, sent: Option<crate::framing::MessageMeter>) -> Option<B> {
        self.next_replay().map(|replay| replay.metered(sent))
    }

    /// The body held in memory, for an attempt that may follow, if every
    /// attempt can get it: shared, not copied.
    #[cfg(feature = "grpc")]
    pub(crate) fn spare(&self) -> Option<Held> {
        match self {
            Self::Replayable(held) => Some(held.clone()),
            Self::Once(_) => None,
        }
    }
}

/// A request body held in memory: its bytes, and its trailers if it had any.
/// A clone shares them.
///
/// Every attempt's body tells its length as the caller's did (`exact`): a body
/// that knew its length gives it (an HTTP/1.1 request keeps its
/// `Content-Length`), one that did not gives none (a tonic message stays
/// without one, and a chunked request stays chunked). An attempt then puts on
/// the wire no header the caller's own send would not have: hyper adds
/// `Content-Length` for a body of exact length.
#[derive(Clone)]
pub(crate) struct Held {
    data: Bytes,
    trailers: Option<Box<HeaderMap>>,
    exact: bool,
}

impl Held {
    /// The body of one attempt: the bytes again.
    pub(crate) fn replay<B>(&self) -> Replay<B> {
        Replay {
            kind: Kind::Buffered {
                data: self.data.clone(),
                trailers: self.trailers.clone(),
                exact: self.exact,
            },
            #[cfg(feature = "grpc")]
            sent: None,
        }
    }
}

/// `hint` plus `extra` bytes already read. The upper bound grows first:
/// `SizeHint` insists on `lower <= upper` at every step.
pub(crate) fn grow(hint: SizeHint, extra: u64) -> SizeHint {
    let mut grown = SizeHint::new();
    if let Some(upper) = hint.upper() {
        grown.set_upper(upper.saturating_add(extra));
    }
    grown.set_lower(hint.lower().saturating_add(extra));
    grown
}

/// The chunks of a body read ahead. The first is kept apart: most bodies are
/// one chunk (a unary gRPC message, a JSON document), which then needs no
/// queue.
#[derive(Default)]
struct ReadAhead {
    first: Option<Bytes>,
    rest: VecDeque<Bytes>,
    /// Bytes read in all.
    len: usize,
}

impl ReadAhead {
    fn push(&mut self, chunk: Bytes) {
        self.len = self.len.saturating_add(chunk.len());
        match self.first {
            None => self.first = Some(chunk),
            Some(_) => self.rest.push_back(chunk),
        }
    }

    /// The chunks in order, to send before the rest of the body.
    fn into_prefix(self) -> VecDeque<Bytes> {
        let mut prefix = self.rest;
        if let Some(first) = self.first {
            prefix.push_front(first);
        }
        prefix
    }

    /// One `Bytes`: the chunk itself when there is one.
    fn into_bytes(self) -> Bytes {
        let Some(first) = self.first else { return Bytes::new() };
        if self.rest.is_empty() {
            return first;
        }
        let mut all = BytesMut::with_capacity(self.len);
        all.extend_from_slice(&first);
        self.rest.iter().for_each(|chunk| all.extend_from_slice(chunk));
        all.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::combinators::BoxBody;
    use http_body_util::{BodyExt, Full, StreamBody};
    use std::convert::Infallible;

    type Boxed = BoxBody<Bytes, Infallible>;

    fn frames(frames: Vec<Frame<Bytes>>) -> Boxed {
        BoxBody::new(StreamBody::new(tokio_stream::iter(frames.into_iter().map(Ok::<_, Infallible>))))
    }

    async fn collect(body: Boxed) -> (Bytes, Option<HeaderMap>) {
        let collected = body.collect().await.unwrap_or_else(|e| match e {});
        let trailers = collected.trailers().cloned();
        (collected.to_bytes(), trailers)
    }

    #[tokio::test]
    async fn a_small_body_with_trailers_is_replayed_whole_every_time() {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-checksum", http::HeaderValue::from_static("abc"));
        let body = frames(vec![
            Frame::data(Bytes::from("hel")),
            Frame::data(Bytes::from("lo")),
            Frame::trailers(trailers.clone()),
        ]);
        let mut source = Source::read(body, 16).await.unwrap_or_else(|e| match e {});
        assert!(source.is_replayable());
        for _ in 0..3 {
            let body = source.next().expect("replayable");
            assert_eq!(collect(body).await, (Bytes::from("hello"), Some(trailers.clone())));
        }
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_sent_once_and_whole() {
        let body = frames(vec![Frame::data(Bytes::from("0123456789")), Frame::data(Bytes::from("abcdef"))]);
        let mut source = Source::read(body, 8).await.unwrap_or_else(|e| match e {});
        assert!(!source.is_replayable());
        let body = source.next().expect("the first attempt gets it");
        assert_eq!(collect(body).await.0, Bytes::from("0123456789abcdef"));
        assert!(source.next().is_none(), "and only the first");
    }

    #[tokio::test]
    async fn a_body_that_is_not_there_yet_is_sent_once_without_waiting() {
        let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(2);
        let body = BoxBody::new(StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(receiver)));
        let mut source = Source::read(body, 1024).await.unwrap_or_else(|e| match e {});
        assert!(!source.is_replayable());
        let body = source.next().expect("sent once");
        sender.send(Ok(Frame::data(Bytes::from("late")))).await.expect("receiver alive");
        drop(sender);
        assert_eq!(collect(body).await.0, Bytes::from("late"));
    }

    #[tokio::test]
    async fn a_full_body_over_the_limit_still_arrives_whole() {
        let mut source =
            Source::read(Full::new(Bytes::from(vec![3u8; 100])), 10).await.unwrap_or_else(|e| match e {});
        assert!(!source.is_replayable());
        let body = source.next().expect("sent once");
        assert_eq!(body.collect().await.unwrap_or_else(|e| match e {}).to_bytes().len(), 100);
    }

    /// A replay tells its length as the caller's body did: a body of known
    /// length (a `Full`) gets its exact length on every attempt, so hyper
    /// sends `Content-Length`; a stream of unknown length (a tonic message,
    /// a chunked upload) gets none, so no attempt sends one the caller's own
    /// send would not have.
    #[tokio::test]
    async fn a_replay_knows_its_length_exactly_when_the_caller_s_body_did() {
        let known = Full::new(Bytes::from("hello")).map_err(|e| match e {}).boxed();
        let unknown = frames(vec![Frame::data(Bytes::from("hel")), Frame::data(Bytes::from("lo"))]);
        for (body, exact) in [(known, Some(5)), (unknown, None)] {
            let mut source = Source::read(body, 16).await.unwrap_or_else(|e| match e {});
            for _ in 0..2 {
                let body = source.next().expect("replayable");
                let hint = body.size_hint();
                assert_eq!((hint.exact(), hint.lower()), (exact, 5));
                assert_eq!(collect(body).await.0, Bytes::from("hello"));
            }
        }
    }

    #[test]
    fn size_hints_grow_without_breaking_their_invariant() {
        let hint = grow(SizeHint::with_exact(10), 5);
        assert_eq!((hint.lower(), hint.upper()), (15, Some(15)));
        let open = grow(SizeHint::new(), 5);
        assert_eq!((open.lower(), open.upper()), (5, None));
    }
}
