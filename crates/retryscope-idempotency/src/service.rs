//! The service the layer builds: per request, parse the key, fingerprint the
//! request, claim the key, and run, replay or refuse.

use std::error::Error;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::time::{Instant, timeout, timeout_at};
use tower_service::Service;

use crate::body::{BoxError, RequestBody, ResponseBody};
use crate::claim::ClaimGuard;
use crate::config::Settings;
use crate::response::{Problem, StoredResponse};
use crate::store::{Claim, Completion, EntryState, IdempotencyStore, Ticket};
use crate::telemetry::{Outcome, Telemetry};
use crate::{Fingerprint, IdempotencyKey, StoreError};

/// What every clone of one service shares.
#[derive(Debug)]
pub(crate) struct Shared<St> {
    pub(crate) store: Arc<St>,
    pub(crate) settings: Settings,
    pub(crate) telemetry: Telemetry,
    /// Completions the store failed to record, being tried again
    /// (`claim::MAX_LATE_COMPLETIONS` at most).
    pub(crate) late_completions: std::sync::atomic::AtomicUsize,
}

/// The service [`IdempotencyLayer`](crate::IdempotencyLayer) builds around `S`.
///
/// The inner service reads a [`RequestBody`] and the caller gets a
/// [`ResponseBody`]; both carry `Bytes` like axum's and hyper's bodies.
/// A claimed request runs in a tokio task of its own, so it finishes and its
/// response is kept even when the caller goes away (the lost response that a
/// retry then finds); it needs a tokio runtime.
#[derive(Debug)]
pub struct IdempotencyService<S, St> {
    inner: S,
    shared: Arc<Shared<St>>,
}

impl<S: Clone, St> Clone for IdempotencyService<S, St> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), shared: Arc::clone(&self.shared) }
    }
}

impl<S, St> IdempotencyService<S, St> {
    pub(crate) fn new(inner: S, shared: Arc<Shared<St>>) -> Self {
        Self { inner, shared }
    }
}

type Answer<ResBody, E> = Result<Response<ResponseBody<ResBody>>, E>;

impl<S, St, B, ResBody> Service<Request<B>> for IdempotencyService<S, St>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    St: IdempotencyStore,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Answer<ResBody, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The clone that was polled ready serves this request.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        if !shared.settings.methods.contains(request.method()) {
            return Box::pin(pass_through(ready, request));
        }
        Box::pin(keyed(ready, shared, request))
    }
}

async fn pass_through<S, B, ResBody>(mut inner: S, request: Request<B>) -> Answer<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
{
    let response = inner.call(request.map(RequestBody::streaming)).await?;
    Ok(response.map(ResponseBody::passthrough))
}

/// A request of a keyed method.
async fn keyed<S, St, B, ResBody>(
    inner: S,
    shared: Arc<Shared<St>>,
    request: Request<B>,
) -> Answer<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    St: IdempotencyStore,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let settings = &shared.settings;
    let (parts, body) = request.into_parts();
    let route = settings.route.as_ref().and_then(|route| route(&parts));
    let answer = |outcome: Outcome, response: Response<Bytes>| {
        shared.telemetry.record(outcome, route.as_deref());
        Ok(response.map(ResponseBody::full))
    };

    let key = match IdempotencyKey::from_headers(&parts.headers, &settings.header) {
        Ok(Some(key)) => key,
        Ok(None) if settings.require_key => {
            let detail = format!("this resource requires the {} header", settings.header);
            return answer(Outcome::MissingKey, Problem::MissingKey.response(Some(&detail)));
        }
        Ok(None) => {
            shared.telemetry.record(Outcome::Unkeyed, route.as_deref());
            return pass_through(inner, Request::from_parts(parts, body)).await;
        }
        Err(error) => return answer(Outcome::InvalidKey, Problem::InvalidKey.response(Some(&chain(&error)))),
    };

    let body = match read_request_body(body, settings).await {
        Ok(body) => body,
        Err(problem) => return answer(Outcome::BodyRefused, problem.response(None)),
    };
    let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    let fingerprint = Fingerprint::of(&parts.method, path, &body);

    // Claim and run in a task of their own: once the store has the claim,
    // the request runs to its end and its completion is recorded even if the
    // caller goes away meanwhile (the lost response a retry will ask for).
    let request = Request::from_parts(parts, RequestBody::buffered(body));
    let task = tokio::spawn(claim_and_run(inner, Arc::clone(&shared), key, fingerprint, request));
    match task.await {
        Ok((outcome, answer)) => {
            shared.telemetry.record(outcome, route.as_deref());
            answer
        }
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        // Only a runtime shutting down cancels the task; its guard released any claim.
        Err(_) => answer(Outcome::StoreError, Problem::StoreUnavailable.response(None)),
    }
}

/// Claims the key, then runs the request or answers from what the key holds.
async fn claim_and_run<S, St, B, ResBody>(
    inner: S,
    shared: Arc<Shared<St>>,
    key: IdempotencyKey,
    fingerprint: Fingerprint,
    request: Request<RequestBody<B>>,
) -> (Outcome, Answer<ResBody, S::Error>)
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    St: IdempotencyStore,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let settings = &shared.settings;
    let refuse =
        |outcome: Outcome, response: Response<Bytes>| (outcome, Ok(response.map(ResponseBody::full)));
    let claim =
        timeout(settings.store_timeout, shared.store.claim(&key, fingerprint, settings.lease())).await;
    let ticket = match claim.unwrap_or_else(|_| Err(StoreError::timeout("claim"))) {
        Ok(Claim::Claimed(ticket)) => ticket,
        Ok(Claim::Held(entry)) if entry.fingerprint != fingerprint => {
            return refuse(Outcome::Mismatch, Problem::Mismatch.response(None));
        }
        Ok(Claim::Held(entry)) => {
            return match entry.state {
                EntryState::Completed(stored) => refuse(Outcome::Replayed, stored.replay()),
                EntryState::InFlight => {
                    let retry_after = settings.in_flight_retry_after;
                    refuse(Outcome::Conflict, Problem::Conflict { retry_after }.response(None))
                }
                EntryState::NotReplayable => {
                    refuse(Outcome::NotReplayable, Problem::NotReplayable.response(None))
                }
            };
        }
        Ok(Claim::Full { retry_after }) => {
            return refuse(Outcome::StoreFull, Problem::StoreFull { retry_after }.response(None));
        }
        Err(error) => {
            tracing::warn!(error = %chain(&error), "idempotency store unavailable: the request is not run");
            return refuse(Outcome::StoreError, Problem::StoreUnavailable.response(None));
        }
    };
    (Outcome::Executed, run_claimed(inner, Arc::clone(&shared), ticket, request).await)
}

/// Reads a keyed request's body, bounded in size and time.
async fn read_request_body<B>(body: B, settings: &Settings) -> Result<Bytes, Problem>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if body.size_hint().lower() > settings.max_body as u64 {
        return Err(Problem::BodyTooLarge);
    }
    let limited = http_body_util::Limited::new(body, settings.max_body);
    match timeout(settings.body_timeout, limited.collect()).await {
        Err(_) => Err(Problem::BodyTimeout),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => Err(Problem::BodyTooLarge),
        Ok(Err(_)) => Err(Problem::BodyUnreadable),
    }
}

/// Runs a claimed request and records how it ended.
async fn run_claimed<S, St, B, ResBody>(
    mut inner: S,
    shared: Arc<Shared<St>>,
    ticket: Ticket,
    request: Request<RequestBody<B>>,
) -> Answer<ResBody, S::Error>
where
    S: Service<Request<RequestBody<B>>, Response = Response<ResBody>>,
    St: IdempotencyStore,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    let mut claim = ClaimGuard::new(Arc::clone(&shared), ticket);
    // Its claim is renewed while it runs and its response is read: however
    // long that takes, no retry runs it beside this run.
    let response = match claim.renewing(inner.call(request)).await {
        Ok(response) => response,
        Err(error) => {
            claim.release().await;
            return Err(error);
        }
    };
    if response.status().is_server_error() && !shared.settings.keep_server_errors {
        // The operation says it failed: a retry runs it again.
        claim.release().await;
        return Ok(response.map(ResponseBody::passthrough));
    }
    let settings = &shared.settings;
    let (parts, body) = response.into_parts();
    let read = claim.renewing(read_response_body(body, settings)).await;
    let completion = match &read {
        Read::Whole { bytes, trailers: None } => Completion::Response(StoredResponse {
            status: parts.status,
            headers: kept_headers(&parts.headers, settings),
            body: bytes.clone(),
        }),
        Read::Whole { trailers: Some(_), .. } | Read::Partial { .. } => Completion::NotReplayable,
        Read::Failed { .. } => {
            claim.release().await;
            let Read::Failed { bytes, error } = read else { unreachable!("matched above") };
            return Ok(Response::from_parts(parts, ResponseBody::resumed(bytes, None, Some(error), None)));
        }
    };
    claim.complete(completion).await;
    let body = match read {
        Read::Whole { bytes, trailers } => ResponseBody::resumed(bytes, trailers, None, None),
        Read::Partial { bytes, rest } => ResponseBody::resumed(bytes, None, None, Some(rest)),
        Read::Failed { .. } => unreachable!("returned above"),
    };
    Ok(Response::from_parts(parts, body))
}

/// What reading a response body up to the bound gave.
enum Read<B> {
    /// All of it.
    Whole { bytes: Bytes, trailers: Option<HeaderMap> },
    /// Its start, when the body is over the bound or slower than the body timeout.
    Partial { bytes: Bytes, rest: Pin<Box<B>> },
    /// Its start and the error that ended it.
    Failed { bytes: Bytes, error: BoxError },
}

async fn read_response_body<B>(body: B, settings: &Settings) -> Read<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut body = Box::pin(body);
    let mut bytes = BytesMut::new();
    if body.size_hint().lower() > settings.max_body as u64 {
        return Read::Partial { bytes: bytes.freeze(), rest: body };
    }
    let deadline = Instant::now() + settings.body_timeout;
    loop {
        let frame = match timeout_at(deadline, body.frame()).await {
            Err(_) => return Read::Partial { bytes: bytes.freeze(), rest: body },
            Ok(None) => return Read::Whole { bytes: bytes.freeze(), trailers: None },
            Ok(Some(Err(error))) => return Read::Failed { bytes: bytes.freeze(), error: error.into() },
            Ok(Some(Ok(frame))) => frame,
        };
        match frame.into_data() {
            Ok(data) => {
                bytes.extend_from_slice(&data);
                if bytes.len() > settings.max_body {
                    return Read::Partial { bytes: bytes.freeze(), rest: body };
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    return Read::Whole { bytes: bytes.freeze(), trailers: Some(trailers) };
                }
            }
        }
    }
}

/// The response headers kept with its body: the layer's `store_headers`, and
/// `content-encoding` always, since the body is kept as it was sent.
fn kept_headers(headers: &HeaderMap, settings: &Settings) -> Vec<(http::HeaderName, http::HeaderValue)> {
    let mut kept = Vec::new();
    let encoding = &http::header::CONTENT_ENCODING;
    let extra = (!settings.store_headers.contains(encoding)).then_some(encoding);
    for name in settings.store_headers.iter().chain(extra) {
        kept.extend(headers.get_all(name).iter().map(|value| (name.clone(), value.clone())));
    }
    kept
}

/// An error and its sources, for a log line or a problem's detail.
pub(crate) fn chain(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
