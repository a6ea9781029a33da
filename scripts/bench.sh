#!/usr/bin/env bash
# Reproduces every retryscope benchmark and prints the tables recorded in
# BENCHMARKS.md:
#   1. retryscope against its peers (backon, tower::retry, tokio-retry2) on the
#      happy path and the failure path, with the ratio to the best peer;
#   2. the retry budget, token bucket and circuit breaker on 1 and 2 threads;
#   3. the OpenTelemetry instrumentation's own bench (retryscope-otel);
#   4. instruction counts (scripts/icount.sh, callgrind) and, last, one table
#      with both measures for each happy-path contender and guard.
#
# Usage: scripts/bench.sh [--skip-run]   (--skip-run only re-prints the tables
# from target/criterion). Criterion timings can be set with BENCH_WARMUP and
# BENCH_MEASURE (seconds; defaults 2 and 5). Benchmarks are noisy on a shared
# machine: the load average is printed before and after; compare runs only at
# similar load.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CRITERION_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/criterion"
WARMUP="${BENCH_WARMUP:-2}"
MEASURE="${BENCH_MEASURE:-5}"
CRITERION_ARGS=(--warm-up-time "$WARMUP" --measurement-time "$MEASURE" --noplot)

machine() {
  echo "## Machine"
  echo
  echo "- CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -n1), $(nproc) cores" \
    "($(lscpu | sed -n 's/^Hypervisor vendor: *//p' | head -n1 | sed 's/.\+/& guest/'))"
  echo "- OS: $(uname -sr), clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)"
  echo "- $(rustc --version)"
  echo "- $(awk '/^name = /{n=$3} /^version = /{gsub(/"/,"",n); v=$3; gsub(/"/,"",v);
      if (n ~ /^(backon|tower|tokio-retry2|tokio|criterion)$/) printf "%s %s, ", n, v}' Cargo.lock | sed 's/, $//')"
  if git rev-parse --git-dir > /dev/null 2>&1; then
    echo "- retryscope $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates/retryscope || echo ' + uncommitted changes')"
  fi
  echo
}

if [ "${1:-}" != "--skip-run" ]; then
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  # One criterion run for the engine, its peers and its guards...
  cargo bench -p retryscope-bench --bench peers --bench budget_breaker -- "${CRITERION_ARGS[@]}"
  # ...and the instrumentation's bench, which lives with the otel crate.
  cargo bench -p retryscope-otel --bench instrumented -- "${CRITERION_ARGS[@]}"
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
fi

machine

CRITERION_DIR="$CRITERION_DIR" python3 - <<'PY'
import json, os, sys
from pathlib import Path

root = Path(os.environ["CRITERION_DIR"])

def load():
    """Mean point estimates (ns) by full id, from the latest run of each bench."""
    out = {}
    for meta in root.glob("**/new/benchmark.json"):
        info = json.loads(meta.read_text())
        est = json.loads((meta.parent / "estimates.json").read_text())
        mean = est["mean"]
        ci = mean["confidence_interval"]
        out[info["full_id"]] = (mean["point_estimate"], ci["lower_bound"], ci["upper_bound"])
    return out

results = load()
missing = []

def get(full_id):
    if full_id not in results:
        missing.append(full_id)
        return None
    return results[full_id]

def fmt(ns):
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} µs"
    return f"{ns:.1f} ns"

PEERS = ["backon", "tower", "tokio_retry2"]
# Rows that are not contenders for "best peer": the floors and settings' costs.
EXTRA = {"direct": "floor: no retry wrapper", "hand_loop": "floor: bare loop, no delay",
         "retryscope_deadline": "extra: retryscope with a 15 s deadline",
         "tower_sleep0": "extra: tower waiting tokio::time::sleep(0)"}

print("## Retry engine vs peers (mean time per call; ratio = time / best peer's time)")
for group, order in [("happy", ["direct", "retryscope", "retryscope_deadline", "retryscope_budget", "backon", "tower", "tokio_retry2"]),
                     ("failure", ["hand_loop", "retryscope", "backon", "tower", "tokio_retry2", "tower_sleep0"])]:
    rows = {name: get(f"{group}/{name}") for name in order}
    peers = {n: rows[n][0] for n in PEERS if rows.get(n)}
    if not peers:
        continue
    best_name = min(peers, key=peers.get)
    best = peers[best_name]
    floor = rows[order[0]][0] if rows.get(order[0]) else None
    print()
    print(f"### {group} (best peer: {best_name})")
    print()
    print(f"| bench | mean [95% CI] | ratio to best peer | over {order[0]} | note |")
    print("|---|---:|---:|---:|---|")
    for name in order:
        r = rows.get(name)
        if not r:
            continue
        mean, lo, hi = r
        over = f"+{fmt(mean - floor)}" if floor is not None and name != order[0] else "—"
        note = EXTRA.get(name, "peer" if name in PEERS else "")
        print(f"| {group}/{name} | {fmt(mean)} [{fmt(lo)}, {fmt(hi)}] | {mean / best:.2f} | {over} | {note} |")

print()
print("## Budget and breaker (time per operation per thread; 2 threads share one instance)")
print()
print("| guard | 1 thread | 2 threads | 2 threads / 1 thread |")
print("|---|---:|---:|---:|")
for guard in ["retry_budget", "retry_budget_request", "tower_tps_budget", "token_bucket", "circuit_breaker",
              "control_clock_read"]:
    one, two = get(f"budget/{guard}/1"), get(f"budget/{guard}/2")
    if one and two:
        print(f"| {guard} | {fmt(one[0])} | {fmt(two[0])} | {two[0] / one[0]:.2f} |")
for clock in ["std_instant_now", "tokio_instant_now", "system_clock_now_coarse"]:
    r = get(f"clock/{clock}")
    if r:
        print(f"| clock/{clock} (one read) | {fmt(r[0])} | | |")

print()
print("## Instrumentation (retryscope-otel `instrumented` bench; ratio = time / uninstrumented)")
print()
print("| bench | mean | ratio to uninstrumented |")
print("|---|---:|---:|")
for group in ["success_at_once", "success_on_attempt_3", "async_success_at_once"]:
    base = results.get(f"{group}/uninstrumented")
    for full_id in sorted(k for k in results if k.startswith(group + "/")):
        mean = results[full_id][0]
        ratio = f"{mean / base[0]:.2f}" if base else "—"
        print(f"| {full_id} | {fmt(mean)} | {ratio} |")

if missing:
    print(f"\nmissing results (bench not run?): {', '.join(missing)}", file=sys.stderr)
    sys.exit(1)
PY

echo
echo "## Instruction counts (callgrind; scripts/icount.sh)"
echo
counts="$(mktemp "${TMPDIR:-/tmp}/icount-counts.XXXXXX")"
trap 'rm -f "$counts"' EXIT
# The regression gate's verdict is printed, not fatal here: the tables matter.
ICOUNT_OUT="$counts" bash "$ROOT/scripts/icount.sh" || echo "(icount: regression against the baseline, see above)"

echo
CRITERION_DIR="$CRITERION_DIR" COUNTS="$counts" python3 - <<'PY'
import json, os
from pathlib import Path

root = Path(os.environ["CRITERION_DIR"])
counts = dict(line.split() for line in Path(os.environ["COUNTS"]).read_text().splitlines() if line.strip())

def mean(full_id):
    est = root / full_id / "new" / "estimates.json"
    return json.loads(est.read_text())["mean"]["point_estimate"] if est.exists() else None

# (row, criterion id, icount scenario)
ROWS = [
    ("happy: direct call", "happy/direct", "happy_direct"),
    ("happy: retryscope", "happy/retryscope", "happy_retryscope"),
    ("happy: retryscope, 15 s deadline", "happy/retryscope_deadline", "happy_retryscope_deadline"),
    ("happy: retryscope with a RetryBudget", "happy/retryscope_budget", "happy_retryscope_budget"),
    ("happy: retryscope, every attempt booked (an observer)", "", "happy_retryscope_booked"),
    ("happy: backon", "happy/backon", "happy_backon"),
    ("happy: tower", "happy/tower", "happy_tower"),
    ("happy: tokio-retry2", "happy/tokio_retry2", "happy_tokio_retry2"),
    ("guard: RetryBudget (request + retry), 1 thread", "budget/retry_budget/1", "guard_retry_budget"),
    ("guard: tower TpsBudget (deposit + withdraw), 1 thread", "budget/tower_tps_budget/1", ""),
    ("guard: TokenBucket (success + retry), 1 thread", "budget/token_bucket/1", "guard_token_bucket"),
    ("guard: CircuitBreaker (permit + success), 1 thread", "budget/circuit_breaker/1", "guard_circuit_breaker"),
]
PEER_ROWS = [r for r in ROWS if r[2] in ("happy_backon", "happy_tower", "happy_tokio_retry2")]
peers = [mean(i) for _, i, _ in PEER_ROWS]
peer_counts = [int(counts[s]) for _, _, s in PEER_ROWS if s in counts]
best_time = min(p for p in peers if p is not None) if any(p is not None for p in peers) else None
best_count = min(peer_counts) if peer_counts else None
print("## One table: time (criterion mean) and instructions (callgrind) per operation")
print()
print("| scenario | time | × best peer (time) | instructions | × best peer (instructions) |")
print("|---|---:|---:|---:|---:|")
for row, full_id, scenario in ROWS:
    t, c = (mean(full_id) if full_id else None), counts.get(scenario)
    happy = scenario.startswith("happy_")
    print(f"| {row} | {f'{t:.1f} ns' if t is not None else '—'} "
          f"| {f'{t / best_time:.2f}' if happy and t is not None and best_time else ''} "
          f"| {c or '—'} | {f'{int(c) / best_count:.2f}' if happy and c and best_count else ''} |")
PY
