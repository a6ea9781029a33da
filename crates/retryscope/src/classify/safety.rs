//! Request safety: whether a failed request may run again without duplicating a side effect.

use http::{HeaderMap, Method};

/// The `Idempotency-Key` request header name (lowercase, as stored by
/// [`HeaderMap`]).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The longest idempotency key retryscope sends or accepts, in characters of
/// the key itself (before the header's quotes and escapes). The draft sets no
/// limit; servers do (Stripe's is 255): room for a UUID with a prefix, and a
/// small record per key in a store. One number, so that every key the client
/// side accepts is one the server side accepts.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// How far a failed request got before it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Nothing of the request can have reached the server (e.g. the connection
    /// was refused), so a retry cannot duplicate a side effect.
    NotSent,
    /// Some or all of the request may have reached the server (e.g. a reset or
    /// timeout after the connection was established, or any response).
    Sent,
}

/// Whether `method` is idempotent (RFC 9110 §9.2.2): `GET`, `HEAD`, `OPTIONS`,
/// `PUT`, `DELETE` or `TRACE`.
///
/// # Examples
///
/// ```
/// use http::Method;
/// use retryscope::classify::is_idempotent_method;
///
/// assert!(is_idempotent_method(&Method::PUT));
/// assert!(!is_idempotent_method(&Method::POST));
/// assert!(!is_idempotent_method(&Method::PATCH));
/// ```
pub fn is_idempotent_method(method: &Method) -> bool {
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
pub fn has_idempotency_key(headers: &HeaderMap) -> bool {
    headers
        .get_all(IDEMPOTENCY_KEY)
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
/// [`Verdict`](crate::Verdict)'s business.
///
/// # Examples
///
/// ```
/// use http::{HeaderMap, HeaderValue, Method};
/// use retryscope::classify::{may_retry, Stage, IDEMPOTENCY_KEY};
///
/// let none = HeaderMap::new();
/// // A POST whose connection was reset may have been processed: don't resend it...
/// assert!(!may_retry(&Method::POST, &none, false, Stage::Sent));
/// // ...unless it never left the client,
/// assert!(may_retry(&Method::POST, &none, false, Stage::NotSent));
/// // or carries an idempotency key,
/// let mut keyed = HeaderMap::new();
/// keyed.insert(IDEMPOTENCY_KEY, HeaderValue::from_static("8e03978e-40d5-43e8-bc93-6894a57f9324"));
/// assert!(may_retry(&Method::POST, &keyed, false, Stage::Sent));
/// // or the caller vouches for it.
/// assert!(may_retry(&Method::POST, &none, true, Stage::Sent));
/// // GET is idempotent.
/// assert!(may_retry(&Method::GET, &none, false, Stage::Sent));
/// ```
pub fn may_retry(method: &Method, headers: &HeaderMap, marked_safe: bool, stage: Stage) -> bool {
    stage == Stage::NotSent || marked_safe || is_idempotent_method(method) || has_idempotency_key(headers)
}
