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
use retryscope_http::__private::transport::{Failure, Refused, walk};
use std::time::SystemTime;

/// Which statuses a request follows: HTTP's (its [`Judge`] holds them) or
/// gRPC's codes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode {
    /// HTTP statuses, hints and idempotency.
    Http,
    /// gRPC statuses (A6).
    #[cfg(feature = "grpc")]
    Grpc { codes: crate::grpc::CodeSet },
}

impl Mode {
    /// Whether the request is a gRPC call.
    pub(crate) fn is_grpc(self) -> bool {
        !matches!(self, Mode::Http)
    }
}

/// Classifies every attempt of one request: its protocol's statuses, then
/// the integrations' one [`Judge`] (rules, safety, the one-layer rule).
pub(crate) struct AttemptClassifier {
    pub(crate) mode: Mode,
    pub(crate) judge: Judge,
}

impl AttemptClassifier {
    fn failure(&self, error: &BoxError) -> Verdict {
        #[cfg(feature = "grpc")]
        if let Mode::Grpc { codes } = self.mode
            && let Some(code) = crate::grpc::reset::code(error)
        {
            // An HTTP/2 reset stands for a gRPC status (gRPC's RST_STREAM
            // mapping), retried only as that status is: an INTERNAL_ERROR
            // reset is not an UNAVAILABLE. (REFUSED_STREAM got its
            // transparent retry already, in the attempt.)
            let error = ErrorType::Kind(crate::grpc::code::name(code));
            let verdict = if codes.contains_number(code) {
                Verdict::retryable(error)
            } else {
                Verdict::permanent(error)
            };
            return self.judge.failure(Failure::sent(verdict));
        }
        let failure = transport(error);
        #[cfg(feature = "grpc")]
        if let Mode::Grpc { codes } = self.mode {
            // gRPC reports a transport failure as UNAVAILABLE: retried when that
            // code is, or — a transparent retry — when nothing left the client.
            let unavailable = codes.contains(tonic::Code::Unavailable);
            if let Verdict::Retryable { error, .. } = failure.verdict
                && !unavailable
                && failure.stage == retryscope::classify::Stage::Sent
            {
                return Verdict::unrepeatable(error);
            }
        }
        self.judge.failure(failure)
    }
}

impl<B> Classify<Response<ResponseBody<B>>, BoxError> for AttemptClassifier
where
    B: Body + Send + 'static,
    B::Data: Send,
{
    fn classify(&mut self, result: &Result<Response<ResponseBody<B>>, BoxError>) -> Verdict {
        let response = match result {
            Ok(response) => response,
            Err(error) => return self.failure(error),
        };
        match self.mode {
            // The user's body rule (its verdict came with the body), then the
            // judge's rules and statuses.
            Mode::Http => {
                self.judge.response(response.body().judged(), response.status(), response.headers())
            }
            #[cfg(feature = "grpc")]
            Mode::Grpc { codes } => {
                let verdict = match crate::grpc::status::received(response) {
                    Some(status) => crate::grpc::status::verdict(status, codes),
                    // Committed at its headers, which carry no status (A6).
                    None => Verdict::Success,
                };
                self.judge.answered(verdict, response.headers())
            }
        }
    }

    fn timeout(&mut self) -> Verdict {
        // The request was on the wire when the engine gave up on it.
        self.judge.timeout()
    }

    fn pace(&mut self, result: &Result<Response<ResponseBody<B>>, BoxError>) -> Option<PaceSignal> {
        let response = result.as_ref().ok()?;
        Some(match self.mode {
            Mode::Http => {
                hints::pace_signal(response.status().as_u16(), response.headers(), SystemTime::now())
            }
            #[cfg(feature = "grpc")]
            Mode::Grpc { .. } => crate::grpc::headers::pace_signal(response.headers()),
        })
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
fn transport(error: &BoxError) -> Failure {
    walk(&**error, Refused::NotSent).unwrap_or(Failure::sent(Verdict::retryable(ErrorType::OTHER)))
}
