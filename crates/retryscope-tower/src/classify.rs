//! What one attempt's result means: statuses, transport failures, and whether
//! running the request again is safe and possible.

use crate::error::BoxError;
use crate::response::ResponseBody;
use http::Response;
use http_body::Body;
use retryscope::ErrorType;
use retryscope::classify::Classify;
use retryscope::pace::PaceSignal;
use retryscope::{Verdict, hints};
use retryscope_http::__private::Judge;
use retryscope_http::__private::Stage;
use std::time::SystemTime;

/// What only a call's protocol knows of an attempt's result: how it reads
/// an answer and a transport failure, and what an answer says about pace.
/// HTTP's ([`HttpStatuses`]) or gRPC's (`grpc::statuses::GrpcStatuses`), fixed by
/// the call's type ([`Protocol::statuses`](crate::protocol::Protocol::statuses)):
/// nothing here branches on which protocol a call speaks.
pub(crate) trait Statuses: Send + 'static {
    /// The verdict on an answer, `judge` applying the rules every protocol
    /// shares.
    fn answer<B: Body>(&self, judge: &Judge, response: &Response<ResponseBody<B>>) -> Verdict;

    /// The verdict on a transport failure.
    fn failure(&self, judge: &Judge, error: &BoxError) -> Verdict {
        let (verdict, stage) = transport(error);
        judge.failure(verdict, stage)
    }

    /// What an answer says about the dependency's pace.
    fn pace<B: Body>(&self, response: &Response<ResponseBody<B>>) -> PaceSignal;
}

/// HTTP's statuses, hints and idempotency: the [`Judge`] holds them.
pub(crate) struct HttpStatuses;

impl Statuses for HttpStatuses {
    /// The user's body rule (its verdict came with the body), then the
    /// judge's rules and statuses.
    fn answer<B: Body>(&self, judge: &Judge, response: &Response<ResponseBody<B>>) -> Verdict {
        judge.response(response.body().judged(), response.status(), response.headers())
    }

    fn pace<B: Body>(&self, response: &Response<ResponseBody<B>>) -> PaceSignal {
        hints::pace_signal(response.status().as_u16(), response.headers(), SystemTime::now())
    }
}

/// Classifies every attempt of one request: its protocol's statuses `S`,
/// then the integrations' one [`Judge`] (rules, safety, the one-layer rule).
pub(crate) struct AttemptClassifier<S> {
    pub(crate) statuses: S,
    pub(crate) judge: Judge,
}

impl<B, S: Statuses> Classify<Response<ResponseBody<B>>, BoxError> for AttemptClassifier<S>
where
    B: Body + Send + 'static,
    B::Data: Send,
{
    fn classify(&mut self, result: &Result<Response<ResponseBody<B>>, BoxError>) -> Verdict {
        match result {
            Ok(response) => self.statuses.answer(&self.judge, response),
            Err(error) => self.statuses.failure(&self.judge, error),
        }
    }

    fn timeout(&mut self) -> Verdict {
        // The request was on the wire when the engine gave up on it.
        self.judge.timeout()
    }

    fn pace(&mut self, result: &Result<Response<ResponseBody<B>>, BoxError>) -> Option<PaceSignal> {
        Some(self.statuses.pace(result.as_ref().ok()?))
    }

    fn before_wait(
        &mut self,
        kept: Result<Response<ResponseBody<B>>, BoxError>,
    ) -> Result<Response<ResponseBody<B>>, BoxError> {
        // An unread body would pin its connection (an HTTP/2 stream, for
        // gRPC) for the whole wait: the integrations' one rule drains it in the
        // background, or drops it. A Trailers-Only gRPC answer has no body to
        // lose: its status is in the headers, which stay.
        kept.map(|mut response| {
            if let Some(body) = response.body_mut().release() {
                retryscope_http::__private::release::drain_in_background(body);
            }
            response
        })
    }
}

/// A transport failure's verdict and how far the request got: the shared walk
/// ([`walk`]), where a refused connection proves nothing was sent, and
/// anything it does not name is `_OTHER`, retryable, maybe sent.
pub(crate) fn transport(error: &BoxError) -> (Verdict, Stage) {
    Judge::connector_cause(&**error, Verdict::retryable(ErrorType::OTHER))
}
