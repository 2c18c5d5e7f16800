#!/usr/bin/env python3
"""Prints the CUTLASS include directory of the installed nvidia-cutlass wheel.

The wheel ships CUTLASS's C++ headers under cutlass_library/source/include. The
package is located without importing it (its __init__ pulls optional Python
dependencies the C++ build does not need). Exit 1 when it is not installed.
"""
import importlib.util
import os
import sys

spec = importlib.util.find_spec("cutlass_library")
if spec is None or not spec.submodule_search_locations:
    sys.exit(1)
include = os.path.join(list(spec.submodule_search_locations)[0], "source", "include")
if not os.path.isfile(os.path.join(include, "cute", "tensor.hpp")):
    sys.exit(1)
print(include)
