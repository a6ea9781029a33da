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

PUBLISHED=(retryscope retryscope-otel retryscope-http retryscope-reqwest retryscope-tower retryscope-sqlx retryscope-idempotency retryscope-jobs retryscope-config retryscope-redis retryscope-testkit)

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

# docs.rs and crates.io render the front pages and READMEs away from the
# repository: they link the telemetry contract and the runbook by repository URL,
# every GitHub link names this repository (the one in Cargo.toml), and every
# file such a link points at exists.
repository="https://github.com/retryscope/retryscope"
grep -qx "repository = \"$repository\"" Cargo.toml || { echo "Cargo.toml's repository is not $repository" >&2; exit 1; }
for crate in "${PUBLISHED[@]}"; do
  for doc in telemetry runbook; do
    for page in "crates/$crate/src/lib.rs" "crates/$crate/README.md"; do
      grep -q "$repository/blob/main/docs/$doc.md" "$page" || { echo "$page does not link docs/$doc.md by URL" >&2; exit 1; }
    done
  done
done
links="$(grep -rhoE 'https://github\.com/[^] )>"`]*' crates/*/src crates/*/README.md README.md CHANGELOG.md docs | sort -u)"
foreign="$(grep -v "^$repository\(/\|\$\)" <<<"$links" || true)"
[ -z "$foreign" ] || { printf 'links to another repository:\n%s\n' "$foreign" >&2; exit 1; }
while read -r link; do
  path="${link#"$repository/blob/main/"}"
  path="${path%%#*}"
  [ "$path" = "$link" ] || [ -e "$path" ] || { echo "$link: no such file in the repository" >&2; exit 1; }
done <<<"$links"

# Cargo unpacks the crates of its temporary local registry into
# $CARGO_HOME/registry/src/-<hash>/ and reuses a copy already there for the same
# version, so a second run would verify against the first run's sources. Remove
# those copies: only our crates, only from local (unnamed, "-") registries.
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
packages=()
for crate in "${PUBLISHED[@]}"; do
  packages+=(-p "$crate")
  version="$(cargo pkgid -p "$crate" | sed 's/.*[#@]//')"
  rm -rf "$cargo_home"/registry/src/-*/"$crate-$version"
done
# The verification builds each crate from its package, outside the workspace,
# so the workspace's profiles do not apply: without this every dependency
# would be compiled with full debuginfo, which proves nothing more about
# whether the package builds.
CARGO_PROFILE_DEV_DEBUG=false cargo package --allow-dirty "${packages[@]}"
