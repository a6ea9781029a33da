#!/usr/bin/env bash
# The engine's features: `http` (header hints, HTTP classification, idempotency
# helpers) and `tokio` (awaiting on tokio's timer) are on by default. The crate
# must build, lint clean and pass its tests with neither, and with each alone:
# the blocking front end and async retries on another runtime
# (`Retry::with_sleeper`, tests/sleeper.rs with futures' block_on) need neither.
# Tests that need tokio declare `required-features`, so cargo skips them where
# the feature is off.
set -euo pipefail
cd "$(dirname "$0")/.."

for features in "" "http" "tokio"; do
  echo "--- retryscope --no-default-features --features '$features'"
  cargo clippy --quiet -p retryscope --no-default-features --features "$features" --lib --tests -- -D warnings
  cargo test --quiet -p retryscope --no-default-features --features "$features" --lib --tests
done
