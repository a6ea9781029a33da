//! One logical request, from the caller's request to what the caller gets:
//! its plan, its attempts driven by the engine (retried, or hedged), and its
//! end — written once over its [`Protocol`]: what only HTTP or gRPC does is
//! theirs ([`crate::http_call`], and `grpc::call` with the `grpc` feature).

use crate::attempt::Attempts;
use crate::classify::AttemptClassifier;
use crate::error::BoxError;
use crate::inner::{AnswerBody, Inner};
use crate::protocol::{Answered, End, Inputs, Planned, Protocol};
use crate::replay::{ReplayBody, Source};
use crate::response::ResponseBody;
use crate::settings::Settings;
use crate::spans::AttemptSpan;
use http::request::Parts;
use http::{HeaderMap, Response};
use retryscope::observe::StopSlot;
use retryscope_http::__private::call::Ending;
use retryscope_http::{AttemptLimits, RetryOptions};
use std::future::Future;
use std::sync::Arc;

/// One logical request, from the caller's request to its response, planned
/// by its protocol `P` ([`RetryService`](crate::RetryService) chooses it).
///
/// Not an `async fn`: its future would keep its arguments beside the locals
/// made of them (some 600 bytes, copied with every move of the call's future).
pub(crate) fn run<P, S, B, ResB>(
    settings: Arc<Settings>,
    ready: S,
    (mut parts, body, options): (Parts, B, RetryOptions),
    planned: Planned<P>,
) -> impl Future<Output = Result<Response<ResponseBody<ResB>>, BoxError>>
where
    P: Protocol,
    S: Inner<B, ResB>,
    B: ReplayBody<Error: Into<BoxError>>,
    ResB: AnswerBody,
{
    let Planned { call, mut protocol, file } = planned;
    async move {
        let (configured, guards) = file.parts();
        // Borrowed by the engine's observer (this future outlives the engine's): no `Arc`.
        let stop = StopSlot::default();
        // Set in the block: the parts of the engine's future (made where awaited) keep no slot here.
        let (ending, kept, started, replayable, key);
        let outcome = {
            let source = Source::read(body, settings.replay_limit).await.map_err(Into::into)?;
            replayable = source.is_replayable();
            key = protocol.key(&settings, configured, &mut parts, replayable);
            let inputs = Inputs { configured, guards, parts: &parts, options: &options, replayable, key };
            let mut judge = protocol.judge(&settings, &inputs);
            let drive = protocol.drive(&call, inputs);
            ending = Ending::begin(settings.client.fallbacks.is_some(), drive.deadline());
            // Shared by the attempts and their spans from here on; kept for a fallback.
            let (parts, headers) = share_head(parts);
            kept = settings.client.fallbacks.as_ref().map(|_| Arc::clone(&parts));
            settings.client.at_one_layer(&mut judge, &ending);
            let classifier = AttemptClassifier { statuses: protocol.statuses(), judge };
            let (attempts, metrics) = protocol.start(&settings, &parts, &call, configured);
            let spans = AttemptSpan::new(&settings, &parts, P::GRPC, key.map(|key| key.generated()));
            let (telemetry, log) = settings.client.observers(spans, configured, &ending, &parts.headers);
            // Nested to the right: the engine's pairs then move the telemetry's operation once.
            let observer = (telemetry, (log, (&stop, (metrics, AttemptLimits))));
            let operation = protocol.operation(&options);
            let mut attempts = Attempts::new(ready, parts, headers, source, attempts);
            started = tokio::time::Instant::now();
            drive.run(guards, move || attempts.next(), classifier, observer, operation)
        }
        .await;
        let (stop, fallbacks) = (stop.stopped(), settings.client.fallbacks.as_deref());
        let headers = outcome.as_ref().ok().map(Response::headers);
        let chosen = ending.after(fallbacks, guards.name(), configured, stop, headers);
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
}

/// The request's head, shared (its headers a copy), and the request's own
/// headers, which the first attempt sends: they have room for the headers
/// an attempt adds, a copy has none (see `first_head` in `attempt.rs`).
#[inline]
fn share_head(mut parts: Parts) -> (Arc<Parts>, HeaderMap) {
    let copy = parts.headers.clone();
    let headers = std::mem::replace(&mut parts.headers, copy);
    (Arc::new(parts), headers)
}
