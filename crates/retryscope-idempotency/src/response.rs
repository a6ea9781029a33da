//! What the layer keeps of a response, and the answers it gives itself: the
//! replay of a stored response, and the draft's errors as problem details
//! (RFC 9457, `application/problem+json`, as the draft's examples show).

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LANGUAGE, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};

/// The header a replayed response carries: `Idempotency-Replayed: true`. The
/// draft defines none; this name is ours.
pub const IDEMPOTENCY_REPLAYED: HeaderName = HeaderName::from_static("idempotency-replayed");

/// A response as a store keeps it: the status, the headers chosen to be kept
/// (see [`IdempotencyLayer::store_headers`](crate::IdempotencyLayer::store_headers)) and the whole body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    /// The status code.
    pub status: StatusCode,
    /// The kept headers, in the order the response had them.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The body, complete.
    pub body: Bytes,
}

impl StoredResponse {
    /// The bytes this entry holds, for a store's memory bound.
    pub fn size(&self) -> usize {
        let headers: usize = self.headers.iter().map(|(name, value)| name.as_str().len() + value.len()).sum();
        headers + self.body.len()
    }

    /// The response a repeat gets: the stored one, marked as a replay.
    pub(crate) fn replay(&self) -> Response<Bytes> {
        let mut response = Response::new(self.body.clone());
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        headers.insert(IDEMPOTENCY_REPLAYED, HeaderValue::from_static("true"));
        response
    }
}

/// One of the layer's own refusals, with its problem type and status. The
/// draft's three (400 missing, 422 reused, 409 outstanding) carry its titles.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Problem {
    MissingKey,
    InvalidKey,
    Conflict { retry_after: Duration },
    Mismatch,
    NotReplayable,
    BodyTooLarge,
    BodyTimeout,
    BodyUnreadable,
    StoreFull { retry_after: Duration },
    StoreUnavailable,
}

impl Problem {
    fn status(self) -> StatusCode {
        match self {
            Self::MissingKey | Self::InvalidKey | Self::BodyUnreadable => StatusCode::BAD_REQUEST,
            Self::Conflict { .. } | Self::NotReplayable => StatusCode::CONFLICT,
            Self::Mismatch => StatusCode::UNPROCESSABLE_ENTITY,
            Self::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::StoreFull { .. } | Self::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn title(self) -> &'static str {
        match self {
            Self::MissingKey => "Idempotency-Key is missing",
            Self::InvalidKey => "Idempotency-Key is invalid",
            Self::Conflict { .. } => "A request is outstanding for this Idempotency-Key",
            Self::Mismatch => "Idempotency-Key is already used",
            Self::NotReplayable => {
                "The request with this Idempotency-Key completed, but its response was not kept"
            }
            Self::BodyTooLarge => "The request body is too large to fingerprint",
            Self::BodyTimeout => "The request body did not arrive in time",
            Self::BodyUnreadable => "The request body could not be read",
            Self::StoreFull { .. } => "Too many idempotency keys are held; try again later",
            Self::StoreUnavailable => "The idempotency store is unavailable; try again later",
        }
    }

    /// The problem's `type`, a fragment of the crate's documentation.
    fn kind(self) -> &'static str {
        match self {
            Self::MissingKey => "missing-key",
            Self::InvalidKey => "invalid-key",
            Self::Conflict { .. } => "conflict",
            Self::Mismatch => "mismatch",
            Self::NotReplayable => "not-replayable",
            Self::BodyTooLarge => "body-too-large",
            Self::BodyTimeout => "body-timeout",
            Self::BodyUnreadable => "body-unreadable",
            Self::StoreFull { .. } => "store-full",
            Self::StoreUnavailable => "store-unavailable",
        }
    }

    /// The response, with `detail` (e.g. why a key was refused) when given.
    pub(crate) fn response(self, detail: Option<&str>) -> Response<Bytes> {
        let mut body = format!(
            "{{\"type\":\"https://docs.rs/retryscope-idempotency/latest/retryscope_idempotency/#{}\",\"title\":{},\"status\":{}",
            self.kind(),
            json_string(self.title()),
            self.status().as_u16()
        );
        if let Some(detail) = detail {
            body.push_str(",\"detail\":");
            body.push_str(&json_string(detail));
        }
        body.push('}');
        let mut response = Response::new(Bytes::from(body));
        *response.status_mut() = self.status();
        response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        // As the draft's examples: the titles are English.
        response.headers_mut().insert(CONTENT_LANGUAGE, HeaderValue::from_static("en"));
        let retry_after = match self {
            // Whole seconds, rounded up: a shorter wait would be a request too early.
            Self::Conflict { retry_after } | Self::StoreFull { retry_after } => {
                Some(retry_after.as_secs().saturating_add(u64::from(retry_after.subsec_nanos() > 0)).max(1))
            }
            Self::StoreUnavailable => Some(1),
            _ => None,
        };
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// `text` as a JSON string (quotes, backslashes and control characters escaped).
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_json_with_its_status_and_detail() {
        let response = Problem::InvalidKey.response(Some("the key \"x\ny\" is bad"));
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/problem+json");
        let body = std::str::from_utf8(response.body()).expect("UTF-8");
        assert!(body.contains(r#""detail":"the key \"x\u000ay\" is bad""#), "{body}");
        assert!(body.contains(r#""status":400"#), "{body}");
        let full = Problem::StoreFull { retry_after: Duration::from_millis(10) }.response(None);
        assert_eq!(full.headers()[RETRY_AFTER], "1");
        let in_flight = Problem::Conflict { retry_after: Duration::from_millis(2_100) }.response(None);
        assert_eq!(in_flight.status(), StatusCode::CONFLICT);
        assert_eq!(in_flight.headers()[RETRY_AFTER], "3", "rounded up: never a retry too early");
    }
}
