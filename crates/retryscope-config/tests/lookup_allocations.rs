//! Looking a call or a job up allocates nothing: a counting global allocator
//! (this thread's allocations only) around `Config::resolve` for HTTP, gRPC
//! and job targets, matched and unmatched, against a file mixing every kind
//! of rule.

// A global allocator can only be written with `unsafe`; this one only counts
// and delegates to the system allocator.
#![allow(unsafe_code)]
// Test fixtures: a valid file failing to load is a broken test.
#![allow(clippy::unwrap_used)]

use retryscope_config::{Config, Format, KnownNames, Target};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    // A const-initialised thread-local never allocates itself.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the
// `GlobalAlloc` contract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

const FILE: &str = r#"
[dependencies.api]
host = "api.internal"
[dependencies.v1]
path_prefix = "/v1"
[dependencies.orders-get]
service = "shop.Orders"
method = "Get"
[dependencies.receipts]
subject = "orders.*.receipt"
[dependencies.orders]
subject = "orders.>"
"#;

#[test]
fn resolving_calls_and_jobs_allocates_nothing() {
    let config = Config::parse(FILE, Format::Toml, "lookup.toml", &KnownNames::new()).unwrap();
    let targets = [
        (Target::job("orders.42.receipt"), Some("receipts")),
        (Target::job("orders.42.paid.eu"), Some("orders")),
        (Target::job("invoices.42"), None),
        (Target::http("api.internal", Some(443), "/v2/x"), Some("api")),
        (Target::http("other", None, "/v1/x"), Some("v1")),
        (Target::grpc("other", None, "/shop.Orders/Get"), Some("orders-get")),
        (Target::http("other", None, "/"), None),
    ];
    let before = allocations();
    let mut names = [None; 7];
    for (i, (target, _)) in targets.iter().enumerate() {
        names[i] = config.resolve(target).name();
    }
    let made = allocations() - before;
    assert_eq!(made, 0, "resolve allocated {made} times");
    let want: Vec<Option<&str>> = targets.iter().map(|(_, want)| *want).collect();
    assert_eq!(names.to_vec(), want);
}

/// What a client finds its per-dependency state by instead of the name:
/// each dependency its own index, `0..count`; none for the defaults; the
/// same index on the settings a lookup returns.
#[test]
fn every_dependency_has_its_own_index_and_the_defaults_none() {
    let config = Config::parse(FILE, Format::Toml, "lookup.toml", &KnownNames::new()).unwrap();
    let mut indexes: Vec<usize> = config.dependencies().map(|d| d.index().unwrap()).collect();
    indexes.sort_unstable();
    assert_eq!(indexes, (0..5).collect::<Vec<_>>());
    assert_eq!(config.defaults().index(), None);
    let api = config.resolve(&Target::http("api.internal", None, "/"));
    assert_eq!(api.index(), config.dependency("api").unwrap().index());
    assert_eq!(config.resolve(&Target::http("other", None, "/")).index(), None);
}
