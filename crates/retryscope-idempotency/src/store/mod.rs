//! Where keys and their responses are kept: the [`IdempotencyStore`] trait,
//! an in-memory store and (feature `redis`) a Redis store.

use std::future::Future;
use std::time::Duration;

use crate::{Fingerprint, IdempotencyKey, StoreError, StoredResponse};

mod memory;
#[cfg(feature = "redis")]
mod record;
#[cfg(feature = "redis")]
mod redis;
mod renewal;

pub use memory::MemoryStore;
#[cfg(feature = "redis")]
pub use redis::RedisStore;
pub use renewal::renewing;

/// A store of idempotency keys. Each operation must be atomic for a key: of
/// any number of concurrent [`claim`](Self::claim)s of one free key, across
/// every process sharing the store, exactly one gets [`Claim::Claimed`].
///
/// What the layer does with a store, step by step:
///
/// ```
/// use std::time::Duration;
/// use retryscope_idempotency::store::{Claim, Completion, EntryState};
/// use retryscope_idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore, MemoryStore, StoredResponse};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::default();
/// let key = IdempotencyKey::parse(br#""order-7""#)?;
/// let print = Fingerprint::of(&http::Method::POST, "/orders", b"sku=7");
/// let Claim::Claimed(ticket) = store.claim(&key, print, Duration::from_secs(60)).await? else {
///     unreachable!("a free key")
/// };
/// // ... the request runs ...
/// let response = StoredResponse { status: http::StatusCode::CREATED, headers: vec![], body: "done".into() };
/// store.complete(&ticket, Completion::Response(response.clone()), Duration::from_secs(3600)).await?;
///
/// let Claim::Held(entry) = store.claim(&key, print, Duration::from_secs(60)).await? else {
///     unreachable!("the key is held")
/// };
/// assert_eq!(entry.state, EntryState::Completed(response));
/// # Ok(())
/// # }
/// ```
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Claims `key` for a request with `fingerprint` for at most `lease` (so a
    /// process that dies while running frees the key), or returns what the key
    /// already holds.
    fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Records how the claimed request ended, kept for `ttl` from now. Does
    /// nothing when the claim is no longer the ticket's (its lease ran out and
    /// another request claimed the key).
    fn complete(
        &self,
        ticket: &Ticket,
        completion: Completion,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Frees the key, when the claim is still the ticket's, so that a retry
    /// runs the request again.
    fn release(&self, ticket: &Ticket) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Extends the claim to `lease` from now, when it is still the ticket's and
    /// in flight: `true`. `false` when it is not (its lease ran out; the key
    /// may since have been claimed again), and then nothing changes. A job
    /// worker renews its claims while their handlers run, so that a claim can
    /// be short and a crashed worker's job is taken over soon.
    fn renew(
        &self,
        ticket: &Ticket,
        lease: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Raises the mark kept beside `key` (apart from its claim: a claim's
    /// release leaves it) to `mark` when it is lower or absent, keeps it for
    /// `ttl` from now either way, and returns the mark it held before (`None`:
    /// none, or it had expired). Atomic for a key, like a claim: of concurrent
    /// raises, each sees the highest mark of those before it, so a caller
    /// whose mark is below the one returned knows a later step was already
    /// recorded. A job worker marks each job key with the highest attempt it
    /// ran or scheduled, so that a redelivered older attempt is dropped.
    fn raise_mark(
        &self,
        key: &IdempotencyKey,
        mark: u64,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send;
}

/// What a [`claim`](IdempotencyStore::claim) found.
#[derive(Debug)]
pub enum Claim {
    /// The key was free and is now the caller's: run the request.
    Claimed(Ticket),
    /// The key is held.
    Held(Entry),
    /// The store holds as many keys as it may; `retry_after` is when the
    /// first of them expires (at least a second).
    Full {
        /// How long until room is likely.
        retry_after: Duration,
    },
}

/// What a held key holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The fingerprint of the request that claimed it.
    pub fingerprint: Fingerprint,
    /// How far that request got.
    pub state: EntryState,
}

/// How far the request that claimed a key got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// Still running (or its process died, until the lease ends).
    InFlight,
    /// Completed; its response is kept.
    Completed(StoredResponse),
    /// Completed, with a response too large to keep: it is not run again, and
    /// not replayed.
    NotReplayable,
}

/// How a claimed request ended, for [`complete`](IdempotencyStore::complete).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// With this response, to replay.
    Response(StoredResponse),
    /// With a response too large to keep.
    NotReplayable,
}

/// Proof of a claim: the key and a token only this claim holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ticket {
    key: IdempotencyKey,
    token: u64,
    took_over: Option<Duration>,
}

impl Ticket {
    /// A ticket for `key`; `token` tells this claim from a later one of the
    /// same key (a store picks it, unique per claim).
    pub const fn new(key: IdempotencyKey, token: u64) -> Self {
        Self { key, token, took_over: None }
    }

    /// The same ticket, saying that it took the key over from a claim of
    /// `age` (from its claim to now) whose lease ran out: neither completed
    /// nor released, its process died or stalled.
    #[must_use]
    pub const fn taking_over(mut self, age: Duration) -> Self {
        self.took_over = Some(age);
        self
    }

    /// When this claim took the key over from one whose lease ran out (its
    /// process died or stalled before completing or releasing it): how old
    /// that claim was. A store that cannot tell says `None`.
    pub const fn took_over(&self) -> Option<Duration> {
        self.took_over
    }

    /// The claimed key.
    pub const fn key(&self) -> &IdempotencyKey {
        &self.key
    }

    /// The claim's token.
    pub const fn token(&self) -> u64 {
        self.token
    }
}
