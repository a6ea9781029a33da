#!/usr/bin/env bash
# Instructions and allocations per whole instrumented call (HTTP/1.1 with
# reqwest, tonic unary), retryscope against plain clients, reqwest-retry,
# reqwest's own retries and hand-rolled telemetry, measured with valgrind's
# callgrind on the client thread only (the servers run in other processes).
#
# Usage: scripts/wholecall.sh           measure, print the table and the issue's
#                                        target ratios, and fail if any retryscope
#                                        row is more than 10 % above
#                                        crates/retryscope-bench/wholecall-baseline.txt
#                                        (or a target marked met is missed)
#        scripts/wholecall.sh --bless   measure and rewrite the baseline
#        scripts/wholecall.sh --wall    also time each variant against its plain
#                                        call (interleaved batches, one core; the
#                                        medians go to BENCHMARKS.md, not the gate)
#
# Then the paired runs (`wholecall paired http|grpc ORDER`, below), which the
# configured-vs-code targets compare, and (not with --bless) the
# reload-under-load run of issue 35 with the same
# release binary, natively: `wholecall reload-load`, 1,000 calls/s for 10 s
# per client (reqwest, tower HTTP, tower gRPC) while the configuration file is
# rewritten 10 times; it fails the script if a call fails, a rewrite is not put
# in force or an HTTP client's achieved rate is under 95 % of the offered (see
# benches/wholecall/reload_load.rs). WHOLECALL_RELOAD_LOAD="SECONDS RATE
# REWRITES" changes the load (for a quick local run).
#
# Each variant runs in a process of its own (`wholecall VARIANT`, the
# `wholecall` bench of crates/retryscope-bench, release with debug symbols):
# 200 warm-up calls, then 2,000 inside the function callgrind counts
# (--toggle-collect); the count per call is total / 2,000, rounded: the
# median of five such runs, from five copies of the binary (LAYOUTS below;
# one for the failing calls), two runs at a time (WHOLECALL_JOBS).
# Installs valgrind with apt when it is missing and we are root.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BASELINE="crates/retryscope-bench/wholecall-baseline.txt"
CALLS=2000
THRESHOLD_PERCENT=10
MODE="${1:-}"

# The issue's targets (issue 24), as ratios of "added over the plain call"
# measured in this run: NAME NUMERATOR DENOMINATOR LIMIT STATUS, where the
# numerator and denominator are variants (`A:VARIANT` for its added
# allocations, `const:N` for a fixed count) and the target holds when
# added(NUMERATOR) <= LIMIT * added(DENOMINATOR). Only a target whose STATUS is
# `met` fails the run when missed; `missed` ones are printed as MISSED. Mark a
# target `met` once the numbers meet it, so that it stays met.
TARGETS=(
  # RetryMiddleware::new without a provider adds no more than reqwest-retry adds.
  "no-provider-vs-reqwest-retry      http_retryscope      http_reqwest_retry  1.00 missed"
  # ... and no more allocations (A: allocations added instead of instructions).
  "no-provider-allocations           A:http_retryscope    A:http_reqwest_retry 1.00 met"
  # With the SDK as its own setup installs it, at most 1.25x a hand-rolled span + counter + histogram.
  "sdk-vs-hand-rolled-http           http_retryscope_sdk  http_hand_rolled    1.25 missed"
  "sdk-vs-hand-rolled-grpc           grpc_retryscope_sdk  grpc_hand_rolled    1.25 missed"
  # Issue 51's targets. HTTP with the SDK met at 1.35x once an attempt is
  # built outside its span (reqwest's and tower's closures only prepare their
  # future: `MakeAttemptSpan::BUILDS_IN_SPAN`) and the call's futures shrank
  # (1.43x before, CI on 2701ac0).
  "issue51-sdk-http                  http_retryscope_sdk  http_hand_rolled    1.40 met"
  # gRPC with the SDK: 1.50x until the tenth round, 1.39x after it (bless run on
  # 674f0ff). Left missed: runs move it by about 0.01, and a gate at the edge
  # would fail at random; gated once it holds with room. The call's stop slot
  # borrowed rather than an `Arc` and the label cache's single compare took
  # about 590 a call (medians of five runs of each binary: 107,177 -> 106,592;
  # plain 65,266, hand-rolled 95,188: 1.38x); on the same code the bless run
  # (88ff594) read 1.42 (+41,994 / +29,669) and the next run 1.36 (+41,006 /
  # +30,115): on a shared machine runs move it by several hundredths, so it
  # stays ungated until its median holds well inside 1.40x. The metric
  # attributes no longer dropped took about 350 a call (medians of five runs of
  # each binary: 106,557 -> 106,211; plain 65,312, hand-rolled 95,029: 1.39x ->
  # 1.38x); the check run on it read 1.37 (+41,135 / +29,980). Gated since
  # each gRPC row is the median of three runs (then; now of five layouts): every reading of
  # that code read 1.38x or less (quiet medians of five 1.376; CI on e560b19
  # 1.378, +40,756 / +29,578), about 650 instructions inside the bound. In
  # the two CI runs of this stop a variant's three runs spread by at most ~160
  # a call, and the unchanged rows' medians (plain, hand-rolled) agreed within
  # 70 from one run to the other.
  "issue51-sdk-grpc                  grpc_retryscope_sdk  grpc_hand_rolled    1.40 met"
  "issue51-no-provider               http_retryscope      http_reqwest_retry  2.00 missed"
  # The gRPC layer without a provider adds at most half of what it added when
  # this benchmark was first run (main at 44d4a08: +29,919 instructions).
  # Met (0.49x) until issue 35's second round: with the configuration hash on
  # spans, the held fallback outcome and the file's guards merged, a call with
  # none of them adds +15,121 (0.51x; HTTP +442 instructions likewise). A gRPC
  # call without a fallback is now finished without building the fallback's
  # future; two runs after that gave 0.51x and 0.49x (+15,170, +14,572: gRPC
  # moves by hundreds between runs), so it stayed missed: met once is not met.
  # Met since a replayed body tells its length as tonic's did (no
  # Content-Length built, sent, parsed and checked on every attempt): 0.43x
  # (+12,789) locally, ~2,000 instructions inside the bound where runs and
  # builds move it by hundreds.
  "grpc-no-provider-halved           grpc_retryscope      const:29919         0.50 met"
  # Issue 35: a client configured from a file (one dependency matching the
  # call, the same policy) adds no more than the same client built in code,
  # in instructions and in allocations (met: none added). Instructions are
  # compared in one process (`paired_*`, below), the median of both orders
  # in which the clients are built, from every layout: measured each in a process of its own,
  # holding the parsed file alone (a code-built client beside it, unused)
  # moved the code-built HTTP call by +259 instructions, all in glibc's
  # malloc, so the separate rows differ by the heap the file's parse left,
  # not by the call. Met once a channel's gRPC method shares its file
  # settings, guards and policy as one entry (one reference count a call)
  # and a call copies only the policy it runs: configured minus code-built,
  # per order, gRPC -35 to -87 and HTTP -38 to -45 in 24 runs over two builds
  # (this tree and a clean clone elsewhere), where gRPC had moved between
  # -38 and +186 before. Gated at 1.00x as the table prints it (two
  # decimals: within 0.5 %, about 65 instructions): the same commit (issue
  # 51's 2bd1330) measured -42 in one checkout and +15 in a clean clone
  # elsewhere, the code's layout moving the figure by tens between builds;
  # a configured call that does measurably more than a code-built one still
  # fails the run.
  "configured-vs-code-http           paired_http_configured       paired_http_code    1.005 met"
  "configured-vs-code-grpc           paired_grpc_configured       paired_grpc_code    1.005 met"
  "configured-allocations-http       A:http_retryscope_configured A:http_retryscope  1.00 met"
  # Equal in every run so far (45.0 each), but tonic's allocations per call
  # vary by a few hundredths between runs, which the 0.1 rounding can tip:
  # printed, not gated.
  "configured-allocations-grpc       A:grpc_retryscope_configured A:grpc_retryscope  1.00 missed"
)

TOOL=wholecall
# shellcheck source=scripts/callgrind-lib.sh
source "$ROOT/scripts/callgrind-lib.sh"
need_valgrind
binary="$(bench_binary wholecall)"

work="$(mktemp -d "${TMPDIR:-/tmp}/wholecall.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Where the binary runs from moves its counts. The bench reads its own path
# (its arguments, and the executable it starts its servers from), so the
# path's length sizes a few early allocations, and that shifts where glibc's
# malloc later finds room, and how many instructions its slow path takes on
# every call. The same binary, run from five paths, read the no-provider
# ratio from 2.16x to 2.52x (reqwest-retry's +4,255 to +5,083, almost all of
# it in `_int_malloc`). That was the "denominator moves ~10 % with the
# build" of earlier rounds: a clean clone in CI and a checkout here run from
# paths of different lengths. So every variant runs from five copies of the
# binary at paths exactly 32, 40, 48, 56 and 64 characters long, one heap
# layout each, and its count is the median of the five. The same binary then
# reads the same in any checkout; gRPC's scheduling noise (several hundred
# instructions a run) is also covered by the median.
LAYOUTS=(32 40 48 56 64)
layout_binary() {
  local length=$1 dir="$work/l$1/" pad name
  pad=$(( length - ${#dir} ))
  [ "$pad" -ge 1 ] || { echo "wholecall: $work is too long for a $length-character path: set TMPDIR shorter" >&2; exit 1; }
  name=$(printf 'w%.0s' $(seq 1 "$pad"))
  mkdir -p "$dir"
  # A hard link where it can (the kernel names the executable by the path it
  # was run from), else a copy.
  ln "$binary" "$dir$name" 2>/dev/null || cp "$binary" "$dir$name"
  printf '%s\n' "$dir$name"
}
layouts=()
for length in "${LAYOUTS[@]}"; do layouts+=("$(layout_binary "$length")"); done

declare -A count allocs
variants=$("$binary")
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# Every run is one valgrind process (`run_one NAME LAYOUT ARGS...`: its
# callgrind file, output and exit status under $work/NAME.*), WHOLECALL_JOBS
# at a time (two: this machine's cores). A count is of one client thread
# inside `measured`, and the servers are the client's children, natively: a
# run beside another counts the same work. Beside another, a gRPC client is
# polled a little less often (rows about 1 % lower, plain and instrumented
# alike, so what a variant adds over its plain call holds), which the median
# over layouts covers as it covers gRPC's scheduling noise one run at a time.
# One after another the step took ~950 s in CI (stop 71, when the layouts
# came in).
JOBS="${WHOLECALL_JOBS:-2}"
running=0
run_one() {
  local name=$1 layout=$2 status=0
  shift 2
  # The servers are the client's children and run natively: callgrind traces
  # only the process it starts (no --trace-children), and counts only while
  # the client thread is inside `measured`.
  valgrind --tool=callgrind --toggle-collect='*wholecall*measured*' --callgrind-out-file="$work/$name.out" \
    "${layouts[$layout]}" "$@" >"$work/$name.log" 2>"$work/$name.err" || status=$?
  echo "$status" >"$work/$name.status"
}
spawn() {
  if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
  run_one "$@" &
  running=$((running + 1))
}
succeeded() {
  [ "$(cat "$work/$1.status" 2>/dev/null)" = 0 ] \
    || { echo "wholecall: $1 failed:" >&2; tail -n 30 "$work/$1.err" >&2; exit 1; }
}

# Issue 35's configured client against the same client built in code, and
# the plain call, in one process (`wholecall paired FAMILY ORDER`): their
# calls in turns, each in a function of its own (`measured_plain`,
# `measured_code`, `measured_configured`) whose inclusive count is read, so
# that one heap in one state serves all three. Which of the two clients is
# built first places its connection first in the heap, which moves the
# allocator's share of its calls: both orders run, from every layout, and
# each side's count is the median of those ten runs. One run of each order
# (the mean of two) moved by about 100 instructions a call in gRPC, as much
# as the gate's margin: CI on 154e8ad read configured +92 over code (1.01x),
# where runs before and after read -45 to -99.
ORDERS=(code-first configured-first)
# The failing calls (`fail_*`: two attempts and a wait each, the slowest runs
# by far) gate no ratio, only their retryscope rows against the baseline's
# +10 %: one layout of theirs is enough. Their layouts differ by under 1 %
# (stop 75: 295.0, 296.4 and 295.8 million instructions for fail_retryscope's
# 2,000 calls), a tenth of that margin; running three took about 100 s more.
runs_of() {
  case "$1" in
    fail_*) echo 0 ;;
    *) echo "${!layouts[@]}" ;;
  esac
}
for variant in $variants; do
  for run in $(runs_of "$variant"); do spawn "$variant.$run" "$run" "$variant"; done
done
for family in http grpc; do
  for run in "${!layouts[@]}"; do
    for order in "${ORDERS[@]}"; do spawn "paired_$family.$order.$run" "$run" paired "$family" "$order"; done
  done
done
wait

for variant in $variants; do
  totals=() made_counts=()
  for run in $(runs_of "$variant"); do
    succeeded "$variant.$run"
    total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$work/$variant.$run.out")
    [ -n "$total" ] || { echo "wholecall: no total for $variant" >&2; exit 1; }
    read -r name calls made < <(grep "^$variant " "$work/$variant.$run.log")
    [ "$calls" = "$CALLS" ] || { echo "wholecall: $variant made $calls calls, not $CALLS" >&2; exit 1; }
    totals+=("$total") made_counts+=("$made")
  done
  total=$(printf '%s\n' "${totals[@]}" | median)
  made=$(printf '%s\n' "${made_counts[@]}" | median)
  echo "wholecall: $variant, ${#totals[@]} layouts: $(printf '%s ' "${totals[@]}")-> median $total" >&2
  count[$variant]=$(( (total + CALLS / 2) / CALLS ))
  allocs[$variant]=$(python3 -c "print(f'{$made / $CALLS:.1f}')")
done

for family in http grpc; do
  declare -A sides=([plain]="" [code]="" [configured]="")
  for run in "${!layouts[@]}"; do
    for order in "${ORDERS[@]}"; do
      name="paired_$family.$order.$run"
      succeeded "$name"
      read -r _ calls _ <"$work/$name.log"
      [ "$calls" = "$CALLS" ] || { echo "wholecall: $name made $calls rounds, not $CALLS" >&2; exit 1; }
      # One annotation a run (each reads the whole file), three counts from it.
      callgrind_annotate --inclusive=yes --show-percs=no --auto=no "$work/$name.out" >"$work/$name.annotated" 2>/dev/null
      for side in plain code configured; do
        total=$(awk -v f=":wholecall::measured_$side" '!found && $2 != "=>" && index($0, f " ") { gsub(",", "", $1); print $1; found = 1 }' "$work/$name.annotated")
        [ -n "$total" ] || { echo "wholecall: no count for measured_$side in $name" >&2; exit 1; }
        sides[$side]+="$total "
      done
    done
  done
  for side in plain code configured; do
    total=$(printf '%s\n' ${sides[$side]} | median)
    echo "wholecall: paired_${family}_$side, ${#layouts[@]} layouts x ${#ORDERS[@]} orders: ${sides[$side]}-> median $total" >&2
    count[paired_${family}_$side]=$(( (total + CALLS / 2) / CALLS ))
  done
done

plain_of() {
  case "$1" in
    paired_*) echo "${1%_*}_plain" ;;
    grpc_*) echo grpc_plain ;;
    fail_after_*) echo fail_after_by_hand ;;
    fail_*) echo fail_by_hand ;;
    *) echo http_plain ;;
  esac
}
added() { echo $(( ${count[$1]} - ${count[$(plain_of "$1")]} )); }
added_allocs() { python3 -c "print(f'{${allocs[$1]} - ${allocs[$(plain_of "$1")]}:+.1f}')"; }

printf '%-28s %12s %10s %12s %10s\n' variant "instr/call" added "allocs/call" added
for variant in $variants; do
  plain=$(plain_of "$variant")
  if [ "$variant" = "$plain" ]; then
    printf '%-28s %12d %10s %12s %10s\n' "$variant" "${count[$variant]}" - "${allocs[$variant]}" -
  else
    printf '%-28s %12d %+10d %12s %10s\n' "$variant" "${count[$variant]}" "$(added "$variant")" \
      "${allocs[$variant]}" "$(added_allocs "$variant")"
  fi
done

ratio() { python3 -c "print(f'{$1 / $2:.2f}' if $2 else 'inf')"; }
echo
echo "ratios of what each adds over its plain call:"
printf '  %-58s %s\n' "retryscope, no provider / reqwest-retry (HTTP)" \
  "$(ratio "$(added http_retryscope)" "$(added http_reqwest_retry)")"
printf '  %-58s %s\n' "retryscope + SDK / hand-rolled span+counter+histogram (HTTP)" \
  "$(ratio "$(added http_retryscope_sdk)" "$(added http_hand_rolled)")"
printf '  %-58s %s\n' "retryscope + SDK / hand-rolled (gRPC)" \
  "$(ratio "$(added grpc_retryscope_sdk)" "$(added grpc_hand_rolled)")"
printf '  %-58s %s\n' "gRPC layer, no provider: added instructions" "$(added grpc_retryscope)"
for family in http grpc; do
  printf '  %-58s %s  (%s: plain %d, code %+d, configured %+d)\n' \
    "configured from a file / built in code ($family, one process)" \
    "$(ratio "$(added "paired_${family}_configured")" "$(added "paired_${family}_code")")" paired \
    "${count[paired_${family}_plain]}" "$(added "paired_${family}_code")" "$(added "paired_${family}_configured")"
done
printf '  %-58s %s\n' "retryscope, no provider / reqwest-retry (503 then 200)" \
  "$(ratio "$(added fail_retryscope)" "$(added fail_reqwest_retry)")"
printf '  %-58s %s\n' "retryscope, no provider / reqwest-retry (503 Retry-After: 0)" \
  "$(ratio "$(added fail_after_retryscope)" "$(added fail_after_reqwest_retry)")"

if [ "$MODE" = "--wall" ]; then
  echo
  echo "wall time over the plain call (median of 31 interleaved rounds of 200 calls; p10, p90):"
  # The client on one CPU, its servers on the other, when there are two.
  cpus=$(nproc)
  for variant in $variants; do
    [ "$variant" = "$(plain_of "$variant")" ] && continue
    if [ "$cpus" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
      line=$(WHOLECALL_SERVER_CPUS=0 taskset -c 1 "$binary" wall "$variant" 2>/dev/null)
    else
      line=$("$binary" wall "$variant" 2>/dev/null)
    fi
    read -r median p10 p90 <<<"$line"
    printf '  %-28s %6sx  (%s, %s)\n' "$variant" "$median" "$p10" "$p90"
  done
fi

if [ "$MODE" = "--bless" ]; then
  {
    echo "# Instructions per whole call, from scripts/wholecall.sh --bless ($(rustc --version | cut -d' ' -f2)); allocations per call after each."
    for variant in $variants; do echo "$variant ${count[$variant]} ${allocs[$variant]}"; done
  } >"$BASELINE"
  echo "wholecall: wrote $BASELINE"
  exit 0
fi

[ -f "$BASELINE" ] || { echo "wholecall: no baseline ($BASELINE): run with --bless" >&2; exit 1; }
failed=0
passed=0
echo
while read -r variant expected _; do
  case "$variant" in ''|'#'*) continue ;; esac
  # Only retryscope's own rows are held to the baseline; the rest are context.
  case "$variant" in *retryscope*) ;; *) continue ;; esac
  actual=${count[$variant]:-}
  if [ -z "$actual" ]; then
    echo "FAIL: $variant is in the baseline but was not measured"; failed=$((failed + 1)); continue
  fi
  limit=$(( expected + expected * THRESHOLD_PERCENT / 100 ))
  if [ "$actual" -gt "$limit" ]; then
    echo "FAIL: $variant: $actual instructions/call, baseline $expected (+${THRESHOLD_PERCENT} % = $limit)"
    failed=$((failed + 1))
  else
    echo "PASS: $variant: $actual instructions/call (baseline $expected)"
    passed=$((passed + 1))
  fi
done <"$BASELINE"

# One side of a target: a variant's added instructions (or allocations, `A:`)
# in this run, or a fixed count (`const:`).
side() {
  case "$1" in
    A:*) local v=${1#A:}; python3 -c "print(round(${allocs[$v]} - ${allocs[$(plain_of "$v")]}, 1))" ;;
    const:*) echo "${1#const:}" ;;
    *) added "$1" ;;
  esac
}
echo
echo "targets (issues 24, 35):"
for target in "${TARGETS[@]}"; do
  read -r name numerator denominator limit status <<<"$target"
  n=$(side "$numerator"); d=$(side "$denominator")
  verdict=$(python3 -c "print('holds' if $n <= $limit * $d else 'short')")
  shown="$name: $numerator adds $n, $denominator $d: $(ratio "$n" "$d")x (target <= ${limit}x)"
  case "$verdict/$status" in
    holds/*) echo "MET: $shown" ;;
    short/met) echo "FAIL: $shown, marked met"; failed=$((failed + 1)) ;;
    short/*) echo "MISSED: $shown" ;;
  esac
done

echo
echo "reload under load (issue 35), release build:"
# shellcheck disable=SC2086 # the load is three numbers, split on purpose
if "$binary" reload-load ${WHOLECALL_RELOAD_LOAD:-}; then
  passed=$((passed + 1))
else
  echo "FAIL: reload-load"; failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
