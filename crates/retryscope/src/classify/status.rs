//! HTTP status rules: the default table and the configurable [`HttpClassifier`].

use std::time::SystemTime;

use http::{HeaderMap, StatusCode};

use crate::hints;
use crate::verdict::{ErrorType, Verdict};

/// The lowest status code the classifier's bitset covers.
const MIN_CODE: u16 = 100;
/// The highest status code the classifier's bitset covers.
const MAX_CODE: u16 = 599;

/// Classifies an HTTP status with the default rules (see the [module
/// docs](super)): 1xx–3xx succeed; 408, 429, 500, 502, 503 and 504 are retryable;
/// every other status (409 included) is permanent.
///
/// Retryable verdicts carry no hint. What `Transient for StatusCode` asks;
/// users ask [`HttpClassifier::new`]'s
/// [`classify_response`](HttpClassifier::classify_response), the same rules
/// (and a retryable response's hint).
pub(crate) fn status(status: StatusCode) -> Verdict {
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
/// use std::time::SystemTime;
/// use http::{HeaderMap, StatusCode};
/// use retryscope::classify::HttpClassifier;
/// use retryscope::{ErrorType, Verdict};
///
/// const CLASSIFIER: HttpClassifier = HttpClassifier::new()
///     .retry_status(409)         // retry an optimistic-locking conflict
///     .retry_status(599)         // a proxy's custom "network timeout"
///     .never_retry_status(500);  // this backend's 500s are deterministic
/// let (headers, now) = (HeaderMap::new(), SystemTime::now());
///
/// assert_eq!(
///     CLASSIFIER.classify_response(StatusCode::CONFLICT, &headers, now),
///     Verdict::retryable(ErrorType::Status(409))
/// );
/// assert_eq!(
///     CLASSIFIER.classify_response(StatusCode::INTERNAL_SERVER_ERROR, &headers, now),
///     Verdict::permanent(ErrorType::Status(500))
/// );
/// assert!(CLASSIFIER.retries(599));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HttpClassifier {
    /// Bit `code - 100` is set when `code` is retryable.
    retryable: [u64; 8],
}

impl HttpClassifier {
    /// The default rules: retry 408, 429, 500, 502, 503 and 504.
    pub(crate) const DEFAULT: HttpClassifier = HttpClassifier { retryable: [0; 8] }
        .retry_status(408)
        .retry_status(429)
        .retry_status(500)
        .retry_status(502)
        .retry_status(503)
        .retry_status(504);

    /// A classifier with the default rules: retry 408, 429, 500, 502, 503
    /// and 504 (the table in the [module docs](super)).
    pub const fn new() -> Self {
        Self::DEFAULT
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

    /// Classifies a status without looking at headers (what
    /// [`classify_response`](Self::classify_response) does first).
    pub(crate) fn classify_status(&self, status: StatusCode) -> Verdict {
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
    /// use retryscope::{ErrorType, Hint, Verdict};
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
    /// // Without headers: the status alone.
    /// let none = HeaderMap::new();
    /// assert_eq!(
    ///     c.classify_response(StatusCode::TOO_MANY_REQUESTS, &none, now),
    ///     Verdict::retryable(ErrorType::Status(429))
    /// );
    /// assert_eq!(c.classify_response(StatusCode::NO_CONTENT, &none, now), Verdict::Success);
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

impl Default for HttpClassifier {
    fn default() -> Self {
        Self::DEFAULT
    }
}
