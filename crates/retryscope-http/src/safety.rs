//! Whether one request may run again: the [`may_retry`] rule, plus
//! whether its body can be sent again at all.

use crate::RetryOptions;
use crate::idempotency::DEFAULT_HEADER;
use crate::idempotency::KeySource;
use crate::transport::Stage;
use http::header::RETRY_AFTER;
use http::{HeaderMap, Method};
use retryscope::{ErrorType, Verdict};
use std::time::SystemTime;

/// What decides whether one request may be retried, computed once per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Safety {
    /// Whether the request may run again after it reached the server: an
    /// idempotent method, an idempotency key (the caller's or one
    /// generated), or the caller's
    /// [`idempotent`](RetryOptions::idempotent).
    pub safe_after_sent: bool,
    /// Whether the request carries an idempotency key (its own or a
    /// generated one): a server that honours keys may answer a repeat that
    /// arrives while the first runs with 409 and a `Retry-After`.
    pub keyed: bool,
    /// Whether the body can be sent again at all.
    pub replayable: bool,
    /// The request being served is itself a retry (retrying at one layer):
    /// transient failures are retried by the caller above.
    pub retried_upstream: bool,
}

impl Safety {
    /// The safety of a request with `method` and `headers`, whose body is
    /// `replayable` or not.
    pub fn of(method: &Method, headers: &HeaderMap, options: &RetryOptions, replayable: bool) -> Self {
        Self {
            safe_after_sent: safe_after_sent(method, headers, options),
            keyed: has_idempotency_key(headers),
            replayable,
            retried_upstream: false,
        }
    }

    /// Marks the request safe to run again when it carries an idempotency key
    /// under the integration's configured header (see
    /// [`IdempotencyKeys::apply`](crate::idempotency::IdempotencyKeys::apply)):
    /// the draft's `Idempotency-Key` counts already, a renamed header only so.
    pub fn with_key(mut self, key: Option<KeySource>) -> Self {
        self.safe_after_sent |= key.is_some();
        self.keyed |= key.is_some();
        self
    }

    /// A key in flight is not a failure: on a keyed request, a 409 that
    /// carries a `Retry-After` is the idempotency-key layer's answer to a
    /// repeat that arrived while the first request with the key still runs
    /// (an attempt that timed out, say). Retried after the server's wait, the
    /// request gets the first one's response replayed, so the verdict becomes
    /// retryable with that hint (within the deadline, charged to the budget;
    /// a breaker hears nothing: a 409 is a healthy server answering). Any
    /// other 409 — without `Retry-After`, or on a request without a key —
    /// keeps the verdict it had (final by default).
    pub fn key_in_flight(&self, verdict: Verdict, headers: &HeaderMap, now: SystemTime) -> Verdict {
        const CONFLICT: ErrorType = ErrorType::Status(409);
        match verdict {
            Verdict::Permanent { error: CONFLICT } if self.keyed && headers.contains_key(RETRY_AFTER) => {
                match retryscope::hints::from_headers(headers, now) {
                    Some(hint) => Verdict::Retryable { error: CONFLICT, hint: Some(hint) },
                    // A `Retry-After` that cannot be read says no wait: final as before.
                    None => verdict,
                }
            }
            verdict => verdict,
        }
    }

    /// Turns a retryable verdict into an unrepeatable one when retrying could
    /// run the request twice, or could not resend it; into "retried elsewhere"
    /// when a layer above retries. The failure still counts against the
    /// dependency's breaker and budget.
    pub fn guard(&self, verdict: Verdict, stage: Stage) -> Verdict {
        match verdict {
            Verdict::Retryable { error, .. }
                if !self.replayable || (stage == Stage::Sent && !self.safe_after_sent) =>
            {
                Verdict::unrepeatable(error)
            }
            Verdict::Retryable { error, .. } if self.retried_upstream => Verdict::retried_elsewhere(error),
            verdict => verdict,
        }
    }
}

/// Whether a request with `method` and `headers` may run again after it
/// reached the server: an idempotent method, an `Idempotency-Key`, or the
/// caller's [`idempotent`](RetryOptions::idempotent).
///
/// `idempotent` vouches that a duplicate is harmless: it retries with no
/// key at all. With the integration's `.idempotency_keys()` on, such a
/// request gets a key too, so that a server that honours keys runs it once.
pub fn safe_after_sent(method: &Method, headers: &HeaderMap, options: &RetryOptions) -> bool {
    // `Stage::Sent`: the question is whether it may run again once the server
    // may have seen it; before that, any request may.
    may_retry(method, headers, options.is_idempotent(), Stage::Sent)
}

/// Whether a request may be hedged, that is run twice *at once*: only an
/// idempotent method (RFC 9110 §9.2.2: GET, HEAD, OPTIONS, TRACE, PUT,
/// DELETE). An idempotency key or `idempotent` makes a request safe to run
/// again after an attempt failed, not concurrently with it: a server that
/// follows the idempotency-key draft answers a copy that arrives while the
/// first still runs with 409 Conflict, which would end the call. Such a
/// request is retried instead.
pub fn may_hedge(method: &Method) -> bool {
    method.is_idempotent()
}

/// Whether `method` is idempotent (RFC 9110 §9.2.2): `GET`, `HEAD`, `OPTIONS`,
/// `PUT`, `DELETE` or `TRACE`.
pub(crate) fn is_idempotent_method(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

/// Whether `headers` carry a non-empty `Idempotency-Key`.
///
/// Any field line whose value is not empty after trimming spaces and tabs
/// counts; the value's syntax (an SF String in the draft, often a bare UUID in
/// practice) is not checked.
pub(crate) fn has_idempotency_key(headers: &HeaderMap) -> bool {
    // The name as a constant: a `&str` name is parsed at every lookup
    // (~190 instructions of a whole call, by callgrind).
    headers
        .get_all(DEFAULT_HEADER)
        .iter()
        .any(|value| value.as_bytes().iter().any(|b| !matches!(b, b' ' | b'\t')))
}

/// Whether a failed request may be sent again without risking a duplicated side
/// effect.
///
/// True if any of these holds:
///
/// - `stage` is [`Stage::NotSent`]: nothing reached the server (any method);
/// - the method is idempotent ([`is_idempotent_method`]);
/// - the request carries a non-empty `Idempotency-Key` ([`has_idempotency_key`]);
/// - the caller marked the request safe (`marked_safe`).
///
/// This only answers "is it safe?"; whether the failure is worth retrying is the
/// [`Verdict`]'s business.
pub(crate) fn may_retry(method: &Method, headers: &HeaderMap, marked_safe: bool, stage: Stage) -> bool {
    stage == Stage::NotSent || marked_safe || is_idempotent_method(method) || has_idempotency_key(headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use retryscope::ErrorType;

    #[test]
    fn a_post_without_a_key_is_not_retried_once_sent_but_is_before() {
        let safety = Safety::of(&Method::POST, &HeaderMap::new(), &RetryOptions::new(), true);
        let retryable = Verdict::retryable(ErrorType::CONNECT);
        assert_eq!(safety.guard(retryable, Stage::Sent), Verdict::unrepeatable(ErrorType::CONNECT));
        assert_eq!(safety.guard(retryable, Stage::NotSent), retryable);
    }

    #[test]
    fn a_post_with_a_key_under_a_renamed_header_may_run_again() {
        let safety = Safety::of(&Method::POST, &HeaderMap::new(), &RetryOptions::new(), true)
            .with_key(Some(KeySource::Generated));
        let retryable = Verdict::retryable(ErrorType::CONNECT);
        assert_eq!(safety.guard(retryable, Stage::Sent), retryable);
    }

    #[test]
    fn a_keyed_requests_409_with_retry_after_is_retried_after_it_and_no_other_409_is() {
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let conflict = Verdict::permanent(ErrorType::Status(409));
        let mut in_flight = HeaderMap::new();
        in_flight.insert(RETRY_AFTER, http::HeaderValue::from_static("2"));
        let mut keyed = HeaderMap::new();
        keyed.insert(retryscope::classify::IDEMPOTENCY_KEY, http::HeaderValue::from_static("\"order-1\""));
        let safety = Safety::of(&Method::POST, &keyed, &RetryOptions::new(), true);
        match safety.key_in_flight(conflict, &in_flight, now) {
            Verdict::Retryable { error: ErrorType::Status(409), hint: Some(hint) } => {
                assert_eq!(hint.delay, std::time::Duration::from_secs(2));
            }
            other => panic!("retryable after the hint, got {other:?}"),
        }
        // A generated key counts the same.
        let generated = Safety::of(&Method::POST, &HeaderMap::new(), &RetryOptions::new(), true)
            .with_key(Some(KeySource::Generated));
        assert!(matches!(generated.key_in_flight(conflict, &in_flight, now), Verdict::Retryable { .. }));
        // No Retry-After (a `#not-replayable` key, an application's conflict): final.
        assert_eq!(safety.key_in_flight(conflict, &HeaderMap::new(), now), conflict);
        // No key: a 409 is the application's, final.
        let unkeyed = Safety::of(&Method::POST, &HeaderMap::new(), &RetryOptions::new(), true);
        assert_eq!(unkeyed.key_in_flight(conflict, &in_flight, now), conflict);
        // Other verdicts pass through.
        let unavailable = Verdict::retryable(ErrorType::Status(503));
        assert_eq!(safety.key_in_flight(unavailable, &in_flight, now), unavailable);
    }

    #[test]
    fn only_idempotent_methods_are_hedged_a_key_makes_a_post_retryable_not_hedgeable() {
        for method in [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE, Method::PUT, Method::DELETE]
        {
            assert!(may_hedge(&method), "{method}");
        }
        for method in [Method::POST, Method::PATCH, Method::CONNECT] {
            assert!(!may_hedge(&method), "{method}");
        }
    }

    #[test]
    fn a_body_that_cannot_be_sent_again_is_never_retried() {
        let safety = Safety::of(&Method::GET, &HeaderMap::new(), &RetryOptions::new(), false);
        let retryable = Verdict::retryable(ErrorType::CONNECT);
        assert_eq!(safety.guard(retryable, Stage::NotSent), Verdict::unrepeatable(ErrorType::CONNECT));
    }

    #[test]
    fn idempotent_methods() {
        for m in [Method::GET, Method::HEAD, Method::OPTIONS, Method::PUT, Method::DELETE, Method::TRACE] {
            assert!(is_idempotent_method(&m), "{m}");
        }
        for m in [Method::POST, Method::PATCH, Method::CONNECT] {
            assert!(!is_idempotent_method(&m), "{m}");
        }
        // What `is_idempotent_method`'s doc example showed.
        assert!(is_idempotent_method(&Method::PUT));
        assert!(!is_idempotent_method(&Method::POST));
        assert!(!is_idempotent_method(&Method::PATCH));
        let custom = Method::from_bytes(b"PURGE").unwrap();
        assert!(!is_idempotent_method(&custom));
    }

    fn key(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(DEFAULT_HEADER, http::HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn retry_safety() {
        let none = HeaderMap::new();
        let keyed = key(&["\"abc\""]);
        assert!(!may_retry(&Method::POST, &none, false, Stage::Sent));
        assert!(may_retry(&Method::POST, &keyed, false, Stage::Sent));
        assert!(may_retry(&Method::POST, &none, false, Stage::NotSent));
        assert!(may_retry(&Method::GET, &none, false, Stage::Sent));
        assert!(may_retry(&Method::GET, &none, false, Stage::NotSent));
        assert!(may_retry(&Method::POST, &none, true, Stage::Sent));
        assert!(may_retry(&Method::PATCH, &none, true, Stage::Sent));
        assert!(!may_retry(&Method::PATCH, &none, false, Stage::Sent));

        // Empty or blank keys do not count.
        assert!(!may_retry(&Method::POST, &key(&[""]), false, Stage::Sent));
        assert!(!may_retry(&Method::POST, &key(&["  \t"]), false, Stage::Sent));
        // Any non-empty line counts.
        assert!(may_retry(&Method::POST, &key(&["", "k1"]), false, Stage::Sent));
        // A bare UUID counts too (`may_retry`'s doc example).
        assert!(may_retry(
            &Method::POST,
            &key(&["8e03978e-40d5-43e8-bc93-6894a57f9324"]),
            false,
            Stage::Sent
        ));
        // The header name is case-insensitive.
        let mut h = HeaderMap::new();
        h.insert("Idempotency-Key", http::HeaderValue::from_static("k"));
        assert!(has_idempotency_key(&h));
    }
}
