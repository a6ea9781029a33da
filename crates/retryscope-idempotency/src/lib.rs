//! Idempotency keys on the server side: a tower layer that runs a keyed
//! request once and answers its repeats with the stored response, after
//! [draft-ietf-httpapi-idempotency-key-header](https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/).
//!
//! A client that may retry a POST sends one `Idempotency-Key` per logical
//! operation on every attempt (retryscope's clients can pick it). This layer
//! keeps, per key, a fingerprint of the request and its response:
//!
//! | request | answer |
//! |---|---|
//! | first with a key | runs; its response (status, [kept headers](IdempotencyLayer::store_headers), body up to [`max_body`](IdempotencyLayer::max_body)) is kept for the [`ttl`](IdempotencyLayer::ttl) |
//! | repeat, after completion | the kept response, with `Idempotency-Replayed: true` |
//! | repeat, while the first runs | 409 Conflict with `Retry-After` ([`in_flight_retry_after`](IdempotencyLayer::in_flight_retry_after), 1 s) |
//! | same key, another request (method, path and query, body) | 422 Unprocessable Content |
//! | no key, on a [key-requiring](IdempotencyLayer::require_key) resource | 400 Bad Request |
//! | a malformed key | 400 Bad Request |
//!
//! Refusals are problem details (`application/problem+json`, RFC 9457) whose
//! `type` names one of these anchors:
//! `#missing-key`, `#invalid-key`, `#conflict`, `#mismatch`, `#not-replayable`,
//! `#body-too-large`, `#body-timeout`, `#body-unreadable`, `#store-full`,
//! `#store-unavailable`.
//!
//! # Where the draft leaves the choice (and what this layer chose)
//!
//! - **The key** is a Structured Field String of 1 to
//!   [`MAX_IDEMPOTENCY_KEY_LEN`](retryscope::classify::MAX_IDEMPOTENCY_KEY_LEN) printable
//!   ASCII characters; parameters are ignored; a header sent twice is refused.
//! - **Keyed methods**: POST and PATCH ([`methods`](IdempotencyLayer::methods)).
//! - **A 5xx or an error** from the service releases the key: the operation said
//!   it failed, so a retry runs it again. Other statuses (4xx included) are kept.
//!   *A deviation*: the draft says a retry SHOULD get "the result of the
//!   previously completed operation, success or an error";
//!   [`keep_server_errors`](IdempotencyLayer::keep_server_errors) follows it.
//! - **The fingerprint** covers the method and the path and query as well as the
//!   payload the draft names, so a key reused on another resource is a mismatch
//!   (422), never the other resource's response.
//! - **A response too large to keep** (or with trailers, or slower than the body
//!   timeout) is sent to the caller whole; the key is then *not replayable*:
//!   repeats get 409 (`#not-replayable`) and the request never runs twice.
//! - **A request body over `max_body`** gets 413: a body that cannot be
//!   fingerprinted cannot be keyed, and passing it through would run it again.
//! - **A full store** refuses new keys with 503 and `Retry-After` rather than
//!   evict a live one (which would let its request run twice).
//! - **A store that fails** gets 503 with `Retry-After: 1`; nothing runs that
//!   could not be recorded.
//! - **A repeat while the first runs** gets 409 `#conflict` *with a
//!   `Retry-After`* (the draft gives the 409 none): a key in flight is not a
//!   failure, so a client may come back for the first request's response.
//!   retryscope's clients retry exactly that answer on a keyed request — a 409
//!   with `Retry-After` — after the wait, and treat every other 409 (a
//!   `#not-replayable` key, an application's conflict) as final.
//! - **A claimed request runs to its end** in a task of its own even when the
//!   caller goes away, so that the retry of a lost response finds it.
//! - **A claim is leased** ([`lease`](IdempotencyLayer::lease), 5 min): a process
//!   that dies mid-request (a shared store outlives it) holds the key for that
//!   long — repeats get 409 — and then frees it, so a retry runs the request
//!   again. The entry of a completed request lives for the `ttl` from its
//!   completion, the draft's documented expiry.
//! - **Keys are not scoped** per client: a service with several tenants should
//!   prefix them (or give each tenant its own key space) before this layer.
//!
//! # Further reading
//!
//! - The telemetry contract — every metric, span, attribute and log field, and
//!   the Prometheus series they become: [docs/telemetry.md](https://github.com/retryscope/retryscope/blob/main/docs/telemetry.md).
//! - The runbook — the alerts, the dashboards, and what to do when they fire:
//!   [docs/runbook.md](https://github.com/retryscope/retryscope/blob/main/docs/runbook.md).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod body;
mod claim;
mod config;
mod error;
mod fingerprint;
mod key;
mod layer;
mod response;
mod service;
pub mod store;
pub mod telemetry;

pub use body::{BoxError, RequestBody, ResponseBody};
pub use error::StoreError;
pub use fingerprint::Fingerprint;
pub(crate) use key::IDEMPOTENCY_KEY;
pub use key::{IdempotencyKey, KeyHeaderError};
pub use layer::IdempotencyLayer;
pub use response::{IDEMPOTENCY_REPLAYED, StoredResponse};
pub use service::IdempotencyService;
#[cfg(feature = "redis")]
pub use store::RedisStore;
pub use store::{IdempotencyStore, MemoryStore};
