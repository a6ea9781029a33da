//! What one attempt's result means: statuses, transport failures, and whether
//! running the request again is safe and possible.

use crate::error::BoxError;
use crate::response::ResponseBody;
use http::Response;
use http_body::Body;
use retryscope::ErrorType;
use retryscope::classify::{Classify, HttpClassifier, Stage};
use retryscope::pace::PaceSignal;
use retryscope::{Verdict, hints};
use retryscope_http::__private::rule::{self, SharedRule};
use retryscope_http::__private::safety::Safety;
use retryscope_http::__private::transport::{Refused, walk};
use retryscope_otel::EXHAUSTED_HEADER;
use std::time::SystemTime;

/// Which semantics a request follows.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode {
    /// HTTP statuses, hints and idempotency.
    Http {
        classifier: HttpClassifier,
        /// Whether the request may run again after it reached the server.
        safe_after_sent: bool,
        /// Whether it carries an idempotency key (see [`Safety::keyed`]).
        keyed: bool,
    },
    /// gRPC statuses (A6).
    #[cfg(feature = "grpc")]
    Grpc { codes: crate::grpc::CodeSet },
}

impl Mode {
    /// Whether the request is a gRPC call.
    pub(crate) fn is_grpc(self) -> bool {
        !matches!(self, Mode::Http { .. })
    }
}

/// Classifies every attempt of one request.
pub(crate) struct AttemptClassifier {
    pub(crate) mode: Mode,
    /// The user's rule for HTTP responses, asked before the built-in statuses
    /// (HTTP mode only).
    pub(crate) rule: Option<SharedRule>,
    /// Whether the body can be sent again at all.
    pub(crate) replayable: bool,
    /// Where this request's retries happen.
    pub(crate) layers: Layers,
}

/// Retrying at one layer of a call chain.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Layers {
    /// The request being served is itself a retry: transient failures are
    /// retried by the caller above.
    pub(crate) retried_upstream: bool,
    /// A failure the layer below already retried is not retried again.
    pub(crate) honour_exhausted: bool,
}

impl AttemptClassifier {
    /// Turns a retryable verdict into an unrepeatable one when retrying could run
    /// the request twice, or could not resend it. The failure still counts
    /// against the dependency's breaker and budget.
    fn guard(&self, verdict: Verdict, stage: Stage) -> Verdict {
        self.safety().guard(verdict, stage)
    }

    fn safety(&self) -> Safety {
        let (safe_after_sent, keyed) = match self.mode {
            Mode::Http { safe_after_sent, keyed, .. } => (safe_after_sent, keyed),
            // A6: the service config's author opted the method in.
            #[cfg(feature = "grpc")]
            Mode::Grpc { .. } => (true, false),
        };
        Safety {
            safe_after_sent,
            keyed,
            replayable: self.replayable,
            retried_upstream: self.layers.retried_upstream,
        }
    }

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
            return self.guard(verdict, Stage::Sent);
        }
        let (verdict, stage) = transport(error);
        #[cfg(feature = "grpc")]
        if let Mode::Grpc { codes } = self.mode {
            // gRPC reports a transport failure as UNAVAILABLE: retried when that
            // code is, or — a transparent retry — when nothing left the client.
            let unavailable = codes.contains(tonic::Code::Unavailable);
            if let Verdict::Retryable { error, .. } = verdict
                && !unavailable
                && stage == Stage::Sent
            {
                return Verdict::unrepeatable(error);
            }
        }
        self.guard(verdict, stage)
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
        let verdict = match self.mode {
            // The user's body rule (its verdict came with the body), then the
            // head rule, then the built-in statuses; the safety guard below
            // applies to any of them.
            Mode::Http { classifier, .. } => {
                let now = SystemTime::now();
                let verdict = rule::classify_response(
                    response.body().judged(),
                    self.rule.as_ref(),
                    classifier,
                    response.status(),
                    response.headers(),
                    now,
                );
                self.safety().key_in_flight(verdict, response.headers(), now)
            }
            #[cfg(feature = "grpc")]
            Mode::Grpc { codes } => match crate::grpc::status::received(response) {
                Some(status) => crate::grpc::status::verdict(status, codes),
                // Committed at its headers, which carry no status (A6).
                None => Verdict::Success,
            },
        };
        let verdict = match verdict {
            Verdict::Retryable { error, .. }
                if self.layers.honour_exhausted && response.headers().contains_key(EXHAUSTED_HEADER) =>
            {
                Verdict::retried_elsewhere(error)
            }
            verdict => verdict,
        };
        self.guard(verdict, Stage::Sent)
    }

    fn timeout(&mut self) -> Verdict {
        // The request was on the wire when the engine gave up on it.
        self.guard(Verdict::retryable(ErrorType::TIMEOUT), Stage::Sent)
    }

    fn pace(&mut self, result: &Result<Response<ResponseBody<B>>, BoxError>) -> Option<PaceSignal> {
        let response = result.as_ref().ok()?;
        Some(match self.mode {
            Mode::Http { .. } => {
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
pub(crate) fn transport(error: &BoxError) -> (Verdict, Stage) {
    match walk(&**error, Refused::NotSent) {
        Some(failure) => (failure.verdict, failure.stage),
        None => (Verdict::retryable(ErrorType::OTHER), Stage::Sent),
    }
}
