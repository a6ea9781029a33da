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
use std::sync::{LazyLock, PoisonError, RwLock};

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
/// seen before), else [`OVERFLOW`]. Names are interned for the life of the
/// process ([`NameTable`]): a name seen before costs a shared lookup and no
/// allocation, and a metric attribute borrows it with nothing to count.
///
/// ```
/// let label = retryscope::dependency::bounded_dependency("inventory");
/// assert_eq!(label, "inventory");
/// ```
pub fn bounded_dependency(name: &str) -> &'static str {
    static DEPENDENCIES: LazyLock<NameTable> = LazyLock::new(|| NameTable::new(MAX_DEPENDENCIES));
    DEPENDENCIES.intern(name)
}

/// A set of at most `limit` names; the rest are [`OVERFLOW`]: what each
/// bounded label above is kept in, for a label of another kind (a server's
/// routes, a job's subject).
///
/// The table never evicts a name, so a name it admits is a label for the
/// rest of the process: it is leaked once, when first admitted, and handed
/// out as a `&'static str` that a metric attribute borrows with nothing to
/// count or drop (an `Arc<str>` cost every record a reference-count
/// increment and decrement). The leak is bounded by the table's: at most
/// `limit` names, each leaked once, whatever the traffic. That bound holds
/// only for a table that lives as long as the process — one made and
/// dropped again and again would leak up to `limit` names each time — so
/// [`intern`](Self::intern) takes `&'static self`: keep the table in a
/// `static`.
///
/// ```
/// use retryscope::dependency::{NameTable, OVERFLOW};
/// use std::sync::LazyLock;
///
/// static TENANTS: LazyLock<NameTable> = LazyLock::new(|| NameTable::new(2));
/// assert_eq!(TENANTS.intern("acme"), "acme");
/// assert_eq!(TENANTS.intern("globex"), "globex");
/// assert_eq!(TENANTS.intern("initech"), OVERFLOW);
/// // The same name is the same leaked label, not a copy.
/// assert!(std::ptr::eq(TENANTS.intern("acme"), TENANTS.intern("acme")));
/// ```
pub struct NameTable {
    names: RwLock<HashSet<&'static str>>,
    limit: usize,
}

impl NameTable {
    /// A table that admits `limit` names.
    pub fn new(limit: usize) -> Self {
        Self { names: RwLock::default(), limit }
    }

    /// `name`, for the life of the process, if the table admits it (it has
    /// room, or knows it already); else [`OVERFLOW`]. Only a name admitted
    /// for the first time is copied (and leaked): a full table leaks nothing.
    pub fn intern(&'static self, name: &str) -> &'static str {
        // A poisoned lock only means a thread panicked while inserting a name;
        // the set itself is still consistent.
        if let Some(&known) = self.names.read().unwrap_or_else(PoisonError::into_inner).get(name) {
            return known;
        }
        let mut names = self.names.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(&known) = names.get(name) {
            return known;
        }
        if names.len() >= self.limit || name == OVERFLOW {
            return OVERFLOW;
        }
        let leaked: &'static str = Box::leak(Box::from(name));
        names.insert(leaked);
        leaked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small table for one test, leaked as a `static` would be.
    fn table(limit: usize) -> &'static NameTable {
        Box::leak(Box::new(NameTable::new(limit)))
    }

    /// How many names `table` holds: each of them leaked once.
    fn held(table: &NameTable) -> usize {
        table.names.read().unwrap_or_else(PoisonError::into_inner).len()
    }

    #[test]
    fn a_full_table_folds_new_names_and_keeps_old_ones() {
        let table = table(2);
        assert_eq!(table.intern("a"), "a");
        assert_eq!(table.intern("b"), "b");
        assert_eq!(table.intern("c"), OVERFLOW);
        assert_eq!(table.intern("a"), "a");
        assert_eq!(held(table), 2);
    }

    #[test]
    fn interned_names_are_shared() {
        let table = table(10);
        assert!(std::ptr::eq(table.intern("inventory"), table.intern("inventory")));
    }

    #[test]
    fn the_overflow_name_takes_no_slot() {
        let table = table(1);
        assert_eq!(table.intern(OVERFLOW), OVERFLOW);
        assert_eq!(table.intern("a"), "a");
    }

    #[test]
    fn a_table_at_its_bound_hands_out_other_and_leaks_nothing_more() {
        let table = table(2);
        let a = table.intern("a");
        assert_eq!((a, table.intern("b")), ("a", "b"));
        // The bound's edge: no further name is leaked, however many come.
        for i in 0..100 {
            assert_eq!(table.intern(&format!("past-the-bound-{i}")), OVERFLOW);
        }
        assert_eq!(table.intern("c"), OVERFLOW);
        assert_eq!(held(table), 2);
        // (The overflow label is the constant, never leaked: a constant has
        // no one address to compare, so the count above is the check.)
        // A name kept before the bound is the same leaked value, not a copy.
        assert!(std::ptr::eq(table.intern("a"), a));
        assert_eq!(held(table), 2);
    }
}
