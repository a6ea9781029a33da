//! The pace share over Redis: gates pushed through pub/sub and kept in keys
//! that expire with them, the live replicas counted in a sorted set.

use crate::{QuotaName, ShareError};
use futures_util::StreamExt;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use retryscope::budget::{BudgetShare, SharedBudget};
use retryscope::pace::{HoldSource, PaceShare, SharedPacer};
use retryscope_otel::names;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

mod budget;
mod builder;
mod tasks;
pub use builder::RedisPaceShareBuilder;
use tasks::{heartbeat, read_gate, subscriber};

/// The default deadline of a heartbeat, 50 ms. A heartbeat is off every
/// call's path, so its deadline decides only when Redis counts as gone:
/// three late in a row, 200 ms apart, so a replica paces alone about
/// 600 ms + 3 × the deadline after Redis's last timely answer to a heartbeat
/// (750 ms with this default, under a second in `tests/slow_redis.rs`; 3.6 s
/// with the largest, [`MAX_TIMEOUT`]), and as soon as its subscriber
/// connection is seen to drop — or to have heard nothing, not even its own
/// heartbeats' echo, for 2 s (a connection a NAT dropped silently), when it
/// is replaced. 50 ms keeps a busy or cross-zone Redis
/// (a few milliseconds) shared; it was 2 ms, which a busy machine's Redis
/// missed, and the fleet then paced alone while Redis was up.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// The longest deadline [`RedisPaceShareBuilder::timeout`] accepts, and the
/// one of a gate's publication or read.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(1);
/// How many dependencies a share keeps pacers for; gates of further ones are
/// neither received nor published.
pub const MAX_DEPENDENCIES: usize = 1024;
/// How many pacers of one dependency a share keeps (one per client that calls
/// it; pacers dropped are forgotten).
const MAX_PACERS_PER_DEPENDENCY: usize = 64;
/// How many gate publications may be under way at once; more are dropped
/// (the next throttling answer publishes its gate again).
const MAX_PUBLISHING: usize = 32;
/// How often a replica says it is alive, and reads how many are.
const HEARTBEAT: Duration = Duration::from_millis(200);
/// A replica not heard from for this long is no longer counted: a crashed
/// replica's part of the quota returns to the others within it.
const REPLICA_EXPIRY: Duration = Duration::from_secs(1);
/// Failed heartbeats in a row after which the replica paces alone: one slow
/// answer on a busy machine is no outage.
const FAILURES_TO_FALL_BACK: u32 = 3;
/// The subscriber's reconnection backoff: from the first to the last, doubling.
const RECONNECT: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));
/// How long the subscriber connection may hear nothing, not even the echo
/// of this replica's own heartbeats (every [`HEARTBEAT`]), before it is
/// taken for dead and replaced: a connection dropped without a FIN or RST
/// (a NAT's or load balancer's idle timeout, a failover) never ends on its
/// own, and would leave the replica counting itself shared while it hears
/// no gate. Ten heartbeats: a busy Redis that answers late still echoes.
const SILENCE: Duration = Duration::from_secs(2);

/// Closes the gate of KEYS[1] for ARGV[1] ms unless a later one is kept,
/// and pushes it to the fleet on channel ARGV[2] as ARGV[3] .. "\n" .. ms ..
/// "\n" .. ARGV[4] (the replica, the wait, the dependency). The end is kept
/// in Redis's own time, so that replicas' clocks never meet; the key expires
/// with the gate.
const CLOSE_GATE: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local wait = tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current >= now + wait then return 0 end
redis.call('SET', KEYS[1], now + wait, 'PX', wait)
redis.call('PUBLISH', ARGV[2], ARGV[3] .. '\n' .. wait .. '\n' .. ARGV[4])
return 1
";

/// Counts this replica (ARGV[1]) alive in the sorted set KEYS[1], forgets
/// those not heard from for ARGV[2] ms, echoes on this replica's own channel
/// ARGV[3] (what tells its subscriber connection it still hears: see
/// [`SILENCE`]), and answers how many are left. The set expires when the
/// whole fleet is gone.
const HEARTBEAT_SCRIPT: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], '')
return redis.call('ZCARD', KEYS[1])
";

/// A [`PaceShare`] over Redis, shared by every replica that names the same
/// [`QuotaName`]. See the [crate docs](crate) for the design and
/// [`builder`](Self::builder) to make one.
pub struct RedisPaceShare {
    state: Arc<State>,
}

struct State {
    quota: QuotaName,
    /// This process, among the replicas (random).
    replica: String,
    timeout: Duration,
    connection: ConnectionManager,
    handle: Handle,
    close_gate: redis::Script,
    pacers: Mutex<HashMap<Arc<str>, Vec<SharedPacer>>>,
    /// The budgets whose floor this share divides, by dependency: told the
    /// live replicas at every heartbeat, from the background.
    budgets: Mutex<HashMap<Arc<str>, Vec<SharedBudget>>>,
    /// The gates the fleet pushed, by dependency, until they open: what a
    /// pacer made after the push learns at once, as it is attached, before
    /// its first call (a dependency's pacer is made on its first call).
    gates: Mutex<HashMap<Arc<str>, Instant>>,
    /// The live replicas, as last read; kept while Redis does not answer
    /// (see [`RedisPaceShare::live_replicas`]); 1 until it first answers.
    replicas: AtomicU32,
    heartbeat_ok: AtomicBool,
    subscribed: AtomicBool,
    /// Whether the pace is shared now: both of the above.
    shared: AtomicBool,
    publishing: AtomicUsize,
    fallbacks: Option<Counter<u64>>,
    fallbacks_seen: AtomicU32,
}

impl RedisPaceShare {
    /// A share on the Redis of `client`, for the quota the operator names
    /// `quota` (the API key's identity, never the key: see [`QuotaName`]).
    pub fn builder(client: redis::Client, quota: &str) -> RedisPaceShareBuilder {
        RedisPaceShareBuilder { client, quota: quota.to_owned(), timeout: DEFAULT_TIMEOUT, meter: None }
    }

    /// Whether the pace is shared now: `false` while Redis does not answer
    /// (gates are then not shared; quotas stay divided by the fleet size
    /// last read, [`live_replicas`](Self::live_replicas)) and before it first
    /// answered.
    pub fn is_shared(&self) -> bool {
        self.state.shared.load(Ordering::Acquire)
    }

    /// How many replicas spend the quota, as last read from Redis; 1 until
    /// Redis first answered.
    ///
    /// While Redis does not answer, the count last read is kept, and quotas
    /// are still divided by it: the replicas are most likely still there,
    /// only the store is gone, and a replica that paced by the whole quota
    /// would spend it N times over with the others (measured: with the
    /// count dropped to 1, an 8-replica fleet went from 0 to ~400 429s per
    /// 1,000 within 4 s of Redis stopping). If the fleet shrinks while Redis
    /// is down, the quota is under-spent until Redis returns, the safe side;
    /// a replica that starts while Redis is down never read a count and
    /// paces alone.
    pub fn live_replicas(&self) -> u32 {
        self.state.replicas.load(Ordering::Acquire).max(1)
    }

    /// How many times this share fell back to local pacing.
    pub fn fallbacks(&self) -> u32 {
        self.state.fallbacks_seen.load(Ordering::Relaxed)
    }

    /// The quota's name.
    pub fn quota(&self) -> &QuotaName {
        &self.state.quota
    }
}

impl State {
    fn gate_key(&self, dependency: &str) -> String {
        format!("retryscope:pace:{}:{dependency}", self.quota)
    }

    fn channel(&self) -> String {
        format!("retryscope:pace:{}", self.quota)
    }

    /// This replica's own channel, on which its heartbeats echo.
    fn echo_channel(&self) -> String {
        format!("retryscope:pace:{}:echo:{}", self.quota, self.replica)
    }

    fn replicas_key(&self) -> String {
        format!("retryscope:fleet:{}", self.quota)
    }

    fn pacers(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Vec<SharedPacer>>> {
        // Poisoned only by a panic mid-insert; the map stays consistent.
        self.pacers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn budgets(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Vec<SharedBudget>>> {
        // Poisoned only by a panic mid-insert; the map stays consistent.
        self.budgets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells `budget` which part of its floor it keeps now: `1/N` of it
    /// while N replicas share the quota — N as last read, kept while Redis
    /// does not answer, as for quotas (see [`RedisPaceShare::live_replicas`]):
    /// the replicas outlive their store, and N whole floors against a
    /// dependency that is down is what the share is for. `false` when the
    /// budget is gone.
    fn tell(&self, budget: &SharedBudget) -> bool {
        budget.divide_floor(self.replicas.load(Ordering::Acquire).max(1))
    }

    /// Tells every budget here which part of its floor it keeps, forgetting
    /// those gone. A few atomic stores per budget, at every heartbeat.
    fn tell_budgets(&self) {
        let mut budgets = self.budgets();
        budgets.retain(|_, list| {
            list.retain(|budget| self.tell(budget));
            !list.is_empty()
        });
    }

    /// A heartbeat, within the configured deadline; `None` when it failed
    /// or took longer: past the deadline, Redis counts as not answering.
    async fn within<T>(&self, operation: impl Future<Output = redis::RedisResult<T>>) -> Option<T> {
        tokio::time::timeout(self.timeout, operation).await.ok()?.ok()
    }

    /// A gate's publication or read, within [`MAX_TIMEOUT`]: it is off every
    /// call's path, and a gate that reaches the fleet a few milliseconds
    /// late still holds it, where one cut at the heartbeat's deadline would
    /// not (a busy machine's Redis answered in 50 ms, and every gate
    /// published then was lost). Bounded all the same: by this deadline and
    /// by [`MAX_PUBLISHING`].
    async fn delivered<T>(operation: impl Future<Output = redis::RedisResult<T>>) -> Option<T> {
        tokio::time::timeout(MAX_TIMEOUT, operation).await.ok()?.ok()
    }

    /// Gives a gate another replica learned to this process's pacers of
    /// `dependency`, forgetting those gone, and keeps it for pacers made
    /// later.
    fn deliver(&self, dependency: &str, wait: Duration) {
        self.keep_gate(dependency, wait);
        let mut pacers = self.pacers();
        if let Some(list) = pacers.get_mut(dependency) {
            list.retain(|pacer| pacer.learn_gate(wait));
        }
    }

    /// Keeps a pushed gate until it opens; bounded by [`MAX_DEPENDENCIES`]
    /// (gates that opened are dropped first; beyond that, new ones are not
    /// kept, and reach only pacers that exist).
    fn keep_gate(&self, dependency: &str, wait: Duration) {
        let now = Instant::now();
        let Some(until) = now.checked_add(wait) else { return };
        let mut gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
        if !gates.contains_key(dependency) && gates.len() >= MAX_DEPENDENCIES {
            gates.retain(|_, until| *until > now);
            if gates.len() >= MAX_DEPENDENCIES {
                return;
            }
        }
        let kept = gates.entry(dependency.into()).or_insert(until);
        *kept = (*kept).max(until);
    }

    /// The wait left of the gate kept for `dependency`, if one still stands.
    fn kept_gate(&self, dependency: &str) -> Option<Duration> {
        let gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
        let left = gates.get(dependency)?.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Whether sharing holds now, logged and counted once per change.
    fn settle(&self) {
        let shared = self.heartbeat_ok.load(Ordering::Acquire) && self.subscribed.load(Ordering::Acquire);
        let was = self.shared.swap(shared, Ordering::AcqRel);
        self.tell_budgets();
        match (was, shared) {
            (false, true) => tracing::info!(quota = %self.quota, "fleet pacing shared through Redis"),
            (true, false) => {
                self.fallbacks_seen.fetch_add(1, Ordering::Relaxed);
                if let Some(counter) = &self.fallbacks {
                    counter.add(1, &[]);
                }
                tracing::warn!(quota = %self.quota, "Redis does not answer: gates are not shared, quotas and budget floors stay divided by the last fleet size, until it does");
            }
            _ => {}
        }
    }
}

impl PaceShare for RedisPaceShare {
    fn publish_gate(&self, dependency: &str, wait: Duration, _source: HoldSource) {
        let state = &self.state;
        let Ok(millis) = u64::try_from(wait.as_millis()) else { return };
        if millis == 0 || !state.pacers().contains_key(dependency) {
            return;
        }
        // Bounded: a storm of 429s publishes at most this many at once.
        if state.publishing.fetch_add(1, Ordering::AcqRel) >= MAX_PUBLISHING {
            state.publishing.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let (key, dependency) = (state.gate_key(dependency), dependency.to_owned());
        let weak = Arc::downgrade(state);
        state.handle.spawn(async move {
            let Some(state) = weak.upgrade() else { return };
            let mut connection = state.connection.clone();
            let mut invocation = state.close_gate.key(key);
            invocation.arg(millis).arg(state.channel()).arg(&state.replica).arg(dependency);
            let _: Option<i64> = State::delivered(invocation.invoke_async(&mut connection)).await;
            state.publishing.fetch_sub(1, Ordering::AcqRel);
        });
    }

    fn replicas(&self, _dependency: &str) -> u32 {
        // Kept while Redis is down: see `live_replicas`.
        self.live_replicas()
    }

    fn attach(&self, dependency: &str, pacer: SharedPacer) {
        let state = &self.state;
        {
            let mut pacers = state.pacers();
            if !pacers.contains_key(dependency) && pacers.len() >= MAX_DEPENDENCIES {
                // Full: the dependencies whose pacers are all gone make room
                // first, so that a process that cycles through names keeps
                // sharing the ones it uses now.
                pacers.retain(|_, list| {
                    list.retain(SharedPacer::is_alive);
                    !list.is_empty()
                });
                if pacers.len() >= MAX_DEPENDENCIES {
                    return;
                }
            }
            let list = pacers.entry(dependency.into()).or_default();
            list.retain(SharedPacer::is_alive);
            if list.len() >= MAX_PACERS_PER_DEPENDENCY {
                return;
            }
            // A gate pushed before this pacer existed holds its first call.
            if let Some(wait) = state.kept_gate(dependency) {
                pacer.learn_gate(wait);
            }
            list.push(pacer);
        }
        // A gate in force now that this process did not hear pushed (it
        // started, or reconnected, after it): read once.
        let (key, dependency, weak) =
            (state.gate_key(dependency), dependency.to_owned(), Arc::downgrade(state));
        state.handle.spawn(async move {
            if let Some(state) = weak.upgrade() {
                read_gate(&state, &key, &dependency).await;
            }
        });
    }
}

/// A published gate: the replica, the wait and the dependency; `None` for a
/// message this version did not write.
fn parse(payload: &str) -> Option<(&str, Duration, &str)> {
    let mut parts = payload.splitn(3, '\n');
    let replica = parts.next()?;
    let millis: u64 = parts.next()?.parse().ok()?;
    let dependency = parts.next()?;
    Some((replica, Duration::from_millis(millis), dependency))
}

/// `retryscope.pace.shared` for every dependency with a pacer here, and
/// `retryscope.budget.shared` for every dependency with a budget here.
fn register_gauge(meter: &Meter, state: Weak<State>) {
    shared_gauge(
        meter,
        names::BUDGET_SHARED,
        "Whether a dependency's retry budget floor is shared with the fleet through Redis (1) or divided by the fleet size last read while Redis does not answer (0)",
        state.clone(),
        |state| state.budgets().keys().cloned().collect(),
    );
    shared_gauge(
        meter,
        names::PACE_SHARED,
        "Whether a dependency's pace is shared with the fleet through Redis (1) or its gates are not, while Redis does not answer (0)",
        state,
        |state| state.pacers().keys().cloned().collect(),
    );
}

/// One gauge of whether the share holds now, observed for each of the
/// dependencies `of` lists.
fn shared_gauge(
    meter: &Meter,
    name: &'static str,
    description: &'static str,
    state: Weak<State>,
    of: fn(&State) -> Vec<Arc<str>>,
) {
    meter
        .u64_observable_gauge(name)
        .with_unit(names::UNIT_STATE)
        .with_description(description)
        .with_callback(move |observer| {
            let Some(state) = state.upgrade() else { return };
            let shared = u64::from(state.shared.load(Ordering::Acquire));
            // Collected first: the lock is not held while observing.
            for dependency in of(&state) {
                observer.observe(shared, &[KeyValue::new(names::DEPENDENCY, dependency.to_string())]);
            }
        })
        .build();
}

impl fmt::Debug for RedisPaceShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisPaceShare")
            .field("quota", &self.state.quota)
            .field("timeout", &self.state.timeout)
            .field("shared", &self.is_shared())
            .field("replicas", &self.live_replicas())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_gate_is_read_back_and_anything_else_is_ignored() {
        assert_eq!(parse("ab12\n1500\napi:443"), Some(("ab12", Duration::from_millis(1500), "api:443")));
        assert_eq!(parse("ab12\nsoon\napi"), None);
        assert_eq!(parse("ab12\n15"), None);
    }

    #[tokio::test]
    async fn deadlines_out_of_range_are_refused() {
        let client = redis::Client::open("redis://127.0.0.1:1/").expect("a valid URL");
        for timeout in [Duration::ZERO, Duration::from_millis(1001)] {
            let error = RedisPaceShare::builder(client.clone(), "api").timeout(timeout).build().err();
            assert!(matches!(error, Some(ShareError::Timeout(t)) if t == timeout), "{error:?}");
        }
        assert!(RedisPaceShare::builder(client.clone(), "sk-abc").build().is_err());
        assert!(RedisPaceShare::builder(client, "api").timeout(MAX_TIMEOUT).build().is_ok());
    }

    #[test]
    fn outside_a_runtime_the_share_is_refused() {
        let client = redis::Client::open("redis://127.0.0.1:1/").expect("a valid URL");
        assert!(matches!(RedisPaceShare::builder(client, "api").build(), Err(ShareError::NoRuntime)));
    }
}
