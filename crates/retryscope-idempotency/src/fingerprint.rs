//! A request's fingerprint: what makes a repeat "the same request" (the draft's
//! section 2.4 leaves the choice to the server).

use std::fmt;

use sha2::{Digest, Sha256};

/// SHA-256 over the method, the path and query, and the body of a request.
///
/// Headers are left out: a retry may legitimately differ in them (an attempt
/// number, a trace context, a fresh `Authorization` token). Two requests with
/// the same key and different fingerprints get 422.
///
/// ```
/// use retryscope_idempotency::Fingerprint;
///
/// let first = Fingerprint::of(&http::Method::POST, "/orders?dry=1", b"{\"sku\":7}");
/// assert_eq!(first, Fingerprint::of(&http::Method::POST, "/orders?dry=1", b"{\"sku\":7}"));
/// assert_ne!(first, Fingerprint::of(&http::Method::POST, "/orders?dry=1", b"{\"sku\":8}"));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of a request (`path_and_query` as the request line has it).
    pub fn of(method: &http::Method, path_and_query: &str, body: &[u8]) -> Self {
        let mut digest = Sha256::new();
        // Lengths first, so that no two different requests hash the same bytes.
        for part in [method.as_str().as_bytes(), path_and_query.as_bytes(), body] {
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part);
        }
        Self(digest.finalize().into())
    }

    /// The 32 bytes, for a store to keep.
    pub const fn to_bytes(self) -> [u8; 32] {
        self.0
    }

    /// A fingerprint a store kept.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint(")?;
        for byte in &self.0[..8] {
            write!(f, "{byte:02x}")?;
        }
        write!(f, "…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_cannot_be_shifted_into_each_other() {
        let a = Fingerprint::of(&http::Method::POST, "/a", b"b");
        let b = Fingerprint::of(&http::Method::POST, "/ab", b"");
        assert_ne!(a, b);
        assert_ne!(a, Fingerprint::of(&http::Method::PATCH, "/a", b"b"));
        assert_eq!(Fingerprint::from_bytes(a.to_bytes()), a);
    }
}
