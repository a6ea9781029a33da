#!/usr/bin/env bash
# Model-checks the lock-free retry budget, its sliding window, the token bucket
# and the circuit breaker with loom (crates/retryscope/tests/loom.rs).
#
# The cfg switches the guards' atomics to loom's (crates/retryscope/src/sync.rs).
# It changes every crate's build, so it gets a target directory of its own and
# leaves the normal build's cache alone. LOOM_MAX_PREEMPTIONS overrides the
# preemption bound each model sets (3).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-target/loom}"
RUSTFLAGS="--cfg retryscope_loom" cargo test -p retryscope --test loom --release
