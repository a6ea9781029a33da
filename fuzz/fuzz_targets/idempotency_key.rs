//! The `Idempotency-Key` header (retryscope-idempotency) from untrusted bytes.
//!
//! Properties: parsing is total; an accepted key is 1 to MAX_KEY_LEN printable
//! ASCII characters and reads back the same once quoted again; and every such
//! string (here: the input's printable bytes, cut to the bound) is accepted
//! when quoted, with its escapes undone.
#![no_main]

use libfuzzer_sys::fuzz_target;
use retryscope::classify::MAX_IDEMPOTENCY_KEY_LEN as MAX_KEY_LEN;
use retryscope_idempotency::IdempotencyKey;

/// `text` as a Structured Field String.
fn quote(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn printable(text: &str) -> bool {
    text.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

fuzz_target!(|data: &[u8]| {
    if let Ok(key) = IdempotencyKey::parse(data) {
        let text = key.as_str();
        assert!((1..=MAX_KEY_LEN).contains(&text.len()), "{} characters", text.len());
        assert!(printable(text), "{text:?}");
        let again = IdempotencyKey::parse(quote(text).as_bytes()).expect("a quoted key is a key");
        assert_eq!(again, key);
    }

    let text: String = data.iter().filter(|b| (0x20..=0x7e).contains(*b)).take(MAX_KEY_LEN).map(|&b| char::from(b)).collect();
    if !text.is_empty() {
        let key = IdempotencyKey::parse(quote(&text).as_bytes()).expect("every printable string is a key");
        assert_eq!(key.as_str(), text);
    }
});
