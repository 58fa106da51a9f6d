#!/usr/bin/env python3
"""Functions and assertions in the sources: per crate, the functions outside test code,
the assert!/debug_assert! forms (with _eq and _ne) outside test code and their count per
function, and every function longer than a limit (default 100 lines).

    python3 scripts/code-stats.py [--limit N] [--list-asserts]

Test code is left out: files named tests.rs or under a tests/ directory, and the body
of a `#[cfg(test)]` item. A function's length runs from its `fn` line to its closing
brace. Closures and nested functions are counted inside the function that holds them
(nested `fn` items are counted as functions too).
"""

import argparse
import os
import re
import sys

CRATES = {
    "engine": "crates/lanefs/src",
    "fuse": "crates/lanefs-fuse/src",
    "cli": "crates/lanefs-cli/src",
    "bench": "crates/lanefs-bench/src",
}
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s+(\w+)")
ASSERT = re.compile(r"\b(debug_)?assert(_eq|_ne)?!")


def strip_strings(line):
    """The line without string and char literals and // comments (good enough for
    brace counting in this code base)."""
    out, i, n = [], 0, len(line)
    while i < n:
        c = line[i]
        if c == "/" and i + 1 < n and line[i + 1] == "/":
            break
        if c == '"':
            i += 1
            while i < n and line[i] != '"':
                i += 2 if line[i] == "\\" else 1
            i += 1
            continue
        if c == "'" and i + 2 < n and (line[i + 2] == "'" or line[i + 1] == "\\"):
            j = line.find("'", i + 2)
            i = j + 1 if j > 0 else i + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def scan(path):
    """Functions (name, first line, length, asserts) outside test code in `path`."""
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    fns, stack, depth, test_depth, pending_test, in_raw = [], [], 0, None, False, False
    for no, raw in enumerate(lines, 1):
        code = strip_strings(raw)
        stripped = raw.strip()
        if stripped.startswith("#[cfg(test)]"):
            pending_test = True
        m = FN.match(raw)
        if m and test_depth is None and not pending_test:
            # [name, first line, depth, asserts, body opened]
            stack.append([m.group(6), no, depth, 0, False])
        if test_depth is None and stack and ASSERT.search(code):
            stack[-1][3] += len(ASSERT.findall(code))
        for ch in code:
            if ch == ";" and stack and not stack[-1][4] and depth == stack[-1][2]:
                stack.pop()  # a declaration without a body (a trait's)
            elif ch == "{":
                if stack and not stack[-1][4] and depth == stack[-1][2]:
                    stack[-1][4] = True
                if pending_test and test_depth is None:
                    test_depth = depth
                    pending_test = False
                depth += 1
            elif ch == "}":
                depth -= 1
                if test_depth is not None and depth == test_depth:
                    test_depth = None
                while stack and depth == stack[-1][2] and ch == "}":
                    name, first, _, asserts, _ = stack.pop()
                    fns.append((name, first, no - first + 1, asserts))
                    break
        if pending_test and stripped.endswith(";"):
            pending_test = False  # `#[cfg(test)] mod tests;` or a test-only item
    return fns


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--list-asserts", action="store_true")
    args = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    long_fns, total_ok = [], True
    print(f"{'crate':8} {'functions':>9} {'asserts':>8} {'per fn':>7}  files without any")
    for crate, src in CRATES.items():
        nfn = nassert = 0
        dirs_without = {}
        for dirpath, _, files in os.walk(os.path.join(root, src)):
            for name in sorted(files):
                if not name.endswith(".rs") or name == "tests.rs":
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                fns = scan(path)
                nfn += len(fns)
                a = sum(f[3] for f in fns)
                nassert += a
                top = os.path.relpath(path, os.path.join(root, src)).split(os.sep)
                key = top[0] if len(top) > 1 else top[0]
                dirs_without.setdefault(key, 0)
                dirs_without[key] += a
                for fname, first, length, _ in fns:
                    if length > args.limit:
                        long_fns.append((length, f"{rel}:{first}", fname))
        none = sorted(k for k, v in dirs_without.items() if v == 0)
        per = nassert / nfn if nfn else 0
        print(f"{crate:8} {nfn:>9} {nassert:>8} {per:>7.2f}  {', '.join(none)}")
    print(f"\nfunctions over {args.limit} lines (engine, FUSE, CLI, bench):")
    for length, where, name in sorted(long_fns, reverse=True):
        print(f"  {length:4} {where} {name}")
    return 0 if total_ok else 1


if __name__ == "__main__":
    sys.exit(main())
