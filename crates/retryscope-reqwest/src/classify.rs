//! What one attempt's result means for a reqwest request.

use crate::{read_ahead, release, transport};
use reqwest::{Request, Response};
use retryscope::ErrorType;
use retryscope::classify::{Classify, HttpClassifier, Stage};
use retryscope::pace::PaceSignal;
use retryscope::{Verdict, hints};
use retryscope_http::__private::idempotency::KeySource;
use retryscope_http::__private::rule::{self, SharedRule};
use retryscope_http::__private::safety::Safety;
use retryscope_http::RetryOptions;
use retryscope_otel::{EXHAUSTED_HEADER, Upstream};
use std::time::SystemTime;

/// Classifies each attempt of one request: statuses, transport failures, and
/// whether running the request again is safe.
pub(crate) struct RequestClassifier {
    http: HttpClassifier,
    /// The user's rule, asked before `http`.
    rule: Option<SharedRule>,
    pub(crate) safety: Safety,
    /// Retries at one layer: a response saying the layer below retried is not
    /// retried again.
    honour_exhausted: bool,
}

impl RequestClassifier {
    pub(crate) fn for_request(
        http: HttpClassifier,
        rule: Option<SharedRule>,
        request: &Request,
        options: &RetryOptions,
        key: Option<KeySource>,
    ) -> Self {
        let safety =
            Safety::of(request.method(), request.headers(), options, is_replayable(request)).with_key(key);
        Self { http, rule, safety, honour_exhausted: false }
    }

    /// Retries only where no other layer does, serving `upstream`.
    pub(crate) fn one_layer(&mut self, upstream: Option<&Upstream>) {
        self.honour_exhausted = true;
        self.safety.retried_upstream = upstream.is_some_and(|u| u.attempt().is_retry());
    }
}

impl Classify<Response, reqwest_middleware::Error> for &mut RequestClassifier {
    fn classify(&mut self, result: &Result<Response, reqwest_middleware::Error>) -> Verdict {
        let (verdict, stage) = match result {
            Ok(response) => {
                // The user's body rule (its verdict came with the response),
                // then the head rule, then the built-in statuses; the safety
                // guard below applies to any of them.
                let now = SystemTime::now();
                let verdict = rule::classify_response(
                    read_ahead::judged(response),
                    self.rule.as_ref(),
                    self.http,
                    response.status(),
                    response.headers(),
                    now,
                );
                let verdict = self.safety.key_in_flight(verdict, response.headers(), now);
                match verdict {
                    Verdict::Retryable { error, .. }
                        if self.honour_exhausted && response.headers().contains_key(EXHAUSTED_HEADER) =>
                    {
                        (Verdict::retried_elsewhere(error), Stage::Sent)
                    }
                    verdict => (verdict, Stage::Sent),
                }
            }
            Err(error) => {
                let failure = transport::classify(error);
                (failure.verdict, failure.stage)
            }
        };
        self.safety.guard(verdict, stage)
    }

    fn timeout(&mut self) -> Verdict {
        // The request was on the wire when the engine gave up on it.
        self.safety.guard(Verdict::retryable(ErrorType::TIMEOUT), Stage::Sent)
    }

    fn before_wait(
        &mut self,
        kept: Result<Response, reqwest_middleware::Error>,
    ) -> Result<Response, reqwest_middleware::Error> {
        // An unread body would pin its connection for the whole wait.
        kept.map(release::release_body)
    }

    fn pace(&mut self, result: &Result<Response, reqwest_middleware::Error>) -> Option<PaceSignal> {
        let response = result.as_ref().ok()?;
        Some(hints::pace_signal(response.status().as_u16(), response.headers(), SystemTime::now()))
    }
}

/// Whether the request can be sent again: no body, or a body held in memory
/// (a stream is consumed by sending it).
pub(crate) fn is_replayable(request: &Request) -> bool {
    request.body().is_none_or(|body| body.as_bytes().is_some())
}
