//! The atomics the lock-free guards are built from.
//!
//! Normally std's. Built with `RUSTFLAGS="--cfg retryscope_loom"`, loom's, so
//! that `tests/loom.rs` can check the budget, its window and the breaker under
//! every interleaving of a few threads. The cfg has its own name because
//! `--cfg loom` would also switch tokio to loom, which tokio only supports in its
//! own test suite.

#[cfg(retryscope_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, fence};
pub(crate) use std::sync::atomic::Ordering;
#[cfg(not(retryscope_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, fence};
