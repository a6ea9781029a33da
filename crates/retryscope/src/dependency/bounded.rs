//! Dependency names from traffic, bounded.
//!
//! Integrations name the dependency after the server they call
//! ([`dependency_name`]: `server.address`, with `:port` when the port is not the
//! scheme's default). Those names come from traffic — a crawler or per-tenant
//! subdomains can produce any number of them — so every label value goes
//! through one process-wide table that admits at most [`MAX_DEPENDENCIES`]
//! names and folds the rest into [`OVERFLOW`]. The guards of a folded name are
//! still its own, bounded by their registry
//! ([`Dependencies`](super::Dependencies)). Operation names get a
//! table of their own with the same bound.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

/// How many distinct dependency names (and, separately, operation names) one
/// process reports. Further names are reported as [`OVERFLOW`].
pub const MAX_DEPENDENCIES: usize = 1_000;

/// The name that stands for every dependency (or operation) beyond
/// [`MAX_DEPENDENCIES`], as the semantic conventions spell "other".
pub const OVERFLOW: &str = "_OTHER";

/// The dependency name of a server: `host`, or `host:port` when `port` is not
/// `default_port`, the scheme's own (80 for `http`, 443 for `https`). Two
/// services on one host are two dependencies; the default port adds nothing.
///
/// ```
/// use retryscope::dependency::dependency_name;
///
/// assert_eq!(dependency_name("payments.internal", Some(443), Some(443)), "payments.internal");
/// assert_eq!(dependency_name("127.0.0.1", Some(8080), Some(80)), "127.0.0.1:8080");
/// assert_eq!(dependency_name("[::1]", Some(50051), None), "[::1]:50051");
/// assert_eq!(dependency_name("inventory", None, Some(80)), "inventory");
/// ```
pub fn dependency_name(host: &str, port: Option<u16>, default_port: Option<u16>) -> String {
    match port {
        Some(port) if Some(port) != default_port => format!("{host}:{port}"),
        _ => host.to_owned(),
    }
}

/// `name` as a dependency label: the name itself while fewer than
/// [`MAX_DEPENDENCIES`] distinct names have been seen by this process (or it was
/// seen before), else [`OVERFLOW`]. Names are interned: a name seen before costs
/// a shared lookup and no allocation.
///
/// ```
/// let label = retryscope::dependency::bounded_dependency("inventory");
/// assert_eq!(&*label, "inventory");
/// ```
pub fn bounded_dependency(name: &str) -> Arc<str> {
    static DEPENDENCIES: LazyLock<NameTable> = LazyLock::new(|| NameTable::new(MAX_DEPENDENCIES));
    DEPENDENCIES.intern(name)
}

/// A set of at most `limit` names; the rest are [`OVERFLOW`]: what each
/// bounded label above is kept in, for a label of another kind (a server's
/// routes, a job's subject).
pub struct NameTable {
    names: RwLock<HashSet<Arc<str>>>,
    overflow: Arc<str>,
    limit: usize,
}

impl NameTable {
    /// A table that admits `limit` names.
    pub fn new(limit: usize) -> Self {
        Self { names: RwLock::default(), overflow: Arc::from(OVERFLOW), limit }
    }

    /// `name`, shared, if the table admits it (it has room, or knows it
    /// already); else [`OVERFLOW`].
    pub fn intern(&self, name: &str) -> Arc<str> {
        // A poisoned lock only means a thread panicked while inserting a name;
        // the set itself is still consistent.
        if let Some(known) = self.names.read().unwrap_or_else(PoisonError::into_inner).get(name) {
            return Arc::clone(known);
        }
        let mut names = self.names.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = names.get(name) {
            return Arc::clone(known);
        }
        if names.len() >= self.limit || name == OVERFLOW {
            return Arc::clone(&self.overflow);
        }
        let interned: Arc<str> = Arc::from(name);
        names.insert(Arc::clone(&interned));
        interned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_folds_new_names_and_keeps_old_ones() {
        let table = NameTable::new(2);
        assert_eq!(&*table.intern("a"), "a");
        assert_eq!(&*table.intern("b"), "b");
        assert_eq!(&*table.intern("c"), OVERFLOW);
        assert_eq!(&*table.intern("a"), "a");
        assert_eq!(table.names.read().map(|n| n.len()).unwrap_or_default(), 2);
    }

    #[test]
    fn interned_names_are_shared() {
        let table = NameTable::new(10);
        assert!(Arc::ptr_eq(&table.intern("inventory"), &table.intern("inventory")));
    }

    #[test]
    fn the_overflow_name_takes_no_slot() {
        let table = NameTable::new(1);
        assert_eq!(&*table.intern(OVERFLOW), OVERFLOW);
        assert_eq!(&*table.intern("a"), "a");
    }
}
