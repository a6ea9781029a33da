//! The Redis store: keys shared by every instance of a service, with Redis's
//! own expiry. Needs Redis 7.0 or later (`SET … NX GET`).

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::record::{self, CLAIM_PREFIX_LEN};
use super::{Claim, Completion, IdempotencyStore, Ticket};
use crate::{Fingerprint, IdempotencyKey, StoreError};

/// Claims KEYS[1] when free (`SET NX GET PX`: ARGV[1] the in-flight record,
/// ARGV[2] the lease in milliseconds) and notes when in KEYS[2] (Redis's own
/// clock, kept ARGV[3] milliseconds), which a completion or release deletes:
/// a note left from an earlier claim says that claim ran out, and how old it
/// was. `{1, record}` when held; `{0}` or `{0, age in ms}` when claimed.
const CLAIM: &str = r"
local held = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])
if held then return {1, held} end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local previous = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[2], now, 'PX', ARGV[3])
if previous then return {0, now - tonumber(previous)} end
return {0}
";

/// Replaces an in-flight record by a completed one, only while the claim is
/// still the ticket's: ARGV[1] the claim's prefix, ARGV[2] the completed
/// record's first bytes, ARGV[3] what follows the fingerprint, ARGV[4] the ttl
/// in milliseconds.
const COMPLETE: &str = r"
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 10) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2] .. string.sub(current, 3, 42) .. ARGV[3], 'PX', ARGV[4])
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
";

/// Deletes an in-flight record, only while the claim is the ticket's.
const RELEASE: &str = r"
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 10) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// Extends an in-flight record's expiry, only while the claim is the
/// ticket's: ARGV[1] the claim's prefix, ARGV[2] the lease in milliseconds,
/// ARGV[3] its note's (KEYS[2]) in milliseconds.
const RENEW: &str = r"
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 10) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Raises the mark in KEYS[1] to ARGV[1] (20 digits, zero-padded: string
/// order is number order, and Lua's doubles would round a large u64) when
/// lower or absent, and keeps it ARGV[2] milliseconds; returns the mark held
/// before, or false.
const RAISE_MARK: &str = r"
local held = redis.call('GET', KEYS[1])
local mark = ARGV[1]
if held and held > mark then mark = held end
redis.call('SET', KEYS[1], mark, 'PX', ARGV[2])
return held
";

/// How long a claim's note outlives its lease: a claim that ran out is
/// told as taken over when the key is claimed again within this.
const NOTE_LINGER: Duration = Duration::from_secs(3600);

/// How long one Redis command or connection attempt may take.
const REDIS_TIMEOUT: Duration = Duration::from_secs(2);

/// Keys kept in Redis, shared by every process of a service.
///
/// A claim is one `SET key record NX GET PX lease` (atomic: one claimant
/// wins, the others read what it holds), in a script that also notes when
/// (a second key, deleted on completion or release, so that a claim that
/// ran out is told as [taken over](Ticket::took_over) with its age); a completion and a release are
/// scripts that act only while the claim is still the ticket's, and so is a
/// renewal (`PEXPIRE`); expiry is
/// Redis's own (`PX`). Records are a compact binary format (status, kept
/// headers, body). Keys are named `PREFIX + key`, the prefix
/// `retryscope:idempotency:` unless [`prefix`](Self::prefix) says otherwise.
///
/// Bounded like the memory store by Redis's own `maxmemory`: configure it
/// with a `volatile-*` eviction policy or `noeviction` (then a full Redis
/// answers an error, and the layer 503).
///
/// ```no_run
/// use retryscope_idempotency::{IdempotencyLayer, RedisStore};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let layer = IdempotencyLayer::new(RedisStore::connect(client).await?);
/// # drop(layer);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    prefix: String,
    claim: redis::Script,
    complete: redis::Script,
    release: redis::Script,
    renew: redis::Script,
    raise_mark: redis::Script,
}

impl RedisStore {
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &str = "retryscope:idempotency:";

    /// Connects to the Redis of `client` (once now, and again whenever the
    /// connection is lost); an error when it cannot be reached.
    pub async fn connect(client: redis::Client) -> Result<Self, StoreError> {
        let connection = ConnectionManager::new_with_config(client, config())
            .await
            .map_err(|error| StoreError::new("connect", error))?;
        Ok(Self::with_connection(connection))
    }

    /// A store that connects on its first use (a service can start while
    /// Redis is still coming up; until then the layer answers 503). Must be
    /// called inside a tokio runtime.
    pub fn new(client: redis::Client) -> Result<Self, StoreError> {
        let connection = ConnectionManager::new_lazy_with_config(client, config())
            .map_err(|error| StoreError::new("connect", error))?;
        Ok(Self::with_connection(connection))
    }

    fn with_connection(connection: ConnectionManager) -> Self {
        Self {
            connection,
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            claim: redis::Script::new(CLAIM),
            complete: redis::Script::new(COMPLETE),
            release: redis::Script::new(RELEASE),
            renew: redis::Script::new(RENEW),
            raise_mark: redis::Script::new(RAISE_MARK),
        }
    }

    /// Names keys `prefix + key` (to keep services or tenants apart).
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    fn redis_key(&self, key: &IdempotencyKey) -> String {
        format!("{}{}", self.prefix, key.as_str())
    }

    /// Where a claim notes when it was made. A key is printable ASCII, so
    /// the `\u{1}` keeps notes apart from every key.
    fn note_key(&self, key: &IdempotencyKey) -> String {
        format!("{}\u{1}claimed:{}", self.prefix, key.as_str())
    }

    /// Where a key's mark is kept, apart from its record and note.
    fn mark_key(&self, key: &IdempotencyKey) -> String {
        format!("{}\u{1}mark:{}", self.prefix, key.as_str())
    }
}

fn config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(REDIS_TIMEOUT))
        .set_connection_timeout(Some(REDIS_TIMEOUT))
        .set_number_of_retries(2)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

impl IdempotencyStore for RedisStore {
    async fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let token: u64 = rand::random();
        let mut connection = self.connection.clone();
        let answer: Vec<redis::Value> = self
            .claim
            .key(self.redis_key(key))
            .key(self.note_key(key))
            .arg(record::in_flight(token, fingerprint))
            .arg(millis(lease))
            .arg(millis(lease.saturating_add(NOTE_LINGER)))
            .invoke_async(&mut connection)
            .await
            .map_err(|error| StoreError::new("claim", error))?;
        match answer.as_slice() {
            [redis::Value::Int(1), redis::Value::BulkString(bytes)] => {
                record::decode(bytes).map(Claim::Held).map_err(|error| StoreError::new("claim", error))
            }
            [redis::Value::Int(0), rest @ ..] => {
                let ticket = Ticket::new(key.clone(), token);
                Ok(Claim::Claimed(match rest {
                    [redis::Value::Int(age)] => {
                        ticket.taking_over(Duration::from_millis(u64::try_from(*age).unwrap_or(0)))
                    }
                    _ => ticket,
                }))
            }
            _ => Err(StoreError::new("claim", "an unexpected answer from the claim script")),
        }
    }

    async fn complete(
        &self,
        ticket: &Ticket,
        completion: Completion,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let (head, tail) = record::completion_parts(&completion);
        let prefix: [u8; CLAIM_PREFIX_LEN] = record::claim_prefix(ticket.token());
        let mut connection = self.connection.clone();
        let _: i64 = self
            .complete
            .key(self.redis_key(ticket.key()))
            .key(self.note_key(ticket.key()))
            .arg(&prefix[..])
            .arg(&head[..])
            .arg(tail)
            .arg(millis(ttl))
            .invoke_async(&mut connection)
            .await
            .map_err(|error| StoreError::new("complete", error))?;
        Ok(())
    }

    async fn release(&self, ticket: &Ticket) -> Result<(), StoreError> {
        let prefix = record::claim_prefix(ticket.token());
        let mut connection = self.connection.clone();
        let _: i64 = self
            .release
            .key(self.redis_key(ticket.key()))
            .key(self.note_key(ticket.key()))
            .arg(&prefix[..])
            .invoke_async(&mut connection)
            .await
            .map_err(|error| StoreError::new("release", error))?;
        Ok(())
    }

    async fn renew(&self, ticket: &Ticket, lease: Duration) -> Result<bool, StoreError> {
        let prefix = record::claim_prefix(ticket.token());
        let mut connection = self.connection.clone();
        let renewed: i64 = self
            .renew
            .key(self.redis_key(ticket.key()))
            .key(self.note_key(ticket.key()))
            .arg(&prefix[..])
            .arg(millis(lease))
            .arg(millis(lease.saturating_add(NOTE_LINGER)))
            .invoke_async(&mut connection)
            .await
            .map_err(|error| StoreError::new("renew", error))?;
        Ok(renewed == 1)
    }

    async fn raise_mark(
        &self,
        key: &IdempotencyKey,
        mark: u64,
        ttl: Duration,
    ) -> Result<Option<u64>, StoreError> {
        let mut connection = self.connection.clone();
        let before: Option<String> = self
            .raise_mark
            .key(self.mark_key(key))
            .arg(format!("{mark:020}"))
            .arg(millis(ttl))
            .invoke_async(&mut connection)
            .await
            .map_err(|error| StoreError::new("raise_mark", error))?;
        before
            .map(|held| held.parse::<u64>())
            .transpose()
            .map_err(|_| StoreError::new("raise_mark", "a mark that is not a number"))
    }
}
