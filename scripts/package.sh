#!/usr/bin/env bash
# Packages every published crate as `cargo publish` would, and checks what goes in.
#
# 1. The set of publishable workspace members is exactly PUBLISHED (everything
#    else says `publish = false`).
# 2. Each package holds only what a user needs: Cargo.toml, Cargo.lock, README,
#    the two licence files and `src/**/*.rs` — no tests, fixtures or benches. (Cargo
#    warns "ignoring test/benchmark ... not included": that is this rule at work.)
# 3. `cargo package` builds each .crate from its unpacked contents. No
#    `--no-verify` is needed: packaging the crates together, cargo resolves their
#    path dependencies on each other (retryscope-otel → retryscope, …) through a
#    temporary local registry holding the freshly packaged versions.
set -euo pipefail
cd "$(dirname "$0")/.."

PUBLISHED=(retryscope retryscope-otel retryscope-reqwest retryscope-tower)

publishable="$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
meta = json.load(sys.stdin)
members = set(meta["workspace_members"])
print(" ".join(sorted(p["name"] for p in meta["packages"] if p["id"] in members and p["publish"] != [])))
')"
expected="$(printf '%s\n' "${PUBLISHED[@]}" | sort | tr '\n' ' ' | sed 's/ $//')"
if [ "$publishable" != "$expected" ]; then
  echo "publishable members are [$publishable], expected [$expected]: set publish = false or update PUBLISHED" >&2
  exit 1
fi

allowed='^(\.cargo_vcs_info\.json|Cargo\.lock|Cargo\.toml|Cargo\.toml\.orig|README\.md|LICENSE-MIT|LICENSE-APACHE|src/.+\.rs)$'
for crate in "${PUBLISHED[@]}"; do
  # --allow-dirty: this step checks the contents, not whether the tree is committed.
  list="$(cargo package --quiet --list --allow-dirty -p "$crate" 2>/dev/null)"
  unexpected="$(grep -vE "$allowed" <<<"$list" || true)"
  if [ -n "$unexpected" ]; then
    printf '%s would publish files users do not need:\n%s\n' "$crate" "$unexpected" >&2
    exit 1
  fi
  for required in README.md LICENSE-MIT LICENSE-APACHE src/lib.rs; do
    grep -qx "$required" <<<"$list" || { echo "$crate: $required missing from the package" >&2; exit 1; }
  done
  echo "$crate: $(wc -l <<<"$list") files"
done

packages=()
for crate in "${PUBLISHED[@]}"; do packages+=(-p "$crate"); done
cargo package --allow-dirty "${packages[@]}"
