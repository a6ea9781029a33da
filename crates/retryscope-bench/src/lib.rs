//! Benchmarks of `retryscope` against peer retry crates (backon, tower's retry
//! middleware, tokio-retry2), and of its retry budget, token bucket and circuit
//! breaker on one and two threads; and whole instrumented calls (reqwest and
//! tonic against servers in other processes, with reqwest-retry, reqwest's own
//! retries and hand-rolled telemetry beside retryscope), counted by
//! `scripts/wholecall.sh`.
//!
//! The library is empty on purpose: everything lives in `benches/`, and the peers
//! are dev-dependencies of this package only. Run everything, and print the ratio
//! table, with `scripts/bench.sh` at the repository root; results are recorded in
//! `BENCHMARKS.md`.
