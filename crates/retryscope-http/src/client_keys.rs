//! Every key retryscope's clients send, the server layer
//! (`retryscope-idempotency`) accepts: the keys `KeyChoice::new` allows (up
//! to the one shared limit, escapes and all) and the ones
//! `.idempotency_keys()` generates read back there as themselves, and a key
//! one character over the limit is refused on the client, before it could
//! be sent and answered 400. Tests of this crate's own key handling, so
//! here, beside it.

use crate::idempotency::IdempotencyKeys;
use crate::{KeyChoice, KeyChoiceError};
use http::{Extensions, HeaderMap, HeaderName, Method};
use retryscope::classify::{IDEMPOTENCY_KEY, MAX_IDEMPOTENCY_KEY_LEN};
use retryscope_idempotency::IdempotencyKey;

/// The header both sides name, as the server layer reads it.
const HEADER: HeaderName = HeaderName::from_static(IDEMPOTENCY_KEY);

/// The header the client would send for `key`, read as this layer reads it.
fn as_the_server_reads(
    key: KeyChoice,
) -> Result<Option<IdempotencyKey>, retryscope_idempotency::KeyHeaderError> {
    let mut extensions = Extensions::new();
    extensions.insert(key);
    let mut headers = HeaderMap::new();
    IdempotencyKeys::default().apply(&Method::POST, &mut headers, &extensions, true);
    IdempotencyKey::from_headers(&headers, &HEADER)
}

#[test]
fn every_key_the_client_accepts_reads_back_as_itself() {
    let printable: String = (0x20_u8..=0x7e).map(char::from).collect();
    let longest_plain = "k".repeat(MAX_IDEMPOTENCY_KEY_LEN);
    // Every character escaped: the longest header value there can be.
    let longest_escaped = "\"\\".repeat(MAX_IDEMPOTENCY_KEY_LEN / 2) + "\"";
    for key in ["a", " leading space", printable.as_str(), longest_plain.as_str(), longest_escaped.as_str()] {
        let sent = KeyChoice::new(key).expect("the client accepts it");
        let read = as_the_server_reads(sent).expect("the server accepts it").expect("a key");
        assert_eq!(read.as_str(), key);
    }
}

#[test]
fn one_character_over_the_limit_is_refused_by_the_client_before_it_is_sent() {
    let key = "k".repeat(MAX_IDEMPOTENCY_KEY_LEN + 1);
    assert_eq!(
        KeyChoice::new(&key).err(),
        Some(KeyChoiceError::TooLong { len: MAX_IDEMPOTENCY_KEY_LEN + 1, limit: MAX_IDEMPOTENCY_KEY_LEN })
    );
    let mut headers = HeaderMap::new();
    headers.insert(HEADER, format!("\"{key}\"").parse().expect("a header value"));
    assert!(IdempotencyKey::from_headers(&headers, &HEADER).is_err(), "the server refuses it too");
}

#[test]
fn a_generated_key_is_accepted() {
    let mut headers = HeaderMap::new();
    let keys = IdempotencyKeys::default().generate();
    keys.apply(&Method::POST, &mut headers, &Extensions::new(), true);
    let read = IdempotencyKey::from_headers(&headers, &HEADER).expect("accepted").expect("a key");
    assert_eq!(read.as_str().len(), 36, "a hyphenated UUID: {read}");
}

/// The client keys the methods the server layer keys by default, POST and
/// PATCH: an extension method a server may not key is left without one (a
/// key it ignores would let a retry run the request twice), unless the
/// caller gives one.
#[test]
fn post_and_patch_get_a_key_and_an_extension_method_only_its_callers() {
    let keys = IdempotencyKeys::default().generate();
    for (method, keyed) in
        [("POST", true), ("PATCH", true), ("PURGE", false), ("MOVE", false), ("PUT", false)]
    {
        let method = Method::from_bytes(method.as_bytes()).expect("a method");
        let mut headers = HeaderMap::new();
        let source = keys.apply(&method, &mut headers, &Extensions::new(), true);
        assert_eq!((source.is_some(), headers.contains_key(&HEADER)), (keyed, keyed), "{method}");
    }
    let purge = Method::from_bytes(b"PURGE").expect("a method");
    let mut extensions = Extensions::new();
    extensions.insert(KeyChoice::new("purge-1").expect("a key"));
    let mut headers = HeaderMap::new();
    assert!(keys.apply(&purge, &mut headers, &extensions, true).is_some(), "the caller's key is kept");
    assert_eq!(headers[&HEADER], "\"purge-1\"");
}
