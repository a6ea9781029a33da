#!/usr/bin/env bash
# Checks the workspace's `rust-version` claim with the toolchains on the machine.
#
# Only a recent stable and a nightly are installed, so the code cannot be
# compiled with the declared version itself. What this checks instead:
#
# 1. Std APIs: clippy's `incompatible_msrv` (denied in the workspace lints) flags
#    every use of a std/core/alloc function, method, type or macro stabilised
#    after `rust-version`. It runs here with --all-features, so code behind the
#    optional features (otlp, prometheus, grpc) is checked too, and on every
#    target (tests, examples, benches). The command is CI's clippy step to the
#    letter (every lint, -D warnings), so in CI, right after that step, it is
#    already done and costs nothing; on its own it is a whole clippy run.
# 2. Dependencies: every crate the published crates depend on (normal and build
#    dependencies, all features, all platforms, as resolved in Cargo.lock)
#    declares a `rust-version` no newer than ours. (Cargo's MSRV-aware resolver
#    picks such versions where the requirements allow it; this makes a requirement
#    that forbids it, or a hand-edited lock, fail.)
#
# What it does NOT check: language features (syntax and type-system changes,
# e.g. let-chains at 1.88) and Cargo manifest features — no lint sees those, only
# the old compiler would. They are why the field says 1.88 and not less; when
# using a newer language feature, raise `rust-version` in the same change.
set -euo pipefail
cd "$(dirname "$0")/.."

PUBLISHED="retryscope retryscope-otel retryscope-reqwest retryscope-tower retryscope-sqlx retryscope-testkit"

echo "std APIs (clippy::incompatible_msrv, all features, all targets)"
cargo clippy --quiet --workspace --all-targets --all-features -- -D warnings

echo "dependencies' rust-version"
cargo metadata --locked --format-version 1 --all-features | python3 scripts/msrv_deps.py $PUBLISHED
