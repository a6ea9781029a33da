# What scripts/icount.sh and scripts/wholecall.sh share: valgrind, and the path
# of a retryscope-bench bench built in release with debug symbols. Sourced, not
# run; the caller has `set -euo pipefail` and names itself in `$TOOL`.

# Installs valgrind with apt when it is missing and we are root; fails otherwise.
need_valgrind() {
  command -v valgrind >/dev/null 2>&1 && return 0
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind >/dev/null
  else
    echo "$TOOL: valgrind is missing (apt-get install valgrind)" >&2
    exit 1
  fi
}

# Builds the retryscope-bench bench named $1 and prints its executable's path.
bench_binary() {
  local name="$1" binary
  binary="$(cargo bench -p retryscope-bench --bench "$name" --no-run --message-format=json 2>/dev/null \
    | NAME="$name" python3 -c 'import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == os.environ["NAME"] and m.get("executable"):
        print(m["executable"])')"
  [ -x "$binary" ] || { echo "$TOOL: could not build the $name bench" >&2; exit 1; }
  printf '%s\n' "$binary"
}
