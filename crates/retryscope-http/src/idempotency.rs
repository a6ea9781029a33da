//! Idempotency keys on the client: one key per logical operation, sent on
//! every attempt, so that a server that stores key → response
//! (draft-ietf-httpapi-idempotency-key-header) runs a retried POST once.
//!
//! Off by default. With [`IdempotencyKeys::generate`] on (the integrations'
//! `.idempotency_keys()`), a POST or PATCH — the methods the draft makes
//! fault-tolerant, and the ones `retryscope-idempotency`'s layer keys by
//! default — that carries no key and whose body can be sent again, gets a
//! fresh UUID v4 key before its first attempt. An extension method (WebDAV's
//! `MOVE`, a `PURGE`) gets none: a server cannot be assumed to honour a key
//! on a method it may not know, and a key it ignores would make a retry run
//! the request twice; a key the caller gives one is kept. Every attempt
//! then sends the same header, and the request is retried under the usual
//! transient-only rules, as one with a key of its own always was. A request
//! that carries the header keeps it unchanged. Per request, an
//! [`KeyChoice`] extension supplies a key or suppresses generation.
//!
//! Inside a job's handler (a `retryscope-jobs` worker, or any future run in
//! a [`retryscope::jobs::JobKeyScope`]), such a request gets instead a
//! key derived from the job's key and the call's ordinal in the handler,
//! `"<job key>/<n>"` (see [`crate::job_call_key`]), whether or not generation
//! is on: the same key on every run of the job, so a server that stores keys
//! replays a call that completed before the worker crashed.
//!
//! The value is an RFC 8941 String (`Idempotency-Key: "8e03978e-…"`), as the
//! draft specifies.
//!
//! ```
//! use http::{HeaderMap, Method};
//! use retryscope_http::KeyChoice;
//! use retryscope_http::__private::idempotency::{IdempotencyKeys, KeySource};
//!
//! let keys = IdempotencyKeys::default().generate();
//!
//! // A POST without a key gets one, quoted as an sf-string.
//! let mut headers = HeaderMap::new();
//! let source = keys.apply(&Method::POST, &mut headers, &http::Extensions::new(), true);
//! assert_eq!(source, Some(KeySource::Generated));
//! let value = headers["idempotency-key"].to_str()?;
//! assert!(value.starts_with('"') && value.ends_with('"') && value.len() == 38);
//!
//! // A key of the caller's own, through the request's extensions.
//! let mut extensions = http::Extensions::new();
//! extensions.insert(KeyChoice::new("order-7781")?);
//! let mut headers = HeaderMap::new();
//! assert_eq!(keys.apply(&Method::POST, &mut headers, &extensions, true), Some(KeySource::Caller));
//! assert_eq!(headers["idempotency-key"], r#""order-7781""#);
//!
//! // A GET needs none.
//! let mut headers = HeaderMap::new();
//! assert_eq!(keys.apply(&Method::GET, &mut headers, &http::Extensions::new(), true), None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::configured::CallConfig;
use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Method};
use std::fmt;

/// The draft's header, `Idempotency-Key` (lowercase, as [`HeaderMap`] keeps
/// it): [`retryscope::classify::IDEMPOTENCY_KEY`] as a header name.
pub(crate) const DEFAULT_HEADER: HeaderName = HeaderName::from_static(retryscope::classify::IDEMPOTENCY_KEY);

/// The longest key [`KeyChoice::new`] accepts, in bytes (before quoting): the
/// limit the server layer (retryscope-idempotency) accepts too.
const MAX_KEY_LEN: usize = retryscope::classify::MAX_IDEMPOTENCY_KEY_LEN;

/// What the integration does with idempotency keys: which header carries them,
/// and whether it makes one for a request that has none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKeys {
    header: HeaderName,
    generate: bool,
}

impl Default for IdempotencyKeys {
    /// The draft's `Idempotency-Key` header, no key generated.
    fn default() -> Self {
        Self { header: DEFAULT_HEADER, generate: false }
    }
}

/// Where a request's idempotency key came from: what its attempt spans say
/// (`retryscope.idempotency_key.generated`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// The caller's: on the request already, or a [`KeyChoice`] extension.
    Caller,
    /// Made by the integration for this operation.
    Generated,
    /// Derived from the key of the job whose handler makes the call, and the
    /// call's ordinal in it ([`retryscope::jobs`]).
    Job,
}

impl KeySource {
    /// `retryscope.idempotency_key.generated`: the integration made the key
    /// (a fresh one, or one derived from the job's), not the caller.
    pub fn generated(self) -> bool {
        matches!(self, KeySource::Generated | KeySource::Job)
    }
}

impl IdempotencyKeys {
    /// Makes a fresh key for every non-idempotent request that has none.
    pub fn generate(mut self) -> Self {
        self.generate = true;
        self
    }

    /// Carries keys in `header` instead of `Idempotency-Key`: the header
    /// looked for on requests, and the one supplied or generated keys go in.
    pub fn header(mut self, header: HeaderName) -> Self {
        self.header = header;
        self
    }

    /// The header keys go in.
    pub fn header_name(&self) -> &HeaderName {
        &self.header
    }

    /// Whether keys are generated.
    pub fn generates(&self) -> bool {
        self.generate
    }

    /// Gives one request its key, once, before its first attempt (every
    /// attempt is then sent with `headers` as they are after this), and says
    /// where it came from; `None`: the request goes without one.
    ///
    /// In order: a [`KeyChoice`] in `extensions` with a key replaces the
    /// header; a header already there is kept as it is; otherwise, with
    /// generation on, a request whose `method` is not idempotent, whose body
    /// is `replayable` and which did not [suppress](KeyChoice::suppress)
    /// it gets a fresh UUID v4. A body that cannot be sent again gets no key:
    /// there will be no second attempt for it to protect.
    ///
    /// Inside a job's scope ([`retryscope::jobs`]), such a request gets
    /// the key of the job's next call instead, generation on or off (the job
    /// asks for it): the one place both integrations derive job keys.
    pub fn apply(
        &self,
        method: &Method,
        headers: &mut HeaderMap,
        extensions: &Extensions,
        replayable: bool,
    ) -> Option<KeySource> {
        self.apply_generating(self.generate, method, headers, extensions, replayable)
    }

    /// [`apply`](Self::apply) for a call of a configured client
    /// (`configured`: its settings from the file, if any): the file's
    /// `idempotency_keys`, where written, over the builder's.
    pub fn apply_configured(
        &self,
        configured: Option<&CallConfig>,
        method: &Method,
        headers: &mut HeaderMap,
        extensions: &Extensions,
        replayable: bool,
    ) -> Option<KeySource> {
        let generate = configured.map_or(self.generate, |c| c.generates_keys(self.generate));
        self.apply_generating(generate, method, headers, extensions, replayable)
    }

    /// [`apply`](Self::apply), generating keys if `generate` says so rather
    /// than as set.
    fn apply_generating(
        &self,
        generate: bool,
        method: &Method,
        headers: &mut HeaderMap,
        extensions: &Extensions,
        replayable: bool,
    ) -> Option<KeySource> {
        let choice = extensions.get::<KeyChoice>().map(|key| &key.0);
        if let Some(Choice::Use(value)) = choice {
            headers.insert(self.header.clone(), value.clone());
            return Some(KeySource::Caller);
        }
        if has_key(headers, &self.header) {
            return Some(KeySource::Caller);
        }
        let keyed_method = matches!(*method, Method::POST | Method::PATCH);
        let needed = keyed_method && replayable && !matches!(choice, Some(Choice::Suppress));
        if !needed {
            return None;
        }
        // Taken only for a request that will carry it, so that a GET or a
        // caller's key in between does not move the ordinals of the rest.
        if let Some(value) = retryscope::jobs::next_call().and_then(|c| crate::job_call_key::header_value(&c))
        {
            headers.insert(self.header.clone(), value);
            return Some(KeySource::Job);
        }
        generate.then(|| {
            headers.insert(self.header.clone(), fresh_key());
            KeySource::Generated
        })
    }
}

/// Whether `headers` carry a non-empty `name` (as [`has_idempotency_key`]
/// does for the draft's header).
///
/// [`has_idempotency_key`]: crate::safety::has_idempotency_key
fn has_key(headers: &HeaderMap, name: &HeaderName) -> bool {
    headers.get_all(name).iter().any(|value| value.as_bytes().iter().any(|b| !matches!(b, b' ' | b'\t')))
}

/// A fresh UUID v4 as an sf-string: `"8e03978e-40d5-43e8-bc93-6894a57f9324"`.
fn fresh_key() -> HeaderValue {
    let mut quoted = [0u8; uuid::fmt::Hyphenated::LENGTH + 2];
    quoted[0] = b'"';
    quoted[quoted.len() - 1] = b'"';
    uuid::Uuid::new_v4().hyphenated().encode_lower(&mut quoted[1..uuid::fmt::Hyphenated::LENGTH + 1]);
    // Hex digits, hyphens and quotes: always a valid header value.
    HeaderValue::from_bytes(&quoted).unwrap_or_else(|_| HeaderValue::from_static("\"\""))
}

/// One request's choice about its idempotency key, carried in its extensions
/// (reqwest: `RequestBuilder::with_extension`; tower:
/// `request.extensions_mut().insert(..)`).
///
/// ```
/// use retryscope_http::KeyChoice;
///
/// let mut request = http::Request::post("http://127.0.0.1:8080/orders").body(())?;
/// // The key of this order, the same if the caller itself sends it again later.
/// request.extensions_mut().insert(KeyChoice::new("order-7781")?);
///
/// let mut upload = http::Request::post("http://127.0.0.1:8080/uploads").body(())?;
/// // No key for this one: it is sent once, as without `.idempotency_keys()`.
/// upload.extensions_mut().insert(KeyChoice::suppress());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyChoice(Choice);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Choice {
    /// The header's value, already an sf-string.
    Use(HeaderValue),
    Suppress,
}

impl KeyChoice {
    /// Sends `key` as this request's idempotency key (an sf-string: quoted,
    /// `"` and `\` escaped), whether or not generation is on, replacing any
    /// the request carries. `key` must be 1 to
    /// [`MAX_IDEMPOTENCY_KEY_LEN`](retryscope::classify::MAX_IDEMPOTENCY_KEY_LEN) bytes of
    /// printable ASCII (space to `~`), what an RFC 8941 String can hold.
    pub fn new(key: &str) -> Result<Self, KeyChoiceError> {
        if key.is_empty() {
            return Err(KeyChoiceError::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyChoiceError::TooLong { len: key.len(), limit: MAX_KEY_LEN });
        }
        if let Some(at) = key.bytes().position(|b| !(0x20..=0x7e).contains(&b)) {
            return Err(KeyChoiceError::NotPrintableAscii { at });
        }
        let mut quoted = Vec::with_capacity(key.len() + 2);
        quoted.push(b'"');
        for byte in key.bytes() {
            if matches!(byte, b'"' | b'\\') {
                quoted.push(b'\\');
            }
            quoted.push(byte);
        }
        quoted.push(b'"');
        HeaderValue::from_bytes(&quoted)
            .map(|value| Self(Choice::Use(value)))
            .map_err(|_| KeyChoiceError::NotPrintableAscii { at: 0 })
    }

    /// Makes no key for this request: without one of its own, a
    /// non-idempotent request is then sent once, as without generation.
    /// A key the request carries itself is still sent.
    pub fn suppress() -> Self {
        Self(Choice::Suppress)
    }

    /// The header value this sends (an sf-string), or `None` for
    /// [`suppress`](Self::suppress).
    pub fn value(&self) -> Option<&HeaderValue> {
        match &self.0 {
            Choice::Use(value) => Some(value),
            Choice::Suppress => None,
        }
    }
}

/// Why [`KeyChoice::new`] refused a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyChoiceError {
    /// An empty key: the draft's servers reject it.
    Empty,
    /// Longer than `limit` bytes.
    TooLong {
        /// The key's length in bytes.
        len: usize,
        /// [`MAX_IDEMPOTENCY_KEY_LEN`](retryscope::classify::MAX_IDEMPOTENCY_KEY_LEN).
        limit: usize,
    },
    /// A byte outside printable ASCII, at byte offset `at`: an sf-string
    /// cannot hold it.
    NotPrintableAscii {
        /// Where the first such byte is.
        at: usize,
    },
}

impl fmt::Display for KeyChoiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("an idempotency key cannot be empty"),
            Self::TooLong { len, limit } => {
                write!(f, "an idempotency key of {len} bytes is longer than the limit of {limit}")
            }
            Self::NotPrintableAscii { at } => {
                write!(f, "an idempotency key must be printable ASCII (an RFC 8941 String); byte {at} is not")
            }
        }
    }
}

impl std::error::Error for KeyChoiceError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(
        keys: &IdempotencyKeys,
        method: Method,
        extensions: &Extensions,
    ) -> (Option<KeySource>, HeaderMap) {
        let mut headers = HeaderMap::new();
        let source = keys.apply(&method, &mut headers, extensions, true);
        (source, headers)
    }

    #[test]
    fn a_generated_key_is_a_quoted_uuid_v4() {
        let (source, headers) =
            apply(&IdempotencyKeys::default().generate(), Method::POST, &Extensions::new());
        assert_eq!(source, Some(KeySource::Generated));
        let value = headers[DEFAULT_HEADER].to_str().expect("ascii");
        let inner = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).expect("an sf-string");
        let uuid = uuid::Uuid::parse_str(inner).expect("a uuid");
        assert_eq!(uuid.get_version_num(), 4);
        assert_eq!(inner, uuid.hyphenated().to_string());
    }

    #[test]
    fn without_generation_a_post_gets_no_key() {
        assert_eq!(apply(&IdempotencyKeys::default(), Method::POST, &Extensions::new()).0, None);
    }

    #[test]
    fn idempotent_methods_and_streams_get_no_key() {
        let keys = IdempotencyKeys::default().generate();
        for method in [Method::GET, Method::PUT, Method::DELETE, Method::HEAD] {
            assert_eq!(apply(&keys, method, &Extensions::new()).0, None);
        }
        let mut headers = HeaderMap::new();
        assert_eq!(keys.apply(&Method::POST, &mut headers, &Extensions::new(), false), None);
        assert!(headers.is_empty());
        assert_eq!(apply(&keys, Method::PATCH, &Extensions::new()).0, Some(KeySource::Generated));
    }

    #[test]
    fn a_key_already_on_the_request_is_kept_unchanged() {
        let keys = IdempotencyKeys::default().generate();
        let mut headers = HeaderMap::new();
        headers.insert(DEFAULT_HEADER, HeaderValue::from_static("bare-key"));
        assert_eq!(
            keys.apply(&Method::POST, &mut headers, &Extensions::new(), true),
            Some(KeySource::Caller)
        );
        assert_eq!(headers[DEFAULT_HEADER], "bare-key");
        assert_eq!(headers.len(), 1);
    }

    #[test]
    fn suppression_makes_no_key_but_keeps_the_callers() {
        let keys = IdempotencyKeys::default().generate();
        let mut extensions = Extensions::new();
        extensions.insert(KeyChoice::suppress());
        assert_eq!(apply(&keys, Method::POST, &extensions).0, None);
        let mut headers = HeaderMap::new();
        headers.insert(DEFAULT_HEADER, HeaderValue::from_static("\"mine\""));
        assert_eq!(keys.apply(&Method::POST, &mut headers, &extensions, true), Some(KeySource::Caller));
    }

    #[test]
    fn a_supplied_key_is_escaped_and_replaces_the_header_under_the_configured_name() {
        let name = HeaderName::from_static("x-request-key");
        let keys = IdempotencyKeys::default().header(name.clone());
        let mut extensions = Extensions::new();
        extensions.insert(KeyChoice::new(r#"a"b\c"#).expect("printable"));
        let mut headers = HeaderMap::new();
        headers.insert(name.clone(), HeaderValue::from_static("old"));
        assert_eq!(keys.apply(&Method::POST, &mut headers, &extensions, true), Some(KeySource::Caller));
        assert_eq!(headers[&name], r#""a\"b\\c""#);
        assert!(!headers.contains_key(DEFAULT_HEADER));
    }

    #[test]
    fn unusable_keys_are_refused_with_the_reason() {
        assert_eq!(KeyChoice::new(""), Err(KeyChoiceError::Empty));
        assert_eq!(
            KeyChoice::new(&"k".repeat(10_000)),
            Err(KeyChoiceError::TooLong { len: 10_000, limit: MAX_KEY_LEN })
        );
        assert_eq!(KeyChoice::new("clé"), Err(KeyChoiceError::NotPrintableAscii { at: 2 }));
        assert_eq!(KeyChoice::new("a\tb"), Err(KeyChoiceError::NotPrintableAscii { at: 1 }));
        assert_eq!(
            KeyChoiceError::TooLong { len: 300, limit: 255 }.to_string(),
            "an idempotency key of 300 bytes is longer than the limit of 255"
        );
    }
}
