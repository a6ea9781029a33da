//! The attempts of one request: each a copy of the caller's request, sent
//! down the rest of the middleware chain, with what an attempt adds (its
//! number, its span's context, the body rule's read-ahead). What its answer
//! teaches the dependency's pacer, the engine hands the pacer
//! (`RequestClassifier`'s `pace`).

use crate::read_ahead;
use crate::source::RequestSource;
use http::Extensions;
use reqwest::Response;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest_middleware::Next;
use retryscope_http::__private::NotReplayable;
use retryscope_http::__private::body_rule::SharedBodyRule;
use std::future::Future;

/// Hands out the attempts of one request.
pub(crate) struct Attempts<'a> {
    pub(crate) source: &'a RequestSource,
    pub(crate) next: Next<'a>,
    /// The caller's extensions as they were before the first attempt: each
    /// attempt gets its own copy.
    pub(crate) extensions: &'a Extensions,
    /// Tells the next hop which attempt a retry is; `None` sends nothing.
    pub(crate) attempt_header: Option<&'a HeaderName>,
    pub(crate) body_rule: Option<&'a SharedBodyRule>,
    pub(crate) replayable: bool,
    pub(crate) number: u32,
}

impl<'a> Attempts<'a> {
    /// The next attempt.
    pub(crate) fn next(
        &mut self,
    ) -> impl Future<Output = reqwest_middleware::Result<Response>> + Send + use<'a> {
        self.number += 1;
        let (source, number) = (self.source, self.number);
        let attempt_header = self.attempt_header.filter(|_| number > 1);
        let (next, mut extensions) = (self.next.clone(), self.extensions.clone());
        let (body_rule, replayable) = (self.body_rule, self.replayable);
        async move {
            let span = tracing::Span::current();
            // In a block of its own, on the attempt's first poll: the request
            // is made here and moved into the chain's future before the
            // await, so this future (built, then moved into the engine's)
            // keeps no slot for it (264 bytes) and the request is copied
            // into none.
            let sent = {
                let Some(mut request) = source.next() else {
                    return Err(reqwest_middleware::Error::middleware(NotReplayable));
                };
                if let Some(name) = attempt_header {
                    request.headers_mut().insert(name.clone(), HeaderValue::from(number));
                }
                if !replayable {
                    tracing::info!(parent: &span, "the request body is a stream: it is sent once and never retried");
                }
                // A span no subscriber took has no context to propagate.
                if !span.is_disabled() {
                    retryscope_otel::inject_span_context(&span, request.headers_mut());
                }
                next.run(request, &mut extensions)
            };
            let result = sent.await;
            if let Ok(response) = &result {
                span.record("http.response.status_code", i64::from(response.status().as_u16()));
            }
            // Inside the attempt: its timeout bounds the read. Boxed: the
            // read's state (632 bytes) would otherwise take room in every
            // attempt's future, moved with the whole call, for a rule few
            // responses meet (as tower's answer does). Chosen before the
            // await, which then holds neither the result nor the rule.
            let judged = match (body_rule, result) {
                (Some(rule), Ok(response)) => Box::pin(read_ahead::judge(rule, response)),
                (_, result) => return result,
            };
            judged.await.map_err(reqwest_middleware::Error::Reqwest)
        }
    }
}
