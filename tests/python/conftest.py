# The python tests run against a built tree without installing:
#   PYTHONPATH=python CELTUNE_LIBRARY=build/src/runtime/libceltune.so python -m pytest tests/python
# or against an installed package (pip install .), where neither is needed.
import os
import sys
from pathlib import Path

import pytest

_root = Path(__file__).resolve().parents[2]
if os.environ.get("CELTUNE_LIBRARY") and str(_root / "python") not in sys.path:
    sys.path.insert(0, str(_root / "python"))

torch = pytest.importorskip("torch")


def cuda_ok():
    return torch.cuda.is_available()


def devices():
    """cpu always; cuda where present (marked 'gpu' so `-m gpu` selects them)."""
    out = ["cpu"]
    if cuda_ok():
        out.append(pytest.param("cuda", marks=pytest.mark.gpu))
    else:
        out.append(pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skip(reason="no CUDA device")]))
    return out


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device")
