//! The `Idempotency-Key` header's name and key-length limit, which the client
//! (`retryscope-http`) and the server (`retryscope-idempotency`) both hold to.

/// The `Idempotency-Key` request header name (lowercase, as stored by
/// `http::HeaderMap`).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The longest idempotency key retryscope sends or accepts, in characters of
/// the key itself (before the header's quotes and escapes). The draft sets no
/// limit; servers do (Stripe's is 255): room for a UUID with a prefix, and a
/// small record per key in a store. One number, so that every key the client
/// side accepts is one the server side accepts.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;
