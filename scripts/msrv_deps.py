"""Fails when a dependency of the published crates needs a newer Rust than the
workspace's `rust-version`. Reads `cargo metadata --all-features` on stdin; the
arguments are the published crates. See scripts/msrv.sh."""

import json
import sys


def version(text):
    return tuple(int(part) for part in text.split("."))


def main():
    meta = json.load(sys.stdin)
    published = set(sys.argv[1:])
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    members = set(meta["workspace_members"])

    claims = {packages[m]["rust_version"] for m in members}
    if len(claims) != 1 or None in claims:
        sys.exit(f"every workspace member must inherit one rust-version, found {sorted(map(str, claims))}")
    msrv = claims.pop()

    roots = [m for m in members if packages[m]["name"] in published]
    if len(roots) != len(published):
        sys.exit(f"not all of {sorted(published)} are workspace members")

    # Normal and build dependencies only: dev-dependencies never reach users.
    seen, stack = set(), list(roots)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for dep in nodes[node]["deps"]:
            if any(kind["kind"] in (None, "build") for kind in dep["dep_kinds"]):
                stack.append(dep["pkg"])

    too_new = []
    for package in (packages[p] for p in seen):
        needs = package["rust_version"]
        if needs and version(needs) > version(msrv):
            too_new.append(f"{package['name']} {package['version']} needs Rust {needs}")
    if too_new:
        sys.exit(f"rust-version is {msrv}, but:\n  " + "\n  ".join(sorted(too_new)))
    print(f"rust-version {msrv}: {len(seen) - len(roots)} dependencies, none needs a newer Rust")


main()
