#!/usr/bin/env python3
"""Counts each published crate's public items, from rustdoc's JSON.

An item counts when a user can name it from the crate root without
`#[doc(hidden)]` (rustdoc leaves hidden items out of the JSON): modules,
types, traits, functions, constants, statics, macros, re-exports of other
crates' items (one each), and of the types: inherent methods and associated
constants, public fields and enum variants. Trait implementations are not
counted (they are not names a user writes). Each item counts once, however
many paths reach it.

Usage: scripts/public-items.py [CRATE ...]   (needs a nightly toolchain)
"""
import json
import os
import subprocess
import sys

CRATES = [
    "retryscope",
    "retryscope-otel",
    "retryscope-http",
    "retryscope-reqwest",
    "retryscope-tower",
    "retryscope-sqlx",
    "retryscope-idempotency",
]


def target_dir():
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(meta)["target_directory"]


def count(crate):
    subprocess.run(
        ["cargo", "+nightly", "rustdoc", "-q", "-p", crate, "--all-features", "--lib",
         "--", "-Z", "unstable-options", "--output-format", "json"],
        check=True,
    )
    path = os.path.join(target_dir(), "doc", crate.replace("-", "_") + ".json")
    with open(path) as f:
        doc = json.load(f)
    index = doc["index"]
    seen = set()
    kinds = {}

    def add(kind):
        kinds[kind] = kinds.get(kind, 0) + 1

    def walk(item_id):
        key = str(item_id)
        if key in seen or key not in index:
            return
        seen.add(key)
        item = index[key]
        (kind, inner), = item["inner"].items()
        if kind == "use":
            target = inner.get("id")
            if target is not None and str(target) in index and index[str(target)]["crate_id"] == 0:
                if inner.get("is_glob"):
                    for child in index[str(target)]["inner"].get("module", {}).get("items", []):
                        walk(child)
                else:
                    walk(target)
            else:
                add("re-export")
            return
        if kind == "impl":
            if inner.get("trait") is None:
                for child in inner["items"]:
                    walk(child)
            return
        add(kind)
        if kind == "module":
            for child in inner["items"]:
                walk(child)
        elif kind == "struct":
            fields = inner["kind"].get("plain", {}).get("fields", []) if isinstance(inner["kind"], dict) else []
            tuple_fields = inner["kind"].get("tuple", []) if isinstance(inner["kind"], dict) else []
            for child in list(fields) + [t for t in tuple_fields if t is not None]:
                walk(child)
            for child in inner["impls"]:
                walk(child)
        elif kind in ("enum", "union"):
            for child in inner.get("variants", []) + inner.get("fields", []):
                walk(child)
            for child in inner["impls"]:
                walk(child)
        elif kind == "trait":
            for child in inner["items"]:
                walk(child)
        elif kind == "variant":
            variant_kind = inner["kind"]
            if isinstance(variant_kind, dict) and "struct" in variant_kind:
                for child in variant_kind["struct"]["fields"]:
                    walk(child)

    walk(doc["root"])
    return len(seen_counted(kinds)), kinds


def seen_counted(kinds):
    return [k for k, n in kinds.items() for _ in range(n)]


def main():
    crates = sys.argv[1:] or CRATES
    total = 0
    for crate in crates:
        n, kinds = count(crate)
        total += n
        detail = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
        print(f"{crate:24} {n:5}   ({detail})")
    print(f"{'total':24} {total:5}")


if __name__ == "__main__":
    main()
