#!/usr/bin/env bash
# Builds here for sm_90a and stages what the GPU machine runs into .gpu/ (ignored
# by git, carried by the device tool): the CLI, the gpu suite, and libgomp in case
# the machine's image lacks it.
set -euo pipefail
cd "$(dirname "$0")/.."
ninja -C build
rm -rf .gpu && mkdir -p .gpu/lib
cp build/src/cli/celtune build/tests/gpu_tests .gpu/
cp "$(ldd build/src/cli/celtune | awk '/libgomp/ {print $3}')" .gpu/lib/
cp -P build/src/runtime/libceltune.so build/src/runtime/libceltune.so.0 build/src/runtime/libceltune.so.0.1.0 \
  build/src/runtime/celtune.sqlite .gpu/lib/
cc -std=c11 -O2 examples/flce_example.c -Iinclude -I/usr/local/cuda/include -Lbuild/src/runtime -lceltune \
  -L/usr/local/cuda/lib64 -lcudart -lm -o .gpu/flce_example
git rev-parse --short HEAD >.gpu/REVISION
[ -z "$(git status --porcelain -- kernels src validate tuners db)" ] || echo "+uncommitted" >>.gpu/REVISION
du -sh .gpu
