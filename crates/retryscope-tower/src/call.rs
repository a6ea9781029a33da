//! One logical request, from the caller's request to what the caller gets:
//! its plan, its attempts driven by the engine (retried, or hedged), and its
//! end — written once over its [`Protocol`]: what only HTTP or gRPC does is
//! theirs ([`crate::http_call`], and `grpc::call` with the `grpc` feature).

use crate::attempt::Attempts;
use crate::classify::AttemptClassifier;
use crate::error::BoxError;
use crate::protocol::{Answered, End, Inputs, Planned, Protocol};
use crate::replay::{ReplayBody, Source};
use crate::response::ResponseBody;
use crate::settings::Settings;
use crate::spans::AttemptSpan;
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use retryscope::observe::StopSlot;
use retryscope_http::__private::call::Ending;
use retryscope_http::{AttemptLimits, RetryOptions};
use std::sync::Arc;
use tower_service::Service;

/// One logical request, from the caller's request to its response, planned
/// by its protocol `P` ([`RetryService`](crate::RetryService) chooses it).
pub(crate) async fn run<P, S, B, ResB>(
    settings: Arc<Settings>,
    ready: S,
    (mut parts, body, options): (Parts, B, RetryOptions),
    planned: Planned<P>,
) -> Result<Response<ResponseBody<ResB>>, BoxError>
where
    P: Protocol,
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: ReplayBody,
    B::Error: Into<BoxError>,
    ResB: Body + Send + 'static,
    ResB::Data: Send + From<bytes::Bytes>,
    ResB::Error: Into<BoxError>,
{
    let Planned { call, mut protocol, file } = planned;
    let (configured, guards) = file.parts();
    let source = Source::read(body, settings.replay_limit).await.map_err(Into::into)?;
    let replayable = source.is_replayable();
    let key = protocol.key(&settings, configured, &mut parts, replayable);
    let inputs = Inputs { configured, guards, parts: &parts, options: &options, replayable, key };
    let mut judge = protocol.judge(&settings, &inputs);
    let drive = protocol.drive(&call, inputs);
    let ending = Ending::begin(settings.client.fallbacks.is_some(), drive.deadline());
    // Shared by the attempts and their spans from here on; kept for a fallback.
    let parts = Arc::new(parts);
    let kept = settings.client.fallbacks.as_ref().map(|_| Arc::clone(&parts));
    settings.client.at_one_layer(&mut judge, &ending);
    let classifier = AttemptClassifier { statuses: protocol.statuses(), judge };
    let stop = Arc::new(StopSlot::default());
    let (attempts, metrics) = protocol.start(&settings, &parts, &call, configured);
    let (origin, request_id_header) = (settings.origin.clone(), settings.client.request_id_header.clone());
    let (request, grpc) = (Arc::clone(&parts), P::GRPC);
    let key_generated = key.map(|key| key.generated());
    let spans = AttemptSpan { request, origin, grpc, key_generated, request_id_header };
    let observers = settings.client.observers(spans, configured, &ending, &parts.headers);
    let observer = (((observers, Arc::clone(&stop)), metrics), AttemptLimits);
    let operation = protocol.operation(&options);
    let mut attempts = Attempts::new(ready, parts, source, attempts);
    let started = tokio::time::Instant::now();
    let outcome = drive.run(guards, move || attempts.next(), classifier, observer, operation).await;
    let stop = stop.stopped();
    let headers = outcome.as_ref().ok().map(Response::headers);
    let chosen = ending.after(settings.client.fallbacks.as_deref(), guards.name(), configured, stop, headers);
    let end = End { call: &call, replayable, started, guards, key };
    // Taken out before the await, which then holds the box alone.
    let later = match protocol.answer(end, &settings, chosen, kept, outcome, stop) {
        Answered::Now((answer, served)) => {
            ending.settle(served);
            return answer;
        }
        Answered::Later(later) => later,
    };
    let (answer, served) = later.await;
    ending.settle(served);
    answer
}
