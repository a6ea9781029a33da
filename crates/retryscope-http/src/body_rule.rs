//! Your own retry rule that reads the body: opt-in, for the responses it
//! selects by their head, and bounded.

use bytes::Buf;
use http::{HeaderMap, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use retryscope::Verdict;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::error::Error as StdError;
use std::fmt;
use std::io::IoSlice;
use std::sync::Arc;

/// A user's retry rule that reads the body of the responses it selects.
///
/// Both methods are called on the task that made the request: keep them
/// quick and free of I/O. The verdict means what a
/// [`ResponseRule`](crate::ResponseRule)'s does, and its `error.type`
/// must likewise be a fixed name (`ErrorType::Kind("try_again")`), never a
/// value taken from the body.
///
/// A [`BodyRule`] is for the server that answers `200 {"status":"try again"}`
/// and cannot be changed to say so in its head. It is asked in two steps:
///
/// 1. [`wants_body`](BodyRule::wants_body) sees the status and headers. Only a
///    response it selects is read ahead; any other one — a download, a stream
///    of server-sent events — goes to the caller untouched, as without a rule.
/// 2. The selected body is read up to the [`BodyLimit`] (at most
///    [`BodyLimit::MAX`], 1 MiB), and, if it ended within the limit,
///    [`verdict`](BodyRule::verdict) judges it. A longer body is not judged
///    (there is no `truncated` call: a rule that decides on half a JSON
///    document decides on a guess), and the other rules decide.
///
/// # Nothing is lost
///
/// When the response goes to the caller — the rule said success or permanent,
/// gave no verdict, or the body was over the limit — it keeps its status,
/// headers and URL, and its body is what was read ahead followed by the rest
/// of the stream, byte for byte. Only a response the rule retries is dropped,
/// with what was read of it.
///
/// # What it costs
///
/// - **Memory**: up to the limit per selected response in flight (the bytes
///   as they came; a body in several chunks is copied once more into one
///   buffer for the rule).
/// - **Latency**: a selected response reaches the caller only once its body
///   ended or passed the limit — the caller can no longer start on the first
///   bytes early. Select narrowly: `status == 200` and a JSON content type,
///   not every response.
/// - **Time**: the read is part of the attempt, so the policy's attempt
///   timeout (and its deadline) bound it: a server that sends its head and
///   then stalls the body fails the attempt as a timeout, retried as any
///   timeout is. A read error is a transport failure of the attempt
///   (`incomplete`, as the built-in transport rules say). The presets set
///   both; a policy with neither (`no_deadline` and no `attempt_timeout`)
///   leaves a stalled body to hold the call, as it would hold your own read.
///
/// # Order of the rules
///
/// The body rule first (it knows the most), then the head
/// [`ResponseRule`](crate::ResponseRule), then the built-in status
/// rules: the first that gives a verdict decides. The request-safety guard
/// then applies to whatever was decided, as for every rule: a POST without an
/// `Idempotency-Key` is not run twice because its body said "try again".
///
/// # Example
///
/// ```
/// use http::{HeaderMap, StatusCode};
/// use retryscope::{ErrorType, Verdict};
/// use retryscope_http::{BodyLimit, BodyRule, body_rule_fn};
///
/// // Read only 200s that say they are JSON; retry those that ask for it.
/// let rule = body_rule_fn(
///     |status, headers| {
///         let json = headers.get(http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
///         status == StatusCode::OK && json
///     },
///     |_status, _headers, body| {
///         let asked = body.windows(9).any(|w| w == b"try again");
///         asked.then_some(Verdict::retryable(ErrorType::Kind("try_again")))
///     },
/// );
/// let limit = BodyLimit::new(4 * 1024)?;
///
/// let mut headers = HeaderMap::new();
/// assert!(!rule.wants_body(StatusCode::OK, &headers), "not JSON: never read");
/// headers.insert(http::header::CONTENT_TYPE, "application/json".parse()?);
/// assert!(rule.wants_body(StatusCode::OK, &headers));
/// let verdict = rule.verdict(StatusCode::OK, &headers, br#"{"status":"try again"}"#);
/// assert_eq!(verdict, Some(Verdict::retryable(ErrorType::Kind("try_again"))));
///
/// assert!(BodyLimit::new(0).is_err() && BodyLimit::new(BodyLimit::MAX + 1).is_err());
/// # let _ = limit;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Then `RetryMiddleware::builder(policy).retry_on_body(limit, rule)`
/// (reqwest) or `RetryLayer::builder(policy).retry_on_body(limit, rule)`
/// (tower, HTTP mode).
pub trait BodyRule: Send + Sync + 'static {
    /// Whether the body of a response with this head is read and judged.
    /// Select narrowly: every selected response is held back until its body
    /// ended or passed the limit.
    fn wants_body(&self, status: StatusCode, headers: &HeaderMap) -> bool;

    /// The verdict on a selected response whose whole body is `body`, or
    /// `None` to let the head rule and the built-in rules decide.
    fn verdict(&self, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Option<Verdict>;
}

/// Two closures as a [`BodyRule`]: `wants` selects by the head, `verdict`
/// judges the body. Passing them through here lets the compiler infer their
/// argument types.
pub fn body_rule_fn<W, V>(wants: W, verdict: V) -> impl BodyRule
where
    W: Fn(StatusCode, &HeaderMap) -> bool + Send + Sync + 'static,
    V: Fn(StatusCode, &HeaderMap, &[u8]) -> Option<Verdict> + Send + Sync + 'static,
{
    Closures { wants, verdict }
}

struct Closures<W, V> {
    wants: W,
    verdict: V,
}

impl<W, V> BodyRule for Closures<W, V>
where
    W: Fn(StatusCode, &HeaderMap) -> bool + Send + Sync + 'static,
    V: Fn(StatusCode, &HeaderMap, &[u8]) -> Option<Verdict> + Send + Sync + 'static,
{
    fn wants_body(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        (self.wants)(status, headers)
    }

    fn verdict(&self, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Option<Verdict> {
        (self.verdict)(status, headers, body)
    }
}

/// How much of a selected body is read for a [`BodyRule`]: between 1 byte and
/// [`BodyLimit::MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimit(usize);

impl BodyLimit {
    /// The largest limit: 1 MiB. A rule judges an error document, not a
    /// payload; holding more per response in flight is a memory problem
    /// waiting for load.
    pub const MAX: usize = 1024 * 1024;

    /// A limit of `bytes`, refused when 0 (no body could be judged) or above
    /// [`MAX`](Self::MAX).
    pub const fn new(bytes: usize) -> Result<Self, BodyLimitError> {
        if bytes == 0 || bytes > Self::MAX {
            return Err(BodyLimitError::OutOfRange { value: bytes, limit: Self::MAX });
        }
        Ok(Self(bytes))
    }

    /// The limit in bytes.
    pub const fn bytes(self) -> usize {
        self.0
    }
}

/// Why [`BodyLimit::new`] refused a limit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BodyLimitError {
    /// The limit was 0 or above `limit` ([`BodyLimit::MAX`]).
    OutOfRange {
        /// The limit given, in bytes.
        value: usize,
        /// The largest limit accepted, in bytes.
        limit: usize,
    },
}

impl fmt::Display for BodyLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyLimitError::OutOfRange { value, limit } => write!(
                f,
                "the body limit of a body rule must be above zero and at most {limit} bytes, got {value}"
            ),
        }
    }
}

impl StdError for BodyLimitError {}

/// A body rule and its limit, as the builders keep them: shared by every
/// request of a client.
#[derive(Clone)]
pub struct SharedBodyRule {
    rule: Arc<dyn BodyRule>,
    limit: BodyLimit,
}

impl fmt::Debug for SharedBodyRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBodyRule").field("limit", &self.limit.0).finish_non_exhaustive()
    }
}

/// What reading ahead for a body rule gave: its verdict, if it gave one, and
/// the frames read, which go back in front of the rest of the body.
pub struct Judged<D> {
    /// The rule's verdict; `None` when it gave none or was not asked (the body
    /// passed the limit).
    pub verdict: Option<Verdict>,
    /// The frames read, in order: the caller must get them before the rest.
    pub read: VecDeque<Frame<D>>,
}

impl SharedBodyRule {
    /// Shares `rule`, reading at most `limit` of a selected body.
    pub fn new(limit: BodyLimit, rule: impl BodyRule) -> Self {
        Self { rule: Arc::new(rule), limit }
    }

    /// Whether the rule selects a response with this head.
    pub fn wants_body(&self, status: StatusCode, headers: &HeaderMap) -> bool {
        self.rule.wants_body(status, headers)
    }

    /// Reads `body` ahead, up to the limit, and asks the rule about it if it
    /// ended within the limit. A body whose declared length is over the limit
    /// is not read at all. An error while reading is returned as it came: the
    /// attempt failed.
    pub async fn judge<B>(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        body: &mut B,
    ) -> Result<Judged<B::Data>, B::Error>
    where
        B: Body + Unpin,
    {
        let limit = self.limit.0 as u64;
        let mut read = VecDeque::new();
        if body.size_hint().lower() > limit {
            return Ok(Judged { verdict: None, read });
        }
        let mut bytes = 0_u64;
        // The end is either seen (`None`) or announced (`is_end_stream`), so a
        // body whose length is known is judged without waiting for one more poll.
        let mut ended = body.is_end_stream();
        while !ended && bytes <= limit {
            match body.frame().await {
                None => ended = true,
                Some(frame) => {
                    let frame = frame?;
                    if let Some(data) = frame.data_ref() {
                        bytes += data.remaining() as u64;
                    }
                    read.push_back(frame);
                    ended = body.is_end_stream();
                }
            }
        }
        let verdict = if bytes > limit {
            tracing::debug!(limit, "the body passed the body rule's limit: not judged");
            None
        } else {
            contiguous(&read).and_then(|body| self.rule.verdict(status, headers, &body))
        };
        Ok(Judged { verdict, read })
    }
}

impl SharedBodyRule {
    /// [`judge`](Self::judge) on a body the caller gets whole again: the
    /// rule's verdict, and `body` as a [`ReadAhead`] that yields the frames
    /// read before the rest. What an integration whose client hands out
    /// bodies by value (reqwest) does with a selected response.
    pub async fn read_ahead<B>(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        mut body: B,
    ) -> Result<(Option<Verdict>, ReadAhead<B>), B::Error>
    where
        B: Body + Unpin,
    {
        let judged = self.judge(status, headers, &mut body).await?;
        Ok((judged.verdict, ReadAhead::new(judged.read, body)))
    }
}

/// The data of `frames` as one slice: borrowed when it is one chunk already.
/// `None` when a chunk cannot be seen whole without consuming it (a `Buf` in
/// more pieces than `chunks_vectored` shows; never the case for `Bytes`).
fn contiguous<D: Buf>(frames: &VecDeque<Frame<D>>) -> Option<Cow<'_, [u8]>> {
    let mut data = frames.iter().filter_map(Frame::data_ref).filter(|d| d.has_remaining());
    match (data.next(), data.next()) {
        (None, _) => return Some(Cow::Borrowed(&[])),
        (Some(one), None) if one.chunk().len() == one.remaining() => return Some(Cow::Borrowed(one.chunk())),
        _ => {}
    }
    let total = frames.iter().filter_map(Frame::data_ref).map(Buf::remaining).sum();
    let mut all = Vec::with_capacity(total);
    for data in frames.iter().filter_map(Frame::data_ref) {
        let mut slices = [IoSlice::new(&[]); 16];
        let count = data.chunks_vectored(&mut slices);
        let before = all.len();
        slices[..count].iter().for_each(|slice| all.extend_from_slice(slice));
        if all.len() - before != data.remaining() {
            return None;
        }
    }
    Some(Cow::Owned(all))
}

/// A body that gives back what was read ahead for a rule, then the rest of
/// the body it came from: what the caller receives, whole.
pub struct ReadAhead<B: Body> {
    read: VecDeque<Frame<B::Data>>,
    rest: B,
}

impl<B: Body> ReadAhead<B> {
    /// `read`, then what is left of `rest`.
    pub fn new(read: VecDeque<Frame<B::Data>>, rest: B) -> Self {
        Self { read, rest }
    }
}

// The frames read are never pinned; `rest` is pinned only when it must be.
impl<B: Body + Unpin> Unpin for ReadAhead<B> {}

impl<B: Body + Unpin> Body for ReadAhead<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        match self.read.pop_front() {
            Some(frame) => std::task::Poll::Ready(Some(Ok(frame))),
            None => std::pin::Pin::new(&mut self.rest).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let read: u64 = self.read.iter().filter_map(Frame::data_ref).map(|d| d.remaining() as u64).sum();
        let rest = self.rest.size_hint();
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(rest.lower().saturating_add(read));
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(read));
        }
        hint
    }
}

impl<B: Body> fmt::Debug for ReadAhead<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadAhead").field("frames_left", &self.read.len()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use retryscope::ErrorType;
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    const SAID: ErrorType = ErrorType::Kind("said");

    /// Selects everything; retries a body that is exactly `expected`.
    fn exactly(expected: &'static [u8]) -> SharedBodyRule {
        let limit = BodyLimit::new(8).unwrap_or_else(|e| panic!("{e}"));
        SharedBodyRule::new(
            limit,
            body_rule_fn(
                |_, _| true,
                move |_, _, body| (body == expected).then_some(Verdict::retryable(SAID)),
            ),
        )
    }

    /// A body of these chunks, with no length announced.
    struct Chunks(VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
        }
    }

    fn chunks(parts: &[&'static [u8]]) -> Chunks {
        Chunks(parts.iter().map(|p| Bytes::from_static(p)).collect())
    }

    fn run<T>(future: impl std::future::Future<Output = T>) -> T {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap_or_else(|e| panic!("{e}"));
        runtime.block_on(future)
    }

    /// Judges `body` with `rule`, then reads what the caller would get.
    fn judge_and_read(rule: &SharedBodyRule, mut body: Chunks) -> (Option<Verdict>, Vec<u8>) {
        run(async {
            let judged =
                rule.judge(StatusCode::OK, &HeaderMap::new(), &mut body).await.unwrap_or_else(|e| match e {});
            let all = ReadAhead::new(judged.read, body).collect().await.unwrap_or_else(|e| match e {});
            (judged.verdict, all.to_bytes().to_vec())
        })
    }

    #[test]
    fn a_body_in_several_chunks_within_the_limit_is_judged_whole_and_given_back() {
        let (verdict, body) = judge_and_read(&exactly(b"tryagain"), chunks(&[b"try", b"again"]));
        assert_eq!(verdict, Some(Verdict::retryable(SAID)));
        assert_eq!(body, b"tryagain");
    }

    #[test]
    fn a_body_over_the_limit_is_not_judged_and_the_caller_gets_every_byte() {
        let rule = SharedBodyRule::new(
            BodyLimit::new(8).unwrap_or_else(|e| panic!("{e}")),
            body_rule_fn(|_, _| true, |_, _, _| panic!("a body over the limit is never judged")),
        );
        let (verdict, body) = judge_and_read(&rule, chunks(&[b"0123", b"4567", b"8", b"9abc"]));
        assert_eq!(verdict, None);
        assert_eq!(body, b"0123456789abc");
    }

    #[test]
    fn an_empty_body_is_judged_as_empty() {
        let (verdict, body) = judge_and_read(&exactly(b""), chunks(&[]));
        assert_eq!(verdict, Some(Verdict::retryable(SAID)));
        assert!(body.is_empty());
    }

    #[test]
    fn a_declared_length_over_the_limit_is_not_read_at_all() {
        let rule = exactly(b"");
        let mut body = http_body_util::Full::new(Bytes::from_static(b"0123456789"));
        let judged =
            run(rule.judge(StatusCode::OK, &HeaderMap::new(), &mut body)).unwrap_or_else(|e| match e {});
        assert!(judged.read.is_empty() && judged.verdict.is_none());
        assert_eq!(body.size_hint().exact(), Some(10), "untouched");
    }

    #[test]
    fn limits_of_zero_or_above_the_maximum_are_refused() {
        assert_eq!(BodyLimit::new(0), Err(BodyLimitError::OutOfRange { value: 0, limit: BodyLimit::MAX }));
        assert!(BodyLimit::new(BodyLimit::MAX + 1).is_err());
        assert_eq!(BodyLimit::new(1).map(BodyLimit::bytes), Ok(1));
    }
}
