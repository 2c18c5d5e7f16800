#!/usr/bin/env bash
# Builds here for sm_90a and stages what the GPU machine runs into .gpu/ (ignored
# by git, carried by the device tool): the CLI, the gpu suite, and libgomp in case
# the machine's image lacks it.
#   scripts/gpu_stage.sh [DEST]   DEST: another folder, e.g. .gpu-old for the
#                                 base of `scripts/gpu_run.sh ab` (carry it too)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.gpu}
case $dest in .gpu | .gpu-*) ;; *) echo "gpu_stage: DEST must be .gpu or .gpu-NAME (ignored by git)" >&2; exit 2 ;; esac
ninja -C build
rm -rf "$dest" && mkdir -p "$dest/lib"
cp build/src/cli/celtune build/tests/gpu_tests "$dest/"
cp "$(ldd build/src/cli/celtune | awk '/libgomp/ {print $3}')" "$dest/lib/"
cp -P build/src/runtime/libceltune.so build/src/runtime/libceltune.so.0 build/src/runtime/libceltune.so.0.1.0 \
  build/src/runtime/celtune.sqlite "$dest/lib/"
cc -std=c11 -O2 examples/flce_example.c -Iinclude -I/usr/local/cuda/include -Lbuild/src/runtime -lceltune \
  -L/usr/local/cuda/lib64 -lcudart -lm -o "$dest/flce_example"
git rev-parse --short HEAD >"$dest/REVISION"
[ -z "$(git status --porcelain -- kernels src validate tuners db)" ] || echo "+uncommitted" >>"$dest/REVISION"
# A second staging is a base for `gpu_run.sh ab`, which runs only its CLI: the
# device tool carries 64 MiB, and two whole stagings are ~82 MB (libceltune
# ~39 MB each), so the base keeps the CLI and its libraries gzipped (~16 MB),
# which the ab step unpacks.
if [ "$dest" != .gpu ]; then
  rm -f "$dest/gpu_tests" "$dest/flce_example"
  tar czf "$dest/lib.tgz" -C "$dest" lib && rm -rf "$dest/lib"
fi
du -sh "$dest"
