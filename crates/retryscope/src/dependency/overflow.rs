//! The guards of dependencies beyond the process's label bound: a set of
//! their own for each, at most [`MAX_OVERFLOW_GUARDS`] per registry, the
//! least recently used forgotten first.
//!
//! Their label is [`OVERFLOW`](super::OVERFLOW), as the label table says;
//! their state is not shared. One `_OTHER` set for every such host made one
//! host's `429` hold, and one host's failures open the breaker of, every
//! other host past the bound. Kept per host instead, the state stays bounded
//! by this table: a guard set with a budget, a breaker and a pacer holds
//! about 3.3 KB (4.2 KB with a percentile hedge's latencies; measured with a
//! counting allocator over 1,000 sets), so a full table is about 3–4 MB per
//! registry, as much as its 1,000 named sets can hold.
//!
//! A host whose set was evicted gets a fresh one when it comes back: its
//! breaker closed, its pacer without a gate, its budget full, its hedge delay
//! unlearned. A call that holds the evicted set finishes with it.

use super::value::Dependency;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// How many guard sets of dependencies beyond the label bound one registry
/// keeps (one per host, then the least recently used is evicted).
pub(crate) const MAX_OVERFLOW_GUARDS: usize = 1_000;

/// The guard sets of the hosts beyond the label bound, by their own name.
pub(crate) struct OverflowGuards {
    sets: RwLock<HashMap<Arc<str>, Entry>>,
    /// The clock of use: every lookup takes the next tick, so the set with
    /// the smallest stamp is the least recently used.
    ticks: AtomicU64,
    capacity: usize,
}

struct Entry {
    guards: Arc<Dependency>,
    /// The tick of the last lookup that found (or made) this set. An atomic,
    /// so that a hit needs only the read lock.
    used: AtomicU64,
}

impl OverflowGuards {
    /// A table of at most `capacity` sets (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self { sets: RwLock::default(), ticks: AtomicU64::new(0), capacity: capacity.max(1) }
    }

    /// The set of `dependency`, if it has one now; marks it used.
    pub(crate) fn find(&self, dependency: &str) -> Option<Arc<Dependency>> {
        // A poisoned lock only means a thread panicked while inserting; the
        // map itself is still consistent.
        let sets = self.sets.read().unwrap_or_else(PoisonError::into_inner);
        let entry = sets.get(dependency)?;
        entry.used.store(self.tick(), Ordering::Relaxed);
        Some(Arc::clone(&entry.guards))
    }

    /// The set of `dependency`, made by `make` if it has none, evicting the
    /// least recently used set when the table is full. The eviction walks the
    /// table (at most [`MAX_OVERFLOW_GUARDS`] stamps): only a host not seen
    /// lately pays it, on a lookup that builds a guard set anyway.
    pub(crate) fn get_or_make(&self, dependency: &str, make: impl FnOnce() -> Dependency) -> Arc<Dependency> {
        if let Some(found) = self.find(dependency) {
            return found;
        }
        // Declared before the lock, so dropped after it: the evicted guards
        // (a user's budget among them) are not dropped under the lock.
        let _evicted: Option<Entry>;
        let mut sets = self.sets.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = sets.get(dependency) {
            entry.used.store(self.tick(), Ordering::Relaxed);
            return Arc::clone(&entry.guards);
        }
        if sets.len() >= self.capacity {
            let oldest = sets
                .iter()
                .min_by_key(|(_, entry)| entry.used.load(Ordering::Relaxed))
                .map(|(name, _)| Arc::clone(name));
            _evicted = oldest.and_then(|name| sets.remove(&name));
        }
        let guards = Arc::new(make());
        let entry = Entry { guards: Arc::clone(&guards), used: AtomicU64::new(self.tick()) };
        sets.insert(Arc::from(dependency), entry);
        guards
    }

    /// Every set kept now.
    pub(crate) fn all(&self) -> Vec<Arc<Dependency>> {
        let sets = self.sets.read().unwrap_or_else(PoisonError::into_inner);
        sets.values().map(|entry| Arc::clone(&entry.guards)).collect()
    }

    /// How many sets are kept now.
    pub(crate) fn len(&self) -> usize {
        self.sets.read().unwrap_or_else(PoisonError::into_inner).len()
    }

    fn tick(&self) -> u64 {
        self.ticks.fetch_add(1, Ordering::Relaxed)
    }
}
