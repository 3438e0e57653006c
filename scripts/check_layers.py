#!/usr/bin/env python3
''''exec python3 "$0" "$@" # ''' # run by sh or bash, this line hands the file to python3
DOC = """Check the layer rule of docs/ARCHITECTURE.md: every layer calls only the layers below it.

Two views of the same rule:
  - includes (always): every `#include "..."` of a file in a layer must name a header of the same layer, of
    a layer it may call, or of the public ABI (include/). Needs no build.
  - symbols (--objects DIR, a CMake object folder such as build/CMakeFiles/comm_objs.dir): every function or
    variable an object file uses from another object file of the library must be defined in the same layer
    or in one it may call. This sees calls that a header included for its types would hide.
perf/ may include only the public headers. Header names must be unique across the include folders (the
build adds every layer's folder to the search path).

Exit status 0 when the rule holds, 1 with one line per violation otherwise. --count prints only the number
of arrows that break the rule (for before/after comparisons).
"""
import argparse
import collections
import os
import re
import subprocess
import sys

# Top to bottom: (layer, folders it owns, layers it may call). A layer may always use itself and the public
# ABI in include/. Keep this table and the folder map at the top of docs/ARCHITECTURE.md the same.
LAYERS = [
    ("compat", ["compat/nccl"], ["core", "base"]),
    ("core", ["src/core"], ["tune", "algorithms", "sched", "exec", "transports", "bootstrap", "topo", "devmem", "base"]),
    ("tune", ["src/tune"], ["algorithms", "sched", "base"]),
    ("algorithms", ["algorithms"], ["sched", "base"]),
    ("sched", ["src/sched"], ["base"]),
    ("exec", ["src/exec"], ["transports", "sched", "devmem", "base"]),
    ("transports", ["transports"], ["bootstrap", "topo", "devmem", "base"]),
    ("bootstrap", ["src/bootstrap"], ["base"]),
    ("topo", ["src/topo"], ["base"]),
    ("devmem", ["src/devmem"], ["base"]),
    ("base", ["src/base"], []),
]
PUBLIC = "include"
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    """The layer owning a path relative to the root (longest folder match), or None."""
    best, best_len = None, -1
    for name, folders, _ in LAYERS:
        for f in folders:
            if (path == f or path.startswith(f + "/")) and len(f) > best_len:
                best, best_len = name, len(f)
    return best


def allowed(src, dst):
    if src == dst or dst == PUBLIC:
        return True
    for name, _, may in LAYERS:
        if name == src:
            return dst in may
    return False


def layer_files(root):
    out = []
    for _, folders, _ in LAYERS:
        for f in folders:
            for d, _, names in os.walk(os.path.join(root, f)):
                for n in sorted(names):
                    if n.endswith(SOURCE_EXT):
                        out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(set(out))


def header_index(root, errors):
    """Header basename -> path, over the public folder and every layer folder (the build's search path)."""
    index = {}
    folders = [PUBLIC] + [f for _, fs, _ in LAYERS for f in fs]
    for f in folders:
        for d, _, names in os.walk(os.path.join(root, f)):
            for n in names:
                if not n.endswith((".h", ".cuh")):
                    continue
                p = os.path.relpath(os.path.join(d, n), root)
                if n in index and index[n] != p:
                    errors.append(f"header name {n} is used twice: {index[n]} and {p}")
                index.setdefault(n, p)
    return index


def include_arrows(root, files, index, errors):
    """(file, header, file's layer, header's layer) for every quoted include of a layered file."""
    arrows = []
    for path in files:
        src_layer = layer_of(path)
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                name = m.group(1)
                local = os.path.normpath(os.path.join(os.path.dirname(path), name))
                if os.path.exists(os.path.join(root, local)):
                    target = local
                elif os.path.basename(name) in index and "/" not in name:
                    target = index[name]
                else:
                    errors.append(f"{path}:{lineno}: #include \"{name}\" is not a header of the tree's include folders")
                    continue
                dst_layer = PUBLIC if target.startswith(PUBLIC + "/") else layer_of(target)
                arrows.append((f"{path}:{lineno}", target, src_layer, dst_layer))
    return arrows


def symbol_arrows(objects):
    """(object's source, defining source, symbols) for every symbol an object uses from another one."""
    defs, uses = {}, collections.defaultdict(set)
    for d, _, names in os.walk(objects):
        for n in names:
            if not n.endswith(".o"):
                continue
            obj = os.path.join(d, n)
            src = os.path.relpath(obj, objects)[:-2]
            out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[1] in "TDBRVWG":
                    defs[parts[2]] = src
                elif len(parts) == 2 and parts[0] == "U":
                    uses[src].add(parts[1])
    edges = collections.defaultdict(set)
    for src, syms in uses.items():
        for s in syms:
            if s in defs and defs[s] != src:
                edges[(src, defs[s])].add(s)
    return [(a, b, sorted(s)) for (a, b), s in sorted(edges.items())]


def main():
    ap = argparse.ArgumentParser(description=DOC.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--objects", help="CMake object folder of the library: check its symbol uses too")
    ap.add_argument("--count", action="store_true", help="print only the number of arrows that break the rule")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    errors, bad = [], []
    index = header_index(root, errors)
    for where, target, a, b in include_arrows(root, layer_files(root), index, errors):
        if b is None or not allowed(a, b):
            bad.append(f"{where}: {a} includes {target} ({b or 'no layer'})")
    for d, _, names in os.walk(os.path.join(root, "perf")):
        for n in sorted(names):
            path = os.path.relpath(os.path.join(d, n), root)
            if not n.endswith(SOURCE_EXT):
                continue
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
                for lineno, line in enumerate(fh, 1):
                    m = INCLUDE_RE.match(line)
                    if m and not os.path.exists(os.path.join(root, "perf", m.group(1))) and \
                            not os.path.exists(os.path.join(root, PUBLIC, m.group(1))):
                        bad.append(f"{path}:{lineno}: perf/ includes \"{m.group(1)}\", not a public header")
    if args.objects:
        for src, dst, syms in symbol_arrows(args.objects):
            a, b = layer_of(src), layer_of(dst)
            if a is None or b is None:
                continue  # objects outside the layered folders (none today)
            if not allowed(a, b):
                bad.append(f"{src} ({a}) calls {dst} ({b}): {' '.join(syms)}")
    if args.count:
        print(len(bad))
        return 1 if bad or errors else 0
    for line in errors + bad:
        print(line)
    if errors or bad:
        print(f"check_layers: {len(bad)} arrow(s) against the layer rule, {len(errors)} other error(s)")
        return 1
    print("check_layers: every layer calls only the layers below it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
