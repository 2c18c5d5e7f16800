#!/usr/bin/env bash
# Suite 'python': the celtune.torch tests (pytest, tests/python) against this
# build's libceltune, without installing anything: the package's source is put
# on PYTHONPATH and CELTUNE_LIBRARY names the built library.
#   tests/python_test.sh BUILD_LIB SOURCE_ROOT JUNIT_XML
# The interpreter is $CELTUNE_PYTHON (scripts/bootstrap points it at the venv
# where it installed torch), else python3; exit 77 (skip) when it lacks torch
# or pytest, as the gpu suite skips without a GPU. CUDA tests skip without CUDA.
set -u
lib=$1 src=$2 junit=$3
py=${CELTUNE_PYTHON:-python3}
if ! "$py" -c "import torch, pytest" >/dev/null 2>&1; then
  echo "skip: $py has no torch and pytest (scripts/bootstrap test installs them)"
  exit 77
fi
rm -f "$junit"
export PYTHONPATH="$src/python${PYTHONPATH:+:$PYTHONPATH}" CELTUNE_LIBRARY=$lib
exec "$py" -m pytest "$src/tests/python" -q -p no:cacheprovider -rfE --junitxml="$junit"
