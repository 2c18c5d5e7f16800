#!/usr/bin/env python3
"""Prints a digest of the headers a CUDA unit may include, then their paths.

kernels/meson.build puts the digest on every CUDA unit's command line and makes
each header a reconfigure dependency: Meson before 1.4 gives nvcc no dependency
flags, so ninja would not otherwise rebuild a CUDA object after a header edit."""
import hashlib
import pathlib
import sys

root = pathlib.Path(sys.argv[1])
paths = sorted(
    p.relative_to(root).as_posix()
    for pattern in ("kernels/**/*.cuh", "kernels/**/*.hpp", "kernels/**/*.h", "src/model/*.hpp", "include/**/*.h")
    for p in root.glob(pattern)
)
h = hashlib.sha256()
for p in paths:
    h.update(p.encode() + b"\0" + (root / p).read_bytes())
print(h.hexdigest()[:16])
print("\n".join(paths))
