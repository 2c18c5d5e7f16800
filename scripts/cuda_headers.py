#!/usr/bin/env python3
"""Prints a digest of the project headers some CUDA units include, then their paths.

    cuda_headers.py ROOT UNIT...   (UNIT: a source path relative to ROOT)

The headers are the transitive closure of the units' quoted #includes that
resolve inside the project (beside the including file, or under ROOT, src/ or
include/); system and CUTLASS headers are not followed. kernels/meson.build puts
the digest on the units' command lines and makes each header (and each unit) a
reconfigure dependency: Meson before 1.4 gives nvcc no dependency flags, so
ninja would not otherwise rebuild a CUDA object after a header edit."""
import hashlib
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1]).resolve()
include = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
bases = [root, root / "src", root / "include"]


def resolve(name, including):
    for base in [including.parent] + bases:
        p = (base / name).resolve()
        if p.is_file() and root in p.parents:
            return p
    return None


seen, todo = set(), [(root / u).resolve() for u in sys.argv[2:]]
headers = set()
while todo:
    f = todo.pop()
    if f in seen:
        continue
    seen.add(f)
    for name in include.findall(f.read_text(errors="replace")):
        p = resolve(name, f)
        if p is not None:
            headers.add(p)
            todo.append(p)

paths = sorted(p.relative_to(root).as_posix() for p in headers)
h = hashlib.sha256()
for p in paths:
    h.update(p.encode() + b"\0" + (root / p).read_bytes())
print(h.hexdigest()[:16])
print("\n".join(paths))
