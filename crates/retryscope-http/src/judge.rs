//! What one attempt's answer means, judged the same way by every HTTP
//! integration: the body rule's verdict, the user's head rule, the built-in
//! statuses, a keyed request's `409` while its key is in flight, the
//! one-layer rule, and the request-safety guard last, so that no rule can make
//! an unsafe request run twice.

use crate::RetryOptions;
use crate::idempotency::KeySource;
use crate::rule::{self, SharedRule};
use crate::safety::Safety;
use crate::transport::{Refused, Stage, walk};
use http::{HeaderMap, Method, StatusCode};
use retryscope::classify::HttpClassifier;
use retryscope::{ErrorType, Verdict};
use retryscope_otel::EXHAUSTED_HEADER;
use std::error::Error as StdError;
use std::time::SystemTime;

/// Judges every attempt of one request (see the module's documentation).
#[derive(Debug, Clone)]
pub struct Judge {
    classifier: HttpClassifier,
    /// The user's rule, asked before `classifier`.
    rule: Option<SharedRule>,
    safety: Safety,
    /// Retries at one layer: an answer saying the layer below retried is not
    /// retried again.
    honour_exhausted: bool,
}

impl Judge {
    /// Judges an HTTP request: its statuses by `classifier` after the user's
    /// `rule`; whether it may run again once sent by its method, its
    /// idempotency key (its own header, or `key`, the one the client gave
    /// it) and `options`; whether it can be sent again at all by
    /// `replayable`.
    pub fn for_request(
        classifier: HttpClassifier,
        rule: Option<SharedRule>,
        (method, headers): (&Method, &HeaderMap),
        options: &RetryOptions,
        replayable: bool,
        key: Option<KeySource>,
    ) -> Self {
        let safety = Safety::of(method, headers, options, replayable).with_key(key);
        Self { classifier, rule, safety, honour_exhausted: false }
    }

    /// Judges a gRPC call, whose statuses its protocol judges
    /// ([`answered`](Self::answered)): gRFC A6 lets it run again once sent
    /// (the service config's author opted the method in) if it can be sent
    /// again at all (`replayable`).
    pub fn grpc(replayable: bool) -> Self {
        let safety = Safety { safe_after_sent: true, keyed: false, replayable, retried_upstream: false };
        Self { classifier: HttpClassifier::new(), rule: None, safety, honour_exhausted: false }
    }

    /// Retries only where no other layer does: an answer carrying the
    /// exhausted header is not retried again, nor a request that is itself a
    /// retry of the caller above (`retried_upstream`).
    pub fn one_layer(&mut self, retried_upstream: bool) {
        self.honour_exhausted = true;
        self.safety.retried_upstream = retried_upstream;
    }

    /// An HTTP response: the body rule's verdict `judged` when it gave one,
    /// then the head rule, then the statuses; a keyed request's `409` with a
    /// `Retry-After` waits for its key; then [`answered`](Self::answered).
    pub fn response(&self, judged: Option<Verdict>, status: StatusCode, headers: &HeaderMap) -> Verdict {
        let now = SystemTime::now();
        let verdict =
            rule::classify_response(judged, self.rule.as_ref(), self.classifier, status, headers, now);
        self.answered(self.safety.key_in_flight(verdict, headers, now), headers)
    }

    /// An answer judged `verdict` by its protocol (an HTTP response's
    /// statuses, a gRPC status): the one-layer rule and the safety guard.
    pub fn answered(&self, verdict: Verdict, headers: &HeaderMap) -> Verdict {
        let verdict = match verdict {
            Verdict::Retryable { error, .. }
                if self.honour_exhausted && headers.contains_key(EXHAUSTED_HEADER) =>
            {
                Verdict::retried_elsewhere(error)
            }
            verdict => verdict,
        };
        self.safety.guard(verdict, Stage::Sent)
    }

    /// A transport failure judged `verdict`, after which the request got as
    /// far as `stage`: the safety guard, knowing how far it got.
    pub fn failure(&self, verdict: Verdict, stage: Stage) -> Verdict {
        self.safety.guard(verdict, stage)
    }

    /// What `error`'s source chain says of a failed attempt, for a library
    /// with its own "connect" flag (reqwest): its verdict and how far the
    /// request got; `otherwise`, as sent, when nothing in the chain names the
    /// cause. A refused connection in the chain proves nothing here: the
    /// I/O error may come from a pooled connection after the body. Why here:
    /// which causes the chain may hold (an injected fault, a connect cut at
    /// its share, the integrations' own errors) is this crate's to know, so
    /// an integration judges only what its own library's errors say.
    /// The causes, in [`Judge::connector_cause`]'s table.
    pub fn cause(error: &(dyn StdError + 'static), otherwise: Verdict) -> (Verdict, Stage) {
        Self::walked(walk(error, Refused::MaybeSent), otherwise)
    }

    /// What `error`'s source chain says of a failed attempt, for a library
    /// whose connectors report a refused connection only as an I/O error
    /// (tower's): as [`Judge::cause`], but a refused connection proves that
    /// nothing was sent.
    ///
    /// | in the chain | `error.type` | verdict | reached the server? |
    /// |---|---|---|---|
    /// | the integrations' "cannot be sent again" | `_OTHER` | permanent | — |
    /// | an injected refusal ([`InjectedFault`](crate::fault::InjectedFault)) | `connect` | retryable | no |
    /// | a connect cut at its share of the attempt ([`ConnectTimedOut`](crate::ConnectTimedOut)) | `connect` | retryable | no |
    /// | connection refused (here; not with [`Judge::cause`]) | `connect` | retryable | no |
    /// | other I/O errors (even "unreachable" on an open connection) | per [`io_error`](retryscope::classify::io_error) | per [`io_error`](retryscope::classify::io_error) | maybe |
    /// | connection closed mid-response (hyper) | `incomplete` | retryable | maybe |
    /// | nothing of the above | `otherwise` | `otherwise` | maybe |
    pub fn connector_cause(error: &(dyn StdError + 'static), otherwise: Verdict) -> (Verdict, Stage) {
        Self::walked(walk(error, Refused::NotSent), otherwise)
    }

    fn walked(failure: Option<crate::transport::Failure>, otherwise: Verdict) -> (Verdict, Stage) {
        failure.map_or((otherwise, Stage::Sent), |failure| (failure.verdict, failure.stage))
    }

    /// An attempt the engine cut at its time limit: the request was on the
    /// wire.
    pub fn timeout(&self) -> Verdict {
        self.safety.guard(Verdict::retryable(ErrorType::TIMEOUT), Stage::Sent)
    }
}
