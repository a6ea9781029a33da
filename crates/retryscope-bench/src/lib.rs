//! Benchmarks of `retryscope` against peer retry crates (backon, tower's retry
//! middleware, tokio-retry2), and of its retry budget, token bucket and circuit
//! breaker on one and two threads.
//!
//! The library is empty on purpose: everything lives in `benches/`, and the peers
//! are dev-dependencies of this package only. Run everything, and print the ratio
//! table, with `scripts/bench.sh` at the repository root; results are recorded in
//! `BENCHMARKS.md`.
