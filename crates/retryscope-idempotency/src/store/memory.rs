//! The in-memory store: one process, bounded in keys and in bytes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::{Claim, Completion, Entry, EntryState, IdempotencyStore, Ticket};
use crate::{Fingerprint, IdempotencyKey, StoreError};

/// Keys kept in memory, for a service that runs as one process.
///
/// Bounded: at most [`max_keys`](Self::with_limits) keys (default 10,000) and
/// [`max_bytes`](Self::with_limits) bytes of stored responses (default 64 MiB).
/// Expired keys are dropped when room is needed. When every key is live, a new
/// key is refused ([`Claim::Full`]: the layer answers 503 with `Retry-After`),
/// never a live one evicted — evicting would let its request run twice. A
/// response that would pass the byte bound is kept as
/// [`EntryState::NotReplayable`].
///
/// Clones share the keys. Expiry follows tokio's clock.
///
/// ```
/// use retryscope_idempotency::{IdempotencyLayer, MemoryStore};
///
/// let layer = IdempotencyLayer::new(MemoryStore::with_limits(1_000, 8 * 1024 * 1024));
/// # drop(layer);
/// ```
#[derive(Clone, Debug)]
pub struct MemoryStore {
    shared: Arc<Mutex<Keys>>,
}

#[derive(Debug)]
struct Keys {
    slots: HashMap<IdempotencyKey, Slot>,
    max_keys: usize,
    max_bytes: usize,
    bytes: usize,
    next_token: u64,
    /// Each key's mark ([`IdempotencyStore::raise_mark`]) and when it
    /// expires: apart from the slots, since a release must leave it. Bounded
    /// by `max_keys` too.
    marks: HashMap<IdempotencyKey, (u64, Instant)>,
}

#[derive(Debug)]
struct Slot {
    entry: Entry,
    token: u64,
    expires: Instant,
    /// When the claim was made: a claim that runs out is taken over at this age.
    claimed: Instant,
}

impl Slot {
    fn bytes(&self) -> usize {
        match &self.entry.state {
            EntryState::Completed(response) => response.size(),
            EntryState::InFlight | EntryState::NotReplayable => 0,
        }
    }
}

impl MemoryStore {
    /// The default number of keys.
    pub const DEFAULT_MAX_KEYS: usize = 10_000;
    /// The default bytes of stored responses.
    pub const DEFAULT_MAX_BYTES: usize = 64 * 1024 * 1024;

    /// A store of at most `max_keys` keys and `max_bytes` bytes of responses.
    pub fn with_limits(max_keys: usize, max_bytes: usize) -> Self {
        let keys = Keys {
            slots: HashMap::new(),
            max_keys,
            max_bytes,
            bytes: 0,
            next_token: 0,
            marks: HashMap::new(),
        };
        Self { shared: Arc::new(Mutex::new(keys)) }
    }

    /// The keys held now, expired ones included until they are dropped.
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        // A panic cannot leave `Keys` half-updated (no user code runs under the lock).
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_limits(Self::DEFAULT_MAX_KEYS, Self::DEFAULT_MAX_BYTES)
    }
}

impl Keys {
    fn remove(&mut self, key: &IdempotencyKey) {
        if let Some(slot) = self.slots.remove(key) {
            self.bytes -= slot.bytes();
        }
    }

    /// Drops expired keys; returns when the first live one expires.
    fn purge(&mut self, now: Instant) -> Option<Instant> {
        let mut freed = 0;
        self.slots.retain(|_, slot| {
            let live = slot.expires > now;
            if !live {
                freed += slot.bytes();
            }
            live
        });
        self.bytes -= freed;
        self.slots.values().map(|slot| slot.expires).min()
    }

    fn claim(&mut self, key: &IdempotencyKey, fingerprint: Fingerprint, lease: Duration) -> Claim {
        let now = Instant::now();
        let mut took_over = None;
        match self.slots.get(key) {
            Some(slot) if slot.expires > now => return Claim::Held(slot.entry.clone()),
            Some(slot) => {
                if slot.entry.state == EntryState::InFlight {
                    took_over = Some(now - slot.claimed);
                }
                self.remove(key);
            }
            None => {}
        }
        if self.slots.len() >= self.max_keys {
            let first_expiry = self.purge(now);
            if self.slots.len() >= self.max_keys {
                let retry_after =
                    first_expiry.map_or(Duration::ZERO, |at| at - now).max(Duration::from_secs(1));
                return Claim::Full { retry_after };
            }
        }
        self.next_token += 1;
        let token = self.next_token;
        let entry = Entry { fingerprint, state: EntryState::InFlight };
        self.slots.insert(key.clone(), Slot { entry, token, expires: now + lease, claimed: now });
        let ticket = Ticket::new(key.clone(), token);
        Claim::Claimed(match took_over {
            Some(age) => ticket.taking_over(age),
            None => ticket,
        })
    }

    fn complete(&mut self, ticket: &Ticket, completion: Completion, ttl: Duration) {
        let now = Instant::now();
        let Some(slot) = self.slots.get(ticket.key()) else { return };
        if slot.token != ticket.token() || slot.expires <= now {
            return;
        }
        let old = slot.bytes();
        let state = match completion {
            Completion::Response(response) if self.bytes - old + response.size() <= self.max_bytes => {
                EntryState::Completed(response)
            }
            Completion::Response(_) | Completion::NotReplayable => EntryState::NotReplayable,
        };
        if let Some(slot) = self.slots.get_mut(ticket.key()) {
            slot.entry.state = state;
            slot.expires = now + ttl;
            self.bytes = self.bytes - old + slot.bytes();
        }
    }

    fn renew(&mut self, ticket: &Ticket, lease: Duration) -> bool {
        let now = Instant::now();
        match self.slots.get_mut(ticket.key()) {
            Some(slot)
                if slot.token == ticket.token()
                    && slot.expires > now
                    && slot.entry.state == EntryState::InFlight =>
            {
                slot.expires = now + lease;
                true
            }
            _ => false,
        }
    }

    /// `None` when every mark is live and there is no room for another.
    fn raise_mark(&mut self, key: &IdempotencyKey, mark: u64, ttl: Duration) -> Option<Option<u64>> {
        let now = Instant::now();
        let before = self.marks.get(key).filter(|(_, expires)| *expires > now).map(|(held, _)| *held);
        if before.is_none() && !self.marks.contains_key(key) && self.marks.len() >= self.max_keys {
            self.marks.retain(|_, (_, expires)| *expires > now);
            if self.marks.len() >= self.max_keys {
                // Never drop a live mark to make room: that would let an old step run again.
                return None;
            }
        }
        self.marks.insert(key.clone(), (before.map_or(mark, |held| held.max(mark)), now + ttl));
        Some(before)
    }

    fn release(&mut self, ticket: &Ticket) {
        if self.slots.get(ticket.key()).is_some_and(|slot| slot.token == ticket.token()) {
            self.remove(ticket.key());
        }
    }
}

impl IdempotencyStore for MemoryStore {
    async fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        Ok(self.lock().claim(key, fingerprint, lease))
    }

    async fn complete(
        &self,
        ticket: &Ticket,
        completion: Completion,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.lock().complete(ticket, completion, ttl);
        Ok(())
    }

    async fn release(&self, ticket: &Ticket) -> Result<(), StoreError> {
        self.lock().release(ticket);
        Ok(())
    }

    async fn renew(&self, ticket: &Ticket, lease: Duration) -> Result<bool, StoreError> {
        Ok(self.lock().renew(ticket, lease))
    }

    async fn raise_mark(
        &self,
        key: &IdempotencyKey,
        mark: u64,
        ttl: Duration,
    ) -> Result<Option<u64>, StoreError> {
        self.lock()
            .raise_mark(key, mark, ttl)
            .ok_or_else(|| StoreError::new("raise_mark", "the store holds as many marks as it may"))
    }
}
