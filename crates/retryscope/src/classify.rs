//! Deciding what an attempt's result means.
//!
//! A [`Classify`] implementation turns each attempt's result into a
//! [`Verdict`]. The retry builder offers three without writing a type:
//! every error retryable (the default), [`when`](crate::Retry::when) with a
//! predicate on the error, and [`classify`](crate::Retry::classify) with a
//! function of the whole result. The helpers below classify HTTP statuses and
//! I/O errors and decide whether a request may safely run again.
//!
//! # HTTP statuses
//!
//! [`status`] (and [`HttpClassifier::DEFAULT`]) map a response status to a
//! [`Verdict`]:
//!
//! | Status | Verdict | `error.type` |
//! |---|---|---|
//! | 1xx, 2xx, 3xx | `Success` (a redirect is a success for the retry engine) | — |
//! | 408, 429, 500, 502, 503, 504 | `Retryable` | the code, e.g. `503` |
//! | any other 4xx / 5xx (incl. 409) | `Permanent` | the code |
//! | 600–999 (non-standard) | `Permanent` | the code |
//!
//! An [`HttpClassifier`] changes the retryable set (409 via
//! [`HttpClassifier::retry_conflict`], any code via
//! [`HttpClassifier::retry_status`] / [`HttpClassifier::never_retry_status`]) and
//! can attach server hints ([`crate::hints`]) to retryable responses.
//!
//! # I/O errors
//!
//! [`io_error`] maps a [`std::io::ErrorKind`] to a verdict with a bounded,
//! lowercase snake_case `error.type`:
//!
//! | `ErrorKind` | Verdict | `error.type` |
//! |---|---|---|
//! | `ConnectionRefused`, `NotConnected`, `AddrNotAvailable`, `HostUnreachable`, `NetworkUnreachable`, `NetworkDown` | `Retryable` | `connect` |
//! | `ConnectionReset`, `ConnectionAborted`, `BrokenPipe` | `Retryable` | `reset` |
//! | `TimedOut` | `Retryable` | `timeout` |
//! | `UnexpectedEof` | `Retryable` | `incomplete` |
//! | `Interrupted`, `WouldBlock` | `Retryable` | `io` |
//! | `InvalidInput` | `Permanent` | `invalid_input` |
//! | `InvalidData` | `Permanent` | `invalid_data` |
//! | `PermissionDenied` | `Permanent` | `permission_denied` |
//! | `NotFound` | `Permanent` | `not_found` |
//! | `Unsupported` | `Permanent` | `unsupported` |
//! | anything else | `Permanent` | `_OTHER` ([`ErrorType::OTHER`]) |
//!
//! # Idempotency
//!
//! A failed request may be retried only if doing so cannot duplicate a side
//! effect: see [`may_retry`].

use std::io::ErrorKind;
#[cfg(feature = "http")]
use std::time::SystemTime;

#[cfg(feature = "http")]
use http::{HeaderMap, Method, StatusCode};

#[cfg(feature = "http")]
use crate::hints;
use crate::outcome::{ErrorType, Verdict};

/// Turns an attempt's result into a [`Verdict`].
pub trait Classify<T, E> {
    /// Judges one attempt's result.
    fn classify(&mut self, result: &Result<T, E>) -> Verdict;

    /// Judges an attempt that the policy's per-attempt timeout cut short. The
    /// default retries it; override it for operations that must not run twice
    /// when a first try may have reached the server.
    fn timeout(&mut self) -> Verdict {
        Verdict::retryable(ErrorType::TIMEOUT)
    }

    /// Prepares a failed attempt's result to be kept through the backoff wait
    /// that follows it.
    ///
    /// The engine keeps the result so that it can hand it back if no further
    /// attempt is made (the breaker opened, the deadline passed). Whatever it
    /// holds stays held for the whole wait, which a server's `Retry-After` can
    /// make long: release here what the caller will not need, such as the
    /// unread body of an HTTP response, which pins a pooled connection. The
    /// default keeps everything.
    ///
    /// ```
    /// use retryscope::classify::Classify;
    /// use retryscope::outcome::{ErrorType, Verdict};
    ///
    /// /// A response: a status and a body that holds a connection.
    /// struct Reply { status: u16, body: Option<Vec<u8>> }
    ///
    /// struct Statuses;
    ///
    /// impl Classify<Reply, std::io::Error> for Statuses {
    ///     fn classify(&mut self, result: &Result<Reply, std::io::Error>) -> Verdict {
    ///         match result {
    ///             Ok(reply) if reply.status == 503 => Verdict::retryable(ErrorType::Status(503)),
    ///             Ok(_) => Verdict::Success,
    ///             Err(_) => Verdict::retryable(ErrorType::OTHER),
    ///         }
    ///     }
    ///
    ///     fn before_wait(&mut self, kept: Result<Reply, std::io::Error>) -> Result<Reply, std::io::Error> {
    ///         // Keep the status, let the body (and its connection) go.
    ///         kept.map(|reply| Reply { body: None, ..reply })
    ///     }
    /// }
    /// # let kept = Statuses.before_wait(Ok(Reply { status: 503, body: Some(vec![0; 512]) }));
    /// # assert!(kept.is_ok_and(|r| r.status == 503 && r.body.is_none()));
    /// ```
    fn before_wait(&mut self, kept: Result<T, E>) -> Result<T, E> {
        kept
    }
}

/// Every `Ok` is a success, every `Err` retryable: what
/// [`Retry::retry_any_error`](crate::Retry::retry_any_error) selects.
#[derive(Debug, Clone, Copy, Default)]
pub struct AnyError;

impl<T, E> Classify<T, E> for AnyError {
    fn classify(&mut self, result: &Result<T, E>) -> Verdict {
        match result {
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::retryable(ErrorType::OTHER),
        }
    }
}

/// Retries the errors a predicate accepts; the others are permanent.
#[derive(Debug, Clone, Copy)]
pub struct When<P>(pub(crate) P);

impl<T, E, P: FnMut(&E) -> bool> Classify<T, E> for When<P> {
    fn classify(&mut self, result: &Result<T, E>) -> Verdict {
        match result {
            Ok(_) => Verdict::Success,
            Err(e) if (self.0)(e) => Verdict::retryable(ErrorType::OTHER),
            Err(_) => Verdict::permanent(ErrorType::OTHER),
        }
    }
}

/// Classifies with a function of the whole result.
#[derive(Debug, Clone, Copy)]
pub struct ClassifyFn<F>(pub(crate) F);

impl<T, E, F: FnMut(&Result<T, E>) -> Verdict> Classify<T, E> for ClassifyFn<F> {
    fn classify(&mut self, result: &Result<T, E>) -> Verdict {
        (self.0)(result)
    }
}

/// The lowest status code the classifier's bitset covers.
#[cfg(feature = "http")]
const MIN_CODE: u16 = 100;
/// The highest status code the classifier's bitset covers.
#[cfg(feature = "http")]
const MAX_CODE: u16 = 599;

/// Classifies an HTTP status with the default rules (see the [module
/// docs](self)): 1xx–3xx succeed; 408, 429, 500, 502, 503 and 504 are retryable;
/// every other status (409 included) is permanent.
///
/// Retryable verdicts carry no hint; use
/// [`HttpClassifier::classify_response`] to attach `Retry-After` / `RateLimit`.
///
/// # Examples
///
/// ```
/// use http::StatusCode;
/// use retryscope::classify::status;
/// use retryscope::outcome::{ErrorType, Verdict};
///
/// assert_eq!(status(StatusCode::OK), Verdict::Success);
/// assert_eq!(status(StatusCode::FOUND), Verdict::Success);
/// assert_eq!(
///     status(StatusCode::SERVICE_UNAVAILABLE),
///     Verdict::retryable(ErrorType::Status(503))
/// );
/// assert_eq!(status(StatusCode::NOT_FOUND), Verdict::permanent(ErrorType::Status(404)));
/// assert_eq!(status(StatusCode::CONFLICT), Verdict::permanent(ErrorType::Status(409)));
/// ```
#[cfg(feature = "http")]
pub fn status(status: StatusCode) -> Verdict {
    HttpClassifier::DEFAULT.classify_status(status)
}

/// A configurable HTTP status classifier.
///
/// It holds the set of retryable statuses as a fixed 512-bit set over
/// `100..=599`, so it is `Copy`, allocation-free, and can be built in a `const`.
/// A status in the set is `Retryable`; any other status is `Success` below 400
/// and `Permanent` from 400 on. Statuses outside `100..=599` are never in the set
/// (they are `Permanent`), and the builder methods ignore them.
///
/// # Examples
///
/// ```
/// use http::StatusCode;
/// use retryscope::classify::HttpClassifier;
/// use retryscope::outcome::{ErrorType, Verdict};
///
/// const CLASSIFIER: HttpClassifier = HttpClassifier::new()
///     .retry_conflict(true)      // 409: retry an optimistic-locking conflict
///     .retry_status(599)         // a proxy's custom "network timeout"
///     .never_retry_status(500);  // this backend's 500s are deterministic
///
/// assert_eq!(
///     CLASSIFIER.classify_status(StatusCode::CONFLICT),
///     Verdict::retryable(ErrorType::Status(409))
/// );
/// assert_eq!(
///     CLASSIFIER.classify_status(StatusCode::INTERNAL_SERVER_ERROR),
///     Verdict::permanent(ErrorType::Status(500))
/// );
/// assert!(CLASSIFIER.retries(599));
/// ```
#[cfg(feature = "http")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HttpClassifier {
    /// Bit `code - 100` is set when `code` is retryable.
    retryable: [u64; 8],
}

#[cfg(feature = "http")]
impl HttpClassifier {
    /// The default rules: retry 408, 429, 500, 502, 503 and 504.
    pub const DEFAULT: HttpClassifier = HttpClassifier { retryable: [0; 8] }
        .retry_status(408)
        .retry_status(429)
        .retry_status(500)
        .retry_status(502)
        .retry_status(503)
        .retry_status(504);

    /// A classifier with the default rules ([`HttpClassifier::DEFAULT`]).
    pub const fn new() -> Self {
        Self::DEFAULT
    }

    /// Whether to retry `409 Conflict` (default: no).
    pub const fn retry_conflict(self, retry: bool) -> Self {
        if retry { self.retry_status(409) } else { self.never_retry_status(409) }
    }

    /// Makes `code` retryable. Ignored outside `100..=599`.
    ///
    /// Marking a 1xx–3xx code retryable is allowed (e.g. to poll while a server
    /// answers `202 Accepted`).
    pub const fn retry_status(mut self, code: u16) -> Self {
        if let Some((word, bit)) = Self::slot(code) {
            self.retryable[word] |= bit;
        }
        self
    }

    /// Makes `code` not retryable: it becomes `Success` below 400 and
    /// `Permanent` from 400 on. Ignored outside `100..=599`.
    pub const fn never_retry_status(mut self, code: u16) -> Self {
        if let Some((word, bit)) = Self::slot(code) {
            self.retryable[word] &= !bit;
        }
        self
    }

    /// Whether `code` is in the retryable set.
    pub const fn retries(&self, code: u16) -> bool {
        match Self::slot(code) {
            Some((word, bit)) => self.retryable[word] & bit != 0,
            None => false,
        }
    }

    /// The word index and bit mask for `code`, if it is in `100..=599`.
    const fn slot(code: u16) -> Option<(usize, u64)> {
        if code < MIN_CODE || code > MAX_CODE {
            return None;
        }
        let index = (code - MIN_CODE) as usize;
        Some((index / 64, 1 << (index % 64)))
    }

    /// Classifies a status without looking at headers.
    ///
    /// # Examples
    ///
    /// ```
    /// use http::StatusCode;
    /// use retryscope::classify::HttpClassifier;
    /// use retryscope::outcome::{ErrorType, Verdict};
    ///
    /// let c = HttpClassifier::new();
    /// assert_eq!(
    ///     c.classify_status(StatusCode::TOO_MANY_REQUESTS),
    ///     Verdict::retryable(ErrorType::Status(429))
    /// );
    /// assert_eq!(c.classify_status(StatusCode::NO_CONTENT), Verdict::Success);
    /// ```
    pub fn classify_status(&self, status: StatusCode) -> Verdict {
        let code = status.as_u16();
        if self.retries(code) {
            Verdict::retryable(ErrorType::Status(code))
        } else if code < 400 {
            Verdict::Success
        } else {
            Verdict::permanent(ErrorType::Status(code))
        }
    }

    /// Classifies a response and, if it is retryable, attaches the server's hint
    /// from `Retry-After` or `RateLimit` ([`hints::from_headers`]).
    ///
    /// Hints on a success or a permanent failure are ignored: they never make a
    /// response retryable.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use http::{HeaderMap, HeaderValue, StatusCode, header::RETRY_AFTER};
    /// use retryscope::classify::HttpClassifier;
    /// use retryscope::outcome::{ErrorType, Hint, Verdict};
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert(RETRY_AFTER, HeaderValue::from_static("120"));
    /// let c = HttpClassifier::new();
    /// let now = SystemTime::now();
    ///
    /// assert_eq!(
    ///     c.classify_response(StatusCode::SERVICE_UNAVAILABLE, &headers, now),
    ///     Verdict::Retryable {
    ///         error: ErrorType::Status(503),
    ///         hint: Some(Hint::retry_after(Duration::from_secs(120))),
    ///     }
    /// );
    /// // A 400 stays permanent whatever the headers say.
    /// assert_eq!(
    ///     c.classify_response(StatusCode::BAD_REQUEST, &headers, now),
    ///     Verdict::permanent(ErrorType::Status(400))
    /// );
    /// ```
    pub fn classify_response(&self, status: StatusCode, headers: &HeaderMap, now: SystemTime) -> Verdict {
        match self.classify_status(status) {
            Verdict::Retryable { error, .. } => {
                Verdict::Retryable { error, hint: hints::from_headers(headers, now) }
            }
            other => other,
        }
    }
}

#[cfg(feature = "http")]
impl Default for HttpClassifier {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Classifies an I/O error kind (see the table in the [module docs](self)).
///
/// Connection-level failures (`connect`, `reset`, `timeout`, `incomplete`) and
/// the transient `Interrupted` / `WouldBlock` (`io`) are retryable; everything
/// else is permanent. Whether a retry is *safe* also depends on the request: see
/// [`may_retry`].
///
/// # Examples
///
/// ```
/// use std::io::ErrorKind;
/// use retryscope::classify::io_error;
/// use retryscope::outcome::{ErrorType, Verdict};
///
/// assert_eq!(
///     io_error(ErrorKind::ConnectionRefused),
///     Verdict::retryable(ErrorType::Kind("connect"))
/// );
/// assert_eq!(io_error(ErrorKind::TimedOut), Verdict::retryable(ErrorType::TIMEOUT));
/// assert_eq!(
///     io_error(ErrorKind::PermissionDenied),
///     Verdict::permanent(ErrorType::Kind("permission_denied"))
/// );
/// ```
pub fn io_error(kind: ErrorKind) -> Verdict {
    use ErrorKind as K;
    match kind {
        K::ConnectionRefused
        | K::NotConnected
        | K::AddrNotAvailable
        | K::HostUnreachable
        | K::NetworkUnreachable
        | K::NetworkDown => Verdict::retryable(ErrorType::CONNECT),
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => Verdict::retryable(ErrorType::RESET),
        K::TimedOut => Verdict::retryable(ErrorType::TIMEOUT),
        K::UnexpectedEof => Verdict::retryable(ErrorType::INCOMPLETE),
        K::Interrupted | K::WouldBlock => Verdict::retryable(ErrorType::Kind("io")),
        K::InvalidInput => Verdict::permanent(ErrorType::Kind("invalid_input")),
        K::InvalidData => Verdict::permanent(ErrorType::Kind("invalid_data")),
        K::PermissionDenied => Verdict::permanent(ErrorType::Kind("permission_denied")),
        K::NotFound => Verdict::permanent(ErrorType::Kind("not_found")),
        K::Unsupported => Verdict::permanent(ErrorType::Kind("unsupported")),
        _ => Verdict::permanent(ErrorType::OTHER),
    }
}

/// The `Idempotency-Key` request header name (lowercase, as stored by
/// [`HeaderMap`]).
#[cfg(feature = "http")]
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// How far a failed request got before it failed.
#[cfg(feature = "http")]
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
#[cfg(feature = "http")]
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
#[cfg(feature = "http")]
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
/// [`Verdict`]'s business.
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
#[cfg(feature = "http")]
pub fn may_retry(method: &Method, headers: &HeaderMap, marked_safe: bool, stage: Stage) -> bool {
    stage == Stage::NotSent || marked_safe || is_idempotent_method(method) || has_idempotency_key(headers)
}

#[cfg(all(test, feature = "http"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::outcome::Hint;
    use http::HeaderValue;
    use http::header::RETRY_AFTER;
    use std::time::Duration;

    const DEFAULT_RETRY: [u16; 6] = [408, 429, 500, 502, 503, 504];

    fn expected(code: u16, retry: &[u16]) -> Verdict {
        if retry.contains(&code) {
            Verdict::retryable(ErrorType::Status(code))
        } else if code < 400 {
            Verdict::Success
        } else {
            Verdict::permanent(ErrorType::Status(code))
        }
    }

    fn sc(code: u16) -> StatusCode {
        StatusCode::from_u16(code).unwrap()
    }

    #[test]
    fn every_status_default() {
        for code in 100..=599 {
            assert_eq!(status(sc(code)), expected(code, &DEFAULT_RETRY), "{code}");
            assert_eq!(
                HttpClassifier::new().classify_status(sc(code)),
                expected(code, &DEFAULT_RETRY),
                "{code}"
            );
        }
        for code in [400, 401, 403, 404, 409, 422, 501, 505] {
            assert!(matches!(status(sc(code)), Verdict::Permanent { .. }), "{code}");
        }
        for code in [100, 101, 200, 201, 204, 301, 302, 304, 307, 308] {
            assert_eq!(status(sc(code)), Verdict::Success, "{code}");
        }
    }

    #[test]
    fn nonstandard_statuses_are_permanent() {
        let c = HttpClassifier::new().retry_status(600).retry_status(999);
        for code in [600, 799, 999] {
            assert_eq!(c.classify_status(sc(code)), Verdict::permanent(ErrorType::Status(code)));
            assert!(!c.retries(code));
        }
        assert!(!c.retries(0));
        assert!(!c.retries(99));
        assert_eq!(c, HttpClassifier::new());
    }

    #[test]
    fn conflict_switch() {
        assert_eq!(status(StatusCode::CONFLICT), Verdict::permanent(ErrorType::Status(409)));
        let on = HttpClassifier::new().retry_conflict(true);
        let mut retry = DEFAULT_RETRY.to_vec();
        retry.push(409);
        for code in 100..=599 {
            assert_eq!(on.classify_status(sc(code)), expected(code, &retry), "{code}");
        }
        let off = on.retry_conflict(false);
        assert_eq!(off, HttpClassifier::new());
    }

    #[test]
    fn custom_codes() {
        const C: HttpClassifier = HttpClassifier::new()
            .retry_status(425)
            .retry_status(599)
            .retry_status(100)
            .retry_status(202)
            .never_retry_status(500)
            .never_retry_status(429);
        let retry = [408, 502, 503, 504, 425, 599, 100, 202];
        for code in 100..=599 {
            assert_eq!(C.classify_status(sc(code)), expected(code, &retry), "{code}");
        }
        // Bits at word boundaries (index 63/64, 127/128, ...).
        for code in [163, 164, 227, 228, 291, 292, 355, 356, 419, 420, 483, 484, 547, 548] {
            let c = HttpClassifier::new().retry_status(code);
            assert!(c.retries(code), "{code}");
            assert!(!c.never_retry_status(code).retries(code), "{code}");
        }
        assert_eq!(HttpClassifier::default(), HttpClassifier::DEFAULT);
    }

    #[test]
    fn hints_only_on_retryable() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("42"));
        let hint = Some(Hint::retry_after(Duration::from_secs(42)));
        let c = HttpClassifier::new();
        let now = SystemTime::now();
        for code in 100..=599 {
            let got = c.classify_response(sc(code), &headers, now);
            let want = match expected(code, &DEFAULT_RETRY) {
                Verdict::Retryable { error, .. } => Verdict::Retryable { error, hint },
                other => other,
            };
            assert_eq!(got, want, "{code}");
        }
        // RateLimit hints too, and no hint without headers.
        let mut headers = HeaderMap::new();
        headers.insert(crate::hints::RATELIMIT, HeaderValue::from_static(r#""default";r=0;t=9"#));
        assert_eq!(
            c.classify_response(StatusCode::TOO_MANY_REQUESTS, &headers, now),
            Verdict::Retryable {
                error: ErrorType::Status(429),
                hint: Some(Hint::rate_limit(Duration::from_secs(9))),
            }
        );
        assert_eq!(
            c.classify_response(StatusCode::BAD_GATEWAY, &HeaderMap::new(), now),
            Verdict::retryable(ErrorType::Status(502))
        );
    }

    #[test]
    fn idempotent_methods() {
        for m in [Method::GET, Method::HEAD, Method::OPTIONS, Method::PUT, Method::DELETE, Method::TRACE] {
            assert!(is_idempotent_method(&m), "{m}");
        }
        for m in [Method::POST, Method::PATCH, Method::CONNECT] {
            assert!(!is_idempotent_method(&m), "{m}");
        }
        let custom = Method::from_bytes(b"PURGE").unwrap();
        assert!(!is_idempotent_method(&custom));
    }

    fn key(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(IDEMPOTENCY_KEY, HeaderValue::from_str(v).unwrap());
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
        // The header name is case-insensitive.
        let mut h = HeaderMap::new();
        h.insert("Idempotency-Key", HeaderValue::from_static("k"));
        assert!(has_idempotency_key(&h));
    }
}

#[cfg(test)]
mod io_tests {
    use super::*;

    #[test]
    fn io_kinds() {
        use ErrorKind as K;
        let retry = |k| Verdict::retryable(ErrorType::Kind(k));
        let perm = |k| Verdict::permanent(ErrorType::Kind(k));
        let table = [
            (K::ConnectionRefused, retry("connect")),
            (K::NotConnected, retry("connect")),
            (K::AddrNotAvailable, retry("connect")),
            (K::HostUnreachable, retry("connect")),
            (K::NetworkUnreachable, retry("connect")),
            (K::NetworkDown, retry("connect")),
            (K::ConnectionReset, retry("reset")),
            (K::ConnectionAborted, retry("reset")),
            (K::BrokenPipe, retry("reset")),
            (K::TimedOut, retry("timeout")),
            (K::UnexpectedEof, retry("incomplete")),
            (K::Interrupted, retry("io")),
            (K::WouldBlock, retry("io")),
            (K::InvalidInput, perm("invalid_input")),
            (K::InvalidData, perm("invalid_data")),
            (K::PermissionDenied, perm("permission_denied")),
            (K::NotFound, perm("not_found")),
            (K::Unsupported, perm("unsupported")),
            (K::Other, Verdict::permanent(ErrorType::OTHER)),
            (K::AlreadyExists, Verdict::permanent(ErrorType::OTHER)),
            (K::AddrInUse, Verdict::permanent(ErrorType::OTHER)),
            (K::WriteZero, Verdict::permanent(ErrorType::OTHER)),
            (K::OutOfMemory, Verdict::permanent(ErrorType::OTHER)),
        ];
        for (kind, want) in table {
            assert_eq!(io_error(kind), want, "{kind:?}");
        }
        assert_eq!(io_error(K::TimedOut), Verdict::retryable(ErrorType::TIMEOUT));
    }

    #[test]
    fn io_kind_names_are_bounded_snake_case() {
        use ErrorKind as K;
        let kinds = [
            K::ConnectionRefused,
            K::ConnectionReset,
            K::TimedOut,
            K::UnexpectedEof,
            K::Interrupted,
            K::InvalidInput,
            K::InvalidData,
            K::PermissionDenied,
            K::NotFound,
            K::Unsupported,
        ];
        for kind in kinds {
            let Some(ErrorType::Kind(name)) = io_error(kind).error_type() else {
                panic!("{kind:?} has no named kind");
            };
            assert!(name.len() <= 32);
            assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{name}");
        }
    }
}
