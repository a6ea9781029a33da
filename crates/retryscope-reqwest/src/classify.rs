//! What one attempt's result means for a reqwest request.

use crate::{read_ahead, release, transport};
use reqwest::{Request, Response};
use retryscope::classify::Classify;
use retryscope::pace::PaceSignal;
use retryscope::{Verdict, hints};
use retryscope_http::__private::Judge;
use std::time::SystemTime;

/// Classifies each attempt of one request: statuses, transport failures, and
/// whether running the request again is safe (the integrations' one
/// [`Judge`]), and what each response says about pace.
pub(crate) struct RequestClassifier {
    /// The call's judge (`Client::judge`), at one layer if the client says so.
    pub(crate) judge: Judge,
}

impl Classify<Response, reqwest_middleware::Error> for &mut RequestClassifier {
    fn classify(&mut self, result: &Result<Response, reqwest_middleware::Error>) -> Verdict {
        match result {
            // The user's body rule (its verdict came with the response).
            Ok(response) => {
                self.judge.response(read_ahead::judged(response), response.status(), response.headers())
            }
            Err(error) => {
                let (verdict, stage) = transport::classify(error);
                self.judge.failure(verdict, stage)
            }
        }
    }

    fn timeout(&mut self) -> Verdict {
        self.judge.timeout()
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
