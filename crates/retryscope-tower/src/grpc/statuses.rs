//! What a gRPC attempt's result means (gRFC A6): its status against the
//! method's retryable codes, an HTTP/2 reset as the status it stands for, a
//! transport failure as `UNAVAILABLE`, and the pushback its headers carry.

use super::CodeSet;
use crate::classify::{Statuses, transport};
use crate::error::BoxError;
use crate::response::ResponseBody;
use http::Response;
use http_body::Body;
use retryscope::pace::PaceSignal;
use retryscope::{ErrorType, Verdict};
use retryscope_http::__private::Judge;
use retryscope_http::__private::Stage;

/// The statuses of a gRPC call whose method retries `codes`.
pub(crate) struct GrpcStatuses {
    pub(crate) codes: CodeSet,
}

impl Statuses for GrpcStatuses {
    fn answer<B: Body>(&self, judge: &Judge, response: &Response<ResponseBody<B>>) -> Verdict {
        let verdict = match super::status::received(response) {
            Some(status) => super::status::verdict(status, self.codes),
            // Committed at its headers, which carry no status (A6).
            None => Verdict::Success,
        };
        judge.answered(verdict, response.headers())
    }

    fn failure(&self, judge: &Judge, error: &BoxError) -> Verdict {
        if let Some(code) = super::reset::code(error) {
            // An HTTP/2 reset stands for a gRPC status (gRPC's RST_STREAM
            // mapping), retried only as that status is: an INTERNAL_ERROR
            // reset is not an UNAVAILABLE. (REFUSED_STREAM got its
            // transparent retry already, in the attempt.)
            let error = ErrorType::Kind(super::code::name(code));
            let verdict = if self.codes.contains_number(code) {
                Verdict::retryable(error)
            } else {
                Verdict::permanent(error)
            };
            return judge.failure(verdict, Stage::Sent);
        }
        let (verdict, stage) = transport(error);
        // gRPC reports a transport failure as UNAVAILABLE: retried when that
        // code is, or — a transparent retry — when nothing left the client.
        if let Verdict::Retryable { error, .. } = verdict
            && !self.codes.contains(tonic::Code::Unavailable)
            && stage == Stage::Sent
        {
            return Verdict::unrepeatable(error);
        }
        judge.failure(verdict, stage)
    }

    fn pace<B: Body>(&self, response: &Response<ResponseBody<B>>) -> PaceSignal {
        super::headers::pace_signal(response.headers())
    }
}
