//! The `Idempotency-Key` request header: an RFC 8941 Structured Field String
//! (draft-ietf-httpapi-idempotency-key-header, section 2), parsed strictly and
//! bounded.

use std::error::Error;
use std::fmt;

use http::header::{HeaderMap, HeaderName};

/// The header the draft defines, and the layer's default:
/// [`retryscope::classify::IDEMPOTENCY_KEY`] as a header name.
pub(crate) const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static(retryscope::classify::IDEMPOTENCY_KEY);

/// The longest key accepted, in characters (the String's content, after
/// unescaping): [`retryscope::classify::MAX_IDEMPOTENCY_KEY_LEN`], the limit
/// retryscope's clients hold their keys to as well.
const MAX_KEY_LEN: usize = retryscope::classify::MAX_IDEMPOTENCY_KEY_LEN;

/// The longest header value read at all: a key of [`MAX_KEY_LEN`] characters,
/// every one escaped, in quotes. Anything longer is refused before it is parsed.
const MAX_VALUE_LEN: usize = 2 * MAX_KEY_LEN + 2;

/// A valid idempotency key: the content of a non-empty Structured Field String
/// of at most [`MAX_IDEMPOTENCY_KEY_LEN`](retryscope::classify::MAX_IDEMPOTENCY_KEY_LEN)
/// printable ASCII characters.
///
/// ```
/// use retryscope_idempotency::IdempotencyKey;
///
/// let key = IdempotencyKey::parse(br#""8e03978e-40d5-43e8-bc93-6894a57f9324""#)?;
/// assert_eq!(key.as_str(), "8e03978e-40d5-43e8-bc93-6894a57f9324");
/// assert!(IdempotencyKey::parse(b"8e03978e").is_err()); // a Token, not a String
/// # Ok::<(), retryscope_idempotency::KeyHeaderError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Parses one header value. Parameters on the Item are ignored, as RFC 8941
    /// asks of parameters a field does not define (the draft defines none).
    pub fn parse(value: &[u8]) -> Result<Self, KeyHeaderError> {
        if value.len() > MAX_VALUE_LEN {
            return Err(KeyHeaderError::TooLong { limit: MAX_KEY_LEN });
        }
        if !value.is_ascii() {
            return Err(KeyHeaderError::NotAscii);
        }
        let item = sfv::Parser::new(value)
            .parse::<sfv::Item>()
            .map_err(|source| KeyHeaderError::NotAString { source: source.into() })?;
        let Some(string) = item.bare_item.as_string() else {
            return Err(KeyHeaderError::WrongType);
        };
        let key = string.as_str();
        if key.is_empty() {
            return Err(KeyHeaderError::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyHeaderError::TooLong { limit: MAX_KEY_LEN });
        }
        Ok(Self(key.to_owned()))
    }

    /// Reads the key from `headers` under `name`: `Ok(None)` when the header is
    /// absent; an error when it is malformed or sent more than once (an Item
    /// field cannot be combined from several lines).
    pub fn from_headers(headers: &HeaderMap, name: &HeaderName) -> Result<Option<Self>, KeyHeaderError> {
        let mut values = headers.get_all(name).iter();
        let Some(first) = values.next() else { return Ok(None) };
        if values.next().is_some() {
            return Err(KeyHeaderError::Repeated);
        }
        Self::parse(first.as_bytes()).map(Some)
    }

    /// The key's characters, without the quotes and escapes of the header.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IdempotencyKey").field(&self.0).finish()
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why an `Idempotency-Key` header was refused (the layer answers 400).
#[derive(Debug)]
#[non_exhaustive]
pub enum KeyHeaderError {
    /// The String is empty.
    Empty,
    /// The key is longer than `limit` characters.
    TooLong {
        /// [`MAX_IDEMPOTENCY_KEY_LEN`](retryscope::classify::MAX_IDEMPOTENCY_KEY_LEN).
        limit: usize,
    },
    /// The value holds bytes outside ASCII (a Structured Field String cannot).
    NotAscii,
    /// The value is not a valid Structured Field Item.
    NotAString {
        /// What the Structured Field parser found wrong (its type is the
        /// parser's, not part of this API).
        source: Box<dyn Error + Send + Sync>,
    },
    /// The value is an Item of another type (a Token, an Integer, …): the draft
    /// asks for a String, in quotes.
    WrongType,
    /// The header was sent more than once.
    Repeated,
}

impl fmt::Display for KeyHeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("the idempotency key is empty"),
            Self::TooLong { limit } => write!(f, "the idempotency key is longer than {limit} characters"),
            Self::NotAscii => f.write_str("the idempotency key holds non-ASCII bytes"),
            Self::NotAString { .. } => f.write_str("the idempotency key is not a Structured Field String"),
            Self::WrongType => f.write_str(
                "the idempotency key is not a Structured Field String (it must be in double quotes)",
            ),
            Self::Repeated => f.write_str("the idempotency key header is sent more than once"),
        }
    }
}

impl Error for KeyHeaderError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::NotAString { source } => Some(source.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_uuid_is_a_key_and_escapes_are_undone() {
        let key = IdempotencyKey::parse(br#""a\"b\\c""#).expect("a valid String");
        assert_eq!(key.as_str(), r#"a"b\c"#);
        let key = IdempotencyKey::parse(br#""k-1";client=7"#).expect("parameters are ignored");
        assert_eq!(key.as_str(), "k-1");
    }

    #[test]
    fn hostile_values_are_refused_with_their_reason() {
        assert!(matches!(IdempotencyKey::parse(br#""""#), Err(KeyHeaderError::Empty)));
        assert!(matches!(IdempotencyKey::parse(b""), Err(KeyHeaderError::NotAString { .. })));
        assert!(matches!(IdempotencyKey::parse(b"token"), Err(KeyHeaderError::WrongType)));
        assert!(matches!(IdempotencyKey::parse(b"42"), Err(KeyHeaderError::WrongType)));
        assert!(matches!(IdempotencyKey::parse("\"clé\"".as_bytes()), Err(KeyHeaderError::NotAscii)));
        assert!(matches!(IdempotencyKey::parse(br#""open"#), Err(KeyHeaderError::NotAString { .. })));
        assert!(matches!(IdempotencyKey::parse(br#""a", "b""#), Err(KeyHeaderError::NotAString { .. })));
        let long = format!("\"{}\"", "k".repeat(MAX_KEY_LEN + 1));
        assert!(matches!(IdempotencyKey::parse(long.as_bytes()), Err(KeyHeaderError::TooLong { .. })));
        let longest = format!("\"{}\"", "k".repeat(MAX_KEY_LEN));
        assert!(IdempotencyKey::parse(longest.as_bytes()).is_ok());
        let huge = vec![b'k'; 10 * 1024];
        assert!(matches!(IdempotencyKey::parse(&huge), Err(KeyHeaderError::TooLong { .. })));
    }

    #[test]
    fn a_key_sent_twice_is_refused() {
        let mut headers = HeaderMap::new();
        headers.append(IDEMPOTENCY_KEY, http::HeaderValue::from_static("\"a\""));
        headers.append(IDEMPOTENCY_KEY, http::HeaderValue::from_static("\"a\""));
        assert!(matches!(
            IdempotencyKey::from_headers(&headers, &IDEMPOTENCY_KEY),
            Err(KeyHeaderError::Repeated)
        ));
        assert!(matches!(IdempotencyKey::from_headers(&HeaderMap::new(), &IDEMPOTENCY_KEY), Ok(None)));
    }
}
