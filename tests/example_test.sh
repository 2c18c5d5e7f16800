#!/usr/bin/env bash
# The example consumer builds and links against an installed libceltune found
# through pkg-config alone, and runs (it exits 77, counted here as a skip of
# the run only, where there is no GPU).
# Usage: example_test.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp" --quiet >/dev/null
prefix=$(meson introspect "$build" --buildoptions | python3 -c "import json,sys; print([o['value'] for o in json.load(sys.stdin) if o['name']=='prefix'][0])")
pc=$(dirname "$(find "$tmp" -name celtune.pc | head -1)")
export PKG_CONFIG_PATH=$pc
flags=$(pkg-config --define-variable=prefix="$tmp$prefix" --cflags --libs celtune)
echo "pkg-config celtune: $flags"
cc -std=c11 -Wall -Wextra -Werror "$src/examples/flce_example.c" $flags -lm -o "$tmp/flce_example"
libdir=$(pkg-config --define-variable=prefix="$tmp$prefix" --variable=libdir celtune)
set +e
LD_LIBRARY_PATH=$libdir "$tmp/flce_example"
rc=$?
set -e
if [ $rc -eq 77 ]; then echo "example built and linked; run skipped (no GPU)"; exit 0; fi
exit $rc
