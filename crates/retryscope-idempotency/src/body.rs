//! The bodies the layer hands on: the request body the inner service reads
//! (buffered when the request was fingerprinted) and the response body the
//! caller gets (buffered when the response was kept).

use std::error::Error;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

/// The boxed error of [`ResponseBody`].
pub type BoxError = Box<dyn Error + Send + Sync>;

/// The request body the inner service gets: the caller's own, or, for a keyed
/// request, the bytes the layer read to fingerprint it.
#[derive(Debug)]
pub struct RequestBody<B> {
    buffered: Option<Bytes>,
    inner: Option<Pin<Box<B>>>,
}

impl<B> RequestBody<B> {
    /// The caller's body, untouched.
    pub fn streaming(body: B) -> Self {
        Self { buffered: None, inner: Some(Box::pin(body)) }
    }

    /// A body already read.
    pub fn buffered(bytes: Bytes) -> Self {
        Self { buffered: Some(bytes), inner: None }
    }
}

impl<B: Body<Data = Bytes>> Body for RequestBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(bytes) = self.buffered.take().filter(|bytes| !bytes.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(bytes))));
        }
        match self.inner.as_mut() {
            Some(inner) => inner.as_mut().poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.buffered.as_ref().is_none_or(Bytes::is_empty)
            && self.inner.as_ref().is_none_or(|inner| inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.buffered, &self.inner) {
            (Some(bytes), None) => SizeHint::with_exact(bytes.len() as u64),
            (_, Some(inner)) => inner.size_hint(),
            (None, None) => SizeHint::with_exact(0),
        }
    }
}

/// The response body the caller gets: the inner service's own, a kept or
/// replayed body, or what the layer read of a body it could not keep followed
/// by the rest of it.
#[derive(Debug)]
pub struct ResponseBody<B> {
    read: Option<Bytes>,
    trailers: Option<HeaderMap>,
    error: Option<BoxError>,
    rest: Option<Pin<Box<B>>>,
}

impl<B> ResponseBody<B> {
    /// The inner service's body, untouched.
    pub(crate) fn passthrough(body: B) -> Self {
        Self { read: None, trailers: None, error: None, rest: Some(Box::pin(body)) }
    }

    /// A body of the layer's own (a replay, a problem).
    pub(crate) fn full(bytes: Bytes) -> Self {
        Self { read: Some(bytes), trailers: None, error: None, rest: None }
    }

    /// What was read of `rest` (all of it when `rest` is `None`), then
    /// `trailers` or `error`, then whatever `rest` still has.
    pub(crate) fn resumed(
        read: Bytes,
        trailers: Option<HeaderMap>,
        error: Option<BoxError>,
        rest: Option<Pin<Box<B>>>,
    ) -> Self {
        Self { read: Some(read), trailers, error, rest }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(bytes) = self.read.take().filter(|bytes| !bytes.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(bytes))));
        }
        if let Some(error) = self.error.take() {
            return Poll::Ready(Some(Err(error)));
        }
        if let Some(trailers) = self.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        match self.rest.as_mut() {
            Some(rest) => rest.as_mut().poll_frame(cx).map_err(Into::into),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.as_ref().is_none_or(Bytes::is_empty)
            && self.error.is_none()
            && self.trailers.is_none()
            && self.rest.as_ref().is_none_or(|rest| rest.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let read = self.read.as_ref().map_or(0, Bytes::len) as u64;
        match &self.rest {
            None => SizeHint::with_exact(read),
            Some(rest) => {
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower() + read);
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + read);
                }
                hint
            }
        }
    }
}
