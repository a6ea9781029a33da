#!/usr/bin/env bash
# Fuzzes the parsers of untrusted input for a bounded time each (fuzz/):
#   retry_after   Retry-After (delay-seconds and HTTP-date)
#   rate_limit    RateLimit / RateLimit-Policy (Structured Fields)
#   pace_signal   every header the pacer reads, through a Pacer
#   redact_url    the url.full redaction of retryscope-http (both integrations)
#   grpc_metadata     grpc-retry-pushback-ms, grpc-timeout and RetryInfo in grpc-status-details-bin (retryscope-tower)
#   service_config    the gRPC service config JSON (retryscope-tower)
#   incoming_attempt  retry-attempt and the Envoy and gRPC attempt headers
#   idempotency_key   the Idempotency-Key header (retryscope-idempotency)
# Each target asserts properties (see the top of each fuzz_targets/*.rs), so a
# run fails on a wrong answer as well as on a panic.
#
# Needs the nightly toolchain (sanitizers) and cargo-fuzz, installed here from
# crates.io when missing. FUZZ_SECONDS sets the time per target (default 30,
# two minutes for the eight, two at a time).
# Seeds come from fuzz/seeds/TARGET (real headers and URLs, committed); what the
# fuzzer learns goes to target/fuzz/corpus/TARGET, crashes to
# target/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET="${FUZZ_SECONDS:-30}"
TARGETS=(retry_after rate_limit pace_signal redact_url grpc_metadata service_config incoming_attempt idempotency_key)

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz: the nightly toolchain is missing (rustup toolchain install nightly)" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
cargo fuzz --version

# Its own target directory: sanitizer flags would invalidate the normal build.
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$PWD/target/fuzz/build}"
work="$PWD/target/fuzz"
mkdir -p "$work/artifacts"
cargo +nightly fuzz build

# FUZZ_JOBS targets fuzz at a time (two: the machine's cores; libFuzzer runs one
# process on one core without -jobs), each still for its full time.
JOBS="${FUZZ_JOBS:-2}"
fuzz_target() {
  local t=$1 status=0
  mkdir -p "$work/corpus/$t"
  cargo +nightly fuzz run "$t" "$work/corpus/$t" "fuzz/seeds/$t" -- \
      -max_total_time="$SECONDS_PER_TARGET" -timeout=10 \
      -artifact_prefix="$work/artifacts/$t-" >"$work/$t.log" 2>&1 || status=$?
  echo "$status" >"$work/$t.status"
}
for ((i = 0; i < ${#TARGETS[@]}; i += JOBS)); do
  batch=("${TARGETS[@]:i:JOBS}")
  for t in "${batch[@]}"; do
    echo "--- fuzz $t for ${SECONDS_PER_TARGET}s"
    fuzz_target "$t" &
  done
  wait
  for t in "${batch[@]}"; do
    log="$work/$t.log"
    if [ "$(cat "$work/$t.status" 2>/dev/null)" != 0 ]; then
      tail -n 40 "$log"
      echo "fuzz: $t failed; the input is in $work/artifacts/" >&2
      exit 1
    fi
    # libFuzzer's closing line: runs, coverage, corpus size, executions per second.
    echo "$t: $(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)"
    echo "corpus: $(find "$work/corpus/$t" -type f | wc -l) files learnt + $(find "fuzz/seeds/$t" -type f | wc -l) seeds"
  done
done
