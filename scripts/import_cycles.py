#!/usr/bin/env python3
"""Lists import circles between the files of each Rust crate in the workspace.

A file imports another when it names an item of the other's module through a path: `use
crate::a::b::{...}`, `crate::a::b::Item` in code, or `super::...` (resolved from the file's own
module). A re-export written as a relative path in `lib.rs` or `mod.rs` (`pub use
child::Item;`, the crate's or directory's face) is not an import of the child; a path through
`crate::`/`super::` is, wherever it stands, so a child that imports from its parent and a
parent that uses the child's items form a circle. Comments and string literals are ignored.
On the tree before issue 42 it finds the eight circles that issue named.

    python3 scripts/import_cycles.py            # every crate; exit 1 if any circle
    python3 scripts/import_cycles.py --json     # the circles as JSON

CONTRIBUTING.md ("The shape of a crate") says why: no two files of a crate import each other.
"""
import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^;]*)\};", re.S)


def strip(text):
    """The code without comments, string and char literals (kept as blanks, lines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'r' and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or (c == "'" and text.startswith("'\\u{", i)):
            j = text.find("'", i + 1 if text[i + 1] != "\\" else i + 2)
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def modules(src):
    """Module path (tuple) -> file, for every .rs file under a crate's src/."""
    found = {}
    for path in src.rglob("*.rs"):
        rel = path.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] in ("lib", "main", "mod"):
            parts = parts[:-1]
        found[tuple(parts)] = path
    return found


def resolve(found, module, root, tail):
    """The file of the longest module prefix a path names, or None."""
    if root == "crate":
        base = []
    elif root == "self":
        base = list(module)
    else:
        base = list(module[:-1]) if module else []
    names = [t for t in tail.split("::") if t]
    while names and names[0] == "super":
        base = base[:-1]
        names = names[1:]
    full = base + names
    for k in range(len(full), -1, -1):
        if tuple(full[:k]) in found:
            return found[tuple(full[:k])]
    return None


def edges(src):
    found = modules(src)
    by_file = {path: mod for mod, path in found.items()}
    graph = {path: set() for path in by_file}
    for path, module in by_file.items():
        code = strip(path.read_text(encoding="utf-8", errors="replace"))
        refs = [(m.group(1), m.group(2)) for m in PATH.finditer(code)]
        for m in USE_GROUP.finditer(code):
            for item in re.split(r",", m.group(3)):
                item = item.strip().split(" as ")[0].strip()
                if item and item not in ("self", "*"):
                    first = re.split(r"::|\{", item)[0].strip()
                    refs.append((m.group(1), m.group(2) + "::" + first))
        for root, tail in refs:
            target = resolve(found, module, root, tail)
            if target is not None and target != path:
                graph[path].add(target)
    return graph


def circles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the circles as JSON")
    parser.add_argument("--root", type=Path, default=ROOT, help="the workspace (default: this checkout)")
    args = parser.parse_args()
    srcs = sorted(p for p in list(args.root.glob("crates/*/src")) + [args.root / "python/src", args.root / "bench/src"] if p.is_dir())
    found = []
    for src in srcs:
        graph = edges(src)
        for comp in circles(graph):
            names = [str(p.relative_to(args.root)) for p in comp]
            ties = {str(a.relative_to(args.root)): sorted(str(b.relative_to(args.root)) for b in graph[a] if b in comp) for a in comp}
            found.append({"files": names, "imports": ties})
    if args.json:
        print(json.dumps({"crates": len(srcs), "circles": found}, indent=2))
    else:
        for c in found:
            print("circle: " + ", ".join(c["files"]))
            for a, bs in c["imports"].items():
                print(f"  {a} -> {', '.join(bs)}")
        print(f"{len(srcs)} crates, {len(found)} circle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
