#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The knot among the broker's files, measured from the built objects.

For every object of broker/ (nm: the global symbols each defines, and those
it leaves undefined) draw an edge A -> B when A uses a symbol B defines: the
file-level call graph. Its strongly connected components are the groups of
files that each reach all others; the largest is "the knot". A core that
knows faces only through one registration interface keeps it small, and no
face reaches another face.

Usage: scripts/knot.py [OBJDIR]      (default build/check; objects under OBJDIR/broker)
       scripts/knot.py --max N ...   exit 1 when the knot has more than N files
"""
import argparse
import os
import subprocess
import sys


def objects(root):
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.join(d, f) for f in files if f.endswith(".o")]
    return sorted(out)


def symbols(obj):
    """(defined, undefined) global symbols of one object."""
    text = subprocess.run(["nm", "-g", obj], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] not in ("U", "w", "v"):
            defined.add(parts[2])
    return defined, undefined


def tarjan(nodes, edges):
    """Strongly connected components (iterative Tarjan)."""
    index, low, on, stack, comps = {}, {}, set(), [], []
    counter = [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


def face_of(name):
    """'http' for broker/faces/http/..., None outside the faces."""
    parts = name.split("/")
    return parts[2] if len(parts) > 3 and parts[1] == "faces" else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("objdir", nargs="?", default="build/check")
    ap.add_argument("--max", type=int, help="fail when the knot has more files than this")
    args = ap.parse_args()
    root = os.path.join(args.objdir, "broker")
    objs = objects(root)
    if not objs:
        sys.exit(f"knot.py: no objects under {root}: build the broker first")
    name = {o: "broker/" + os.path.relpath(o, root)[:-2] + ".c" for o in objs}
    defs, undefs, owner = {}, {}, {}
    for o in objs:
        defs[o], undefs[o] = symbols(o)
        for s in defs[o]:
            owner.setdefault(s, o)
    nodes = [name[o] for o in objs]
    edges = {n: set() for n in nodes}
    via = {}
    for o in objs:
        for s in undefs[o]:
            t = owner.get(s)
            if t and t != o:
                edges[name[o]].add(name[t])
                via.setdefault((name[o], name[t]), []).append(s)
    comps = sorted(tarjan(nodes, edges), key=len, reverse=True)
    knot = comps[0]
    nedges = sum(len(e) for e in edges.values())
    print(f"broker files: {len(nodes)}, file-level call edges: {nedges}")
    print(f"largest strongly connected component (the knot): {len(knot)} files")
    for n in knot:
        print(f"  {n}")
    others = [c for c in comps[1:] if len(c) > 1]
    for c in others:
        print(f"another component of {len(c)} files: {' '.join(c)}")
    print("edges from one face to another face:")
    cross = 0
    for a in nodes:
        for b in sorted(edges[a]):
            fa, fb = face_of(a), face_of(b)
            if fa and fb and fa != fb:
                cross += 1
                syms = ", ".join(sorted(via[(a, b)]))
                print(f"  {a} -> {b}: {syms}")
    if not cross:
        print("  none")
    print("edges from the core (broker/core/) to a face:")
    core_out = 0
    for a in nodes:
        if not a.startswith("broker/core/"):
            continue
        for b in sorted(edges[a]):
            if face_of(b):
                core_out += 1
                print(f"  {a} -> {b}: {', '.join(sorted(via[(a, b)]))}")
    if not core_out:
        print("  none")
    if args.max is not None and len(knot) > args.max:
        print(f"knot.py: the knot has {len(knot)} files, more than {args.max}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
